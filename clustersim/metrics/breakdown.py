"""Metrics derived from records: per-device breakdown and link utilisation.

Definitions (all times in simulated seconds, over the whole run of length
``makespan_s``):

* ``compute_s`` -- time the device's compute stream was busy;
* ``communication_s`` -- time at least one transfer from or to the device
  (or a collective it takes part in) was in flight;
* ``exposed_communication_s`` -- communication time not hidden behind
  compute (communication_s minus its overlap with compute);
* ``idle_s`` -- time with neither compute nor communication.

A link's ``utilisation`` is bytes carried / (nominal bandwidth x makespan);
``busy_fraction`` is the share of the run with at least one flow on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..records import Record, RecordLog
from .link_table import LinkTable, build_link_table
from .parts import OPTIONAL, SummaryPart
from .spans import device_spans

Interval = tuple[float, float]


@dataclass(frozen=True)
class DeviceTimes(SummaryPart):
    """One device's row of ``devices`` (or ``per_iteration``): seconds, defined above."""

    compute_s: float
    communication_s: float
    exposed_communication_s: float
    idle_s: float
    type: str | None = field(default=None, metadata=OPTIONAL)
    """The device's type (its preset) in a mixed cluster; None otherwise."""


@dataclass(frozen=True)
class LinkLoad(SummaryPart):
    """One row of ``busiest_links`` (and of links.csv): what a link carried."""

    link: str
    bandwidth_Bps: float
    bytes: float
    busy_s: float
    """Seconds with at least one flow on the link."""
    busy_fraction: float
    utilisation: float
    """Bytes carried over nominal bandwidth x makespan, 0..1."""
    peak_flows: int


def union_length(intervals: Iterable[Interval]) -> float:
    """Total length (s) covered by ``intervals``, overlaps counted once."""
    pairs = list(intervals)
    return _union([p[0] for p in pairs], [p[1] for p in pairs])


def union_of(starts: np.ndarray, ends: np.ndarray) -> float:
    """:func:`union_length` of the intervals ``[starts[i], ends[i]]`` (s), vectorised.

    The intervals in order of start, a busy period ends where the next start lies beyond
    every end so far; the periods' lengths are added one by one in time order, as the
    sequential sweep adds them, so the sum is the same to the last bit."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    breaks = np.flatnonzero(starts[1:] > reach[:-1])
    first = np.concatenate(([0], breaks + 1))
    last = np.concatenate((breaks, [len(starts) - 1]))
    total = 0.0
    for length in (reach[last] - starts[first]).tolist():  # not sum(): Python 3.12's
        total += length  # compensates float sums, another last bit than the sweep's
    return total


def device_breakdown(
    records: Sequence[Record], makespan_s: float, device_order: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Compute / communication / exposed communication / idle seconds per active device.

    Devices that neither computed nor communicated are left out; the order is
    ``device_order`` (the topology's).  The busy time of each device is added up once per
    run (:class:`~clustersim.records.RecordLog`), whatever the makespan and devices asked.
    """
    if isinstance(records, RecordLog):
        busy = records.derived("device_busy", device_busy)
    else:
        busy = device_busy(records)
    out: dict[str, dict[str, float]] = {}
    for name in device_order:
        times = busy.get(name)
        if times is None:
            continue
        compute_s, comm_s, busy_s = times
        out[name] = {
            "compute_s": compute_s,
            "communication_s": comm_s,
            "exposed_communication_s": busy_s - compute_s,
            "idle_s": max(makespan_s - busy_s, 0.0),
        }
    return out


def device_busy(records: Sequence[Record]) -> dict[str, tuple[float, float, float]]:
    """Per device that computed or communicated: seconds of compute, of communication, and of
    either (each a union of intervals, overlaps counted once; :mod:`.spans` takes them for
    all devices at once)."""
    return device_spans(records).busy()


SMALL = 64
"""Up to this many intervals a device's union is swept in Python: numpy's cost per call
would be most of the work (a 131,072-GPU run has that many devices of a few intervals)."""


def _union(starts: list[float], ends: list[float]) -> float:
    """:func:`union_of` of lists: the sequential sweep for :data:`SMALL` intervals or
    fewer, numpy above (the same sum to the last bit either way)."""
    if len(starts) > SMALL:
        return union_of(np.array(starts, float), np.array(ends, float))
    total = 0.0
    first = reach = None
    for start, end in sorted(zip(starts, ends)):
        if reach is None or start > reach:
            if reach is not None:
                total += reach - first
            first, reach = start, end
        elif end > reach:
            reach = end
    return total if reach is None else total + (reach - first)


def link_table(link_stats: Sequence[Any], links: Sequence[Any], makespan_s: float) -> LinkTable:
    """Every link that carried bytes, busiest (by utilisation) first: a
    :class:`~clustersim.metrics.link_table.LinkTable` of rows with ``link``,
    ``bandwidth_Bps``, ``bytes``, ``busy_s``, ``busy_fraction``, ``utilisation`` and
    ``peak_flows``, from per-link stats (``index``, ``bytes``, ``busy_s``, ``peak_flows``)."""
    n = len(link_stats)
    return build_link_table(
        np.fromiter((s.index for s in link_stats), np.int64, n),
        np.fromiter((s.bytes for s in link_stats), float, n),
        np.fromiter((s.busy_s for s in link_stats), float, n),
        np.fromiter((s.peak_flows for s in link_stats), np.int64, n),
        links,
        makespan_s,
    )
