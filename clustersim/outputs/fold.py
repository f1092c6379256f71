"""Folding devices: one stands for many, in the Gantt chart and in a folded run folder.

* In one-replica mode (``parallelism.simulate_replicas: one``) the summary's
  ``workers`` are the simulated replica's devices (``workers_simulated`` of
  ``workers_total``).  The other replicas' devices hold only the analytical
  gradient all-reduce, so they are left out of the chart (no phantom rows);
  each simulated row stands for ``workers_total / workers_simulated`` devices (where
  one replica of each class of alike replicas is played, ``replica_classes``, a row
  stands for its class's replicas).
* Rows whose boxes are identical (same record kinds and phases, micro-batches and start and end
  times to :data:`TIME_DIGITS` decimals of a second) -- the tensor-parallel ranks
  of a stage, the data-parallel replicas of a symmetric run -- are drawn once,
  as their first device, with the number of devices the row stands for.
* A folded run folder (:mod:`.modes`) keeps one replica's records in ``timeline.csv``
  and ``trace.json`` (:func:`fold_devices`): replica 0 (the simulated one in one-replica
  mode), each of its devices standing for its twins in the other replicas; a workload
  without replicas keeps one device of each set of identical rows, as the chart does.
  summary.json's ``folded.rows`` says so, and the chart drawn from such a timeline labels
  its rows with what they stand for (:func:`shown_devices`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..metrics import FoldedRows, Summary
from ..records import Record, phase_of
from .trace_tracks import natural_key

TIME_DIGITS = 9
"""Start and end times are compared rounded to this many decimals (1 ns)."""


def simulated_workers(summary: Summary | Mapping[str, object]) -> tuple[set[str], int]:
    """The simulated workers and how many devices each stands for (1 unless one-replica mode).

    An empty set means every device with records is shown."""
    data: Mapping[str, object] = (
        summary
        if isinstance(summary, Mapping)
        else {
            k: getattr(summary, k, None) for k in ("workers_simulated", "workers_total", "workers")
        }
    )
    simulated, total = data.get("workers_simulated"), data.get("workers_total")
    workers = data.get("workers")
    if (
        isinstance(simulated, int)
        and isinstance(total, int)
        and 0 < simulated < total
        and isinstance(workers, list)
        and workers
    ):
        return {str(w) for w in workers}, max(total // simulated, 1)
    return set(), 1


def _class_weights(summary: Summary | Mapping[str, object]) -> dict[str, int]:
    """Each played worker -> the replicas its class holds, where one replica of each class
    of alike replicas stands for the others (summary.json's ``replica_classes``: the
    workers are listed replica by replica, in the classes' order); {} otherwise."""
    get = summary.get if isinstance(summary, Mapping) else lambda k: getattr(summary, k, None)
    classes, workers = get("replica_classes"), get("workers")
    if not isinstance(classes, list) or not classes or not isinstance(workers, list):
        return {}
    sizes = [c["replicas"] if isinstance(c, Mapping) else c.replicas for c in classes]
    per_replica = len(workers) // len(sizes)
    return {str(w): sizes[i // per_replica] for i, w in enumerate(workers)}


def shown_devices(summary: Summary | Mapping[str, object]) -> tuple[set[str], dict[str, int]]:
    """The devices a chart shows and what each stands for: the simulated workers in
    one-replica mode, else those a folded timeline holds (``folded.rows`` naming a timeline
    file); an empty set means every device with records."""
    workers, weight = simulated_workers(summary)
    if workers:
        return workers, _class_weights(summary) or dict.fromkeys(workers, weight)
    folded = Summary.of(summary).folded
    rows = folded.rows if folded is not None else None
    timeline = rows is not None and any(f.startswith("timeline.") for f in rows.files or [])
    if rows is not None and timeline and rows.stands_for:
        return set(rows.stands_for), dict(rows.stands_for)
    return set(), {}


def fold_rows(
    rows: Sequence[str], records: Sequence[Record], weight: int | Mapping[str, int] = 1
) -> tuple[list[str], list[int]]:
    """Rows with identical boxes folded into their first: (kept rows, devices each stands for).

    ``records`` are sorted (:func:`~clustersim.records.sorted_records`); ``weight`` is what
    one device stands for (the replicas of one-replica mode), or each device's."""
    boxes: dict[str, list[tuple[object, ...]]] = {d: [] for d in rows}
    for r in records:
        row = boxes.get(r.resource)
        if row is not None:
            start, end = round(r.start_s, TIME_DIGITS), round(r.end_s, TIME_DIGITS)
            row.append((r.kind, phase_of(r), start, end, r.microbatch))
    first: dict[tuple[object, ...], int] = {}
    kept: list[str] = []
    counts: list[int] = []
    for device in rows:
        own = weight.get(device, 1) if isinstance(weight, Mapping) else weight
        key = tuple(boxes[device])
        if key in first:
            counts[first[key]] += own
            continue
        first[key] = len(kept)
        kept.append(device)
        counts.append(own)
    return kept, counts


@dataclass(frozen=True)
class DeviceFold:
    """The devices a folded run folder keeps the records of, and what each stands for."""

    fold: str
    """``replica`` or ``identical`` (:class:`clustersim.metrics.FoldedRows`)."""
    stands_for: dict[str, int]
    """Each kept device -> the devices it stands for, itself included."""
    dropped: frozenset[str]
    """Devices whose records are left out."""
    devices: int
    """Devices with records in the run."""
    records: int
    """Records that stay."""
    records_total: int
    """Records of the run."""
    replicas: int | None = None
    """``replica`` fold: the run's replicas."""

    def keeps(self, record: Record) -> bool:
        """Whether a record stays: it is not on a dropped device (a link's record stays)."""
        return record.resource not in self.dropped

    def kept(self, records: Iterable[Record]) -> list[Record]:
        """The records that stay, in their order."""
        dropped = self.dropped
        return [r for r in records if r.resource not in dropped]

    def block(self, files: Sequence[str]) -> FoldedRows:
        """summary.json's ``folded.rows`` for the folded ``files``."""
        return FoldedRows(
            self.fold,
            list(files),
            self.devices,
            len(self.stands_for),
            self.records,
            self.records_total,
            dict(self.stands_for),
            self.replicas,
        )

    def sentence(self, flag: str) -> str:
        """What was left out, in words, and the flag that writes everything."""
        left = len(self.dropped)
        if self.replicas:
            return (
                f"folded: replica 0 of {self.replicas} shown, each of its devices standing "
                f"for {self.replicas} (x {self.replicas}); the {left:,} devices of the other "
                f"replicas are left out ({flag} all writes every device)"
            )
        return (
            f"folded: {len(self.stands_for):,} of {self.devices:,} devices shown, each "
            f"standing for the devices whose records are identical to its own (x N); "
            f"{left:,} devices left out ({flag} all writes every device)"
        )


def fold_devices(
    summary: Summary | Mapping[str, object], records: Sequence[Record]
) -> DeviceFold | None:
    """One replica standing for all (replica 0 of
    :meth:`~clustersim.metrics.StrategySummary.replicas`), or for a workload without
    replicas one device of each set with identical rows (:func:`fold_rows`); None when
    nothing would be left out.  ``records`` are sorted."""
    typed = Summary.of(summary)
    busy: dict[str, None] = {}
    for r in records:
        busy.setdefault(r.resource)
    replicas = typed.strategy.replicas()
    if len(replicas) > 1:
        first = [d for d in replicas[0] if d in busy]
        shown = set(first)
        others = {d for replica in replicas[1:] for d in replica if d in busy and d not in shown}
        if not (first and others):
            return None
        count = len(replicas)
        return _fold("replica", dict.fromkeys(first, count), others, busy, records, count)
    rows = sorted(busy, key=natural_key)
    kept, counts = fold_rows(rows, records)
    if len(kept) == len(rows):
        return None
    return _fold("identical", dict(zip(kept, counts)), set(rows) - set(kept), busy, records)


def _fold(
    how: str,
    stands_for: dict[str, int],
    dropped: set[str],
    busy: Mapping[str, None],
    records: Sequence[Record],
    replicas: int | None = None,
) -> DeviceFold:
    """The fold, its records counted."""
    kept = sum(1 for r in records if r.resource not in dropped)
    return DeviceFold(how, stands_for, frozenset(dropped), len(busy), kept, len(records), replicas)
