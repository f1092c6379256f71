"""summary.json's ``folded`` block: what of a run folder was folded, and how to read it.

Runs on a cluster of many devices (4,096 or more by default,
:data:`clustersim.outputs.modes.FOLD_AT`) write their run folder folded, so a person can
open it: summary.json keeps each per-device entry's highest and lowest devices only (every
device in ``devices.csv``), ``timeline.csv`` and ``trace.json`` hold one replica and
``links.csv`` holds equal links once.  The
block says what was folded, so no reader takes a folded file for the whole run; it is
absent when nothing was folded (every run below the threshold), so those summaries stay
byte for byte what they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parts import OPTIONAL, SummaryPart


@dataclass(frozen=True)
class FoldedEntry(SummaryPart):
    """One per-device entry of summary.json cut to its extremes (``folded.summary.entries``)."""

    by: str
    """What the devices were ranked by: a field of the entry's rows (``idle_s``,
    ``peak_bytes``, ...; the mean over a list's items) or ``value`` for a number."""
    devices: int
    """Devices the entry holds in full (each of them a row of ``devices.csv``)."""
    shown: int
    """Devices left in summary.json: the highest by ``by``, then the lowest."""


@dataclass(frozen=True)
class FoldedSummary(SummaryPart):
    """``folded.summary``: the per-device entries cut to their extremes."""

    file: str
    """The file holding every device of every entry (``devices.csv``)."""
    entries: dict[str, FoldedEntry]
    """Per entry's key path (``devices``, ``memory.per_device``, ...): how it was cut."""


@dataclass(frozen=True)
class FoldedRows(SummaryPart):
    """``folded.rows``: the records the timeline and trace files hold."""

    fold: str
    """``replica``: one replica's devices (replica 0, the simulated one in one-replica
    mode); ``identical``: one device of each set whose records are identical (a workload
    without replicas; the Gantt chart's folding)."""
    files: list[str]
    """The files folded (``timeline.csv`` or ``timeline.parquet``, ``trace.json``)."""
    devices: int
    """Devices with records in the run."""
    shown: int
    """Devices whose records the folded files hold."""
    records: int
    """Records the folded files hold."""
    records_total: int
    """Records of the run."""
    stands_for: dict[str, int]
    """Each shown device -> the devices it stands for, itself included (``x N``)."""
    replicas: int | None = field(default=None, metadata=OPTIONAL)
    """``replica`` fold: the run's replicas, of which replica 0 is shown."""


@dataclass(frozen=True)
class FoldedLinks(SummaryPart):
    """``folded.links``: links.csv with equal rows once, each counting its links."""

    file: str
    """``links.csv``."""
    links: int
    """Links that carried traffic (a row each unfolded)."""
    rows: int
    """Rows of the folded file (its ``links`` column says how many links each stands for)."""


@dataclass(frozen=True)
class FoldedOutputs(SummaryPart):
    """summary.json's ``folded`` block (written only when something was folded)."""

    devices: int
    """Devices of the cluster."""
    fold_at: int
    """Devices from which the ``auto`` output modes fold."""
    summary: FoldedSummary | None = field(default=None, metadata=OPTIONAL)
    rows: FoldedRows | None = field(default=None, metadata=OPTIONAL)
    links: FoldedLinks | None = field(default=None, metadata=OPTIONAL)
