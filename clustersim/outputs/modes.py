"""What a run folder holds: the output modes of ``clustersim run`` and ``Result.write``.

A run on a cluster of :data:`FOLD_AT` devices or more is written folded by default, so a
person can open its folder (a 16,384-GPU run wrote 790 MB unfolded):

* ``trace`` -- ``all``: every record; ``replica``: one replica's records (the others
  stand for the same work: :mod:`.fold`); ``auto``: ``replica`` at scale, else ``all``;
* ``timeline`` -- the timeline's format: ``csv`` (``timeline.csv``) or ``parquet``
  (``timeline.parquet``, the same columns, for pandas);
* ``timeline_rows`` -- ``all``, ``replica`` or ``auto``, as ``trace``;
* ``summary_devices`` -- ``all``: summary.json lists every device in its per-device
  entries; ``extremes``: the highest and lowest :data:`.devices.SHOWN` devices of each
  (every device in ``devices.csv``); ``auto``: ``extremes`` at scale, else ``all``;
* ``links`` -- ``all``: a row per busy link; ``folded``: links with equal rows once, with
  the count (:func:`.links.fold_links`); ``auto``: ``folded`` at scale, else ``all``.

What was folded is written in summary.json's ``folded`` block
(:mod:`clustersim.metrics.folding`) and in trace.json itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import Problem, ScenarioError

FOLD_AT = 4096
"""Devices of the cluster from which the ``auto`` modes fold the run folder."""

ROW_CHOICES = ("auto", "all", "replica")
"""Choices of ``trace`` and ``timeline_rows``."""
TIMELINE_FORMATS = ("csv", "parquet")
"""Choices of ``timeline``: the file ``timeline.csv`` or ``timeline.parquet``."""
SUMMARY_CHOICES = ("auto", "all", "extremes")
"""Choices of ``summary_devices``."""
LINK_CHOICES = ("auto", "all", "folded")
"""Choices of ``links``."""


@dataclass(frozen=True)
class OutputModes:
    """How a run folder is written (see the module docstring); ``fold_at``: devices from
    which ``auto`` folds.  A choice outside the allowed ones is a ScenarioError at the
    flag's name."""

    trace: str = "auto"
    timeline: str = "csv"
    timeline_rows: str = "auto"
    summary_devices: str = "auto"
    links: str = "auto"
    fold_at: int = FOLD_AT

    def __post_init__(self) -> None:
        for flag, value, allowed in (
            ("--trace", self.trace, ROW_CHOICES),
            ("--timeline", self.timeline, TIMELINE_FORMATS),
            ("--timeline-rows", self.timeline_rows, ROW_CHOICES),
            ("--summary-devices", self.summary_devices, SUMMARY_CHOICES),
            ("--links", self.links, LINK_CHOICES),
        ):
            if value not in allowed:
                raise ScenarioError(Problem(flag, f"unknown mode {value!r}", ", ".join(allowed)))
        if not isinstance(self.fold_at, int) or self.fold_at < 1:
            raise ScenarioError(Problem("fold_at", f"{self.fold_at!r}", "a whole number >= 1"))

    def resolved(self, devices: int) -> OutputModes:
        """The modes for a cluster of ``devices`` devices: every ``auto`` decided."""
        scale = devices >= self.fold_at

        def pick(value: str, folded: str) -> str:
            return (folded if scale else "all") if value == "auto" else value

        return replace(
            self,
            trace=pick(self.trace, "replica"),
            timeline_rows=pick(self.timeline_rows, "replica"),
            summary_devices=pick(self.summary_devices, "extremes"),
            links=pick(self.links, "folded"),
        )

    @property
    def timeline_file(self) -> str:
        """``timeline.csv`` or ``timeline.parquet``."""
        return f"timeline.{self.timeline}"
