"""Folding the Gantt chart's rows: simulated workers only, identical rows once, marked ``x N``.

* In one-replica mode (``parallelism.simulate_replicas: one``) the summary's
  ``workers`` are the simulated replica's devices (``workers_simulated`` of
  ``workers_total``).  The other replicas' devices hold only the analytical
  gradient all-reduce, so they are left out of the chart (no phantom rows);
  each simulated row stands for ``workers_total / workers_simulated`` devices.
* Rows whose boxes are identical (same record kinds and phases, micro-batches and start and end
  times to :data:`TIME_DIGITS` decimals of a second) -- the tensor-parallel ranks
  of a stage, the data-parallel replicas of a symmetric run -- are drawn once,
  as their first device, with the number of devices the row stands for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import Summary
from ..records import Record, phase_of

TIME_DIGITS = 9
"""Start and end times are compared rounded to this many decimals (1 ns)."""


def simulated_workers(summary: Summary | Mapping[str, object]) -> tuple[set[str], int]:
    """The simulated workers and how many devices each stands for (1 unless one-replica mode).

    An empty set means every device with records is shown."""
    data = Summary.of(summary).as_dict()
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


def fold_rows(
    rows: Sequence[str], records: Sequence[Record], weight: int = 1
) -> tuple[list[str], list[int]]:
    """Rows with identical boxes folded into their first: (kept rows, devices each stands for).

    ``records`` are sorted (:func:`~clustersim.records.sorted_records`); ``weight`` is what
    one device stands for (the replicas of one-replica mode)."""
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
        key = tuple(boxes[device])
        if key in first:
            counts[first[key]] += weight
            continue
        first[key] = len(kept)
        kept.append(device)
        counts.append(weight)
    return kept, counts
