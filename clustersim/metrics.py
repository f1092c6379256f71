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

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .records import COMMUNICATION_KINDS, Record

Interval = tuple[float, float]


class SummaryPart:
    """A typed piece of summary.json: :meth:`as_dict` gives its keys in field order."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as summary keys, in declaration order (nested values as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunHeader(SummaryPart):
    """The keys every summary.json starts with."""

    scenario: str
    seed: int
    workload: str
    """The strategy that ran (its registered name)."""
    clustersim_version: str
    makespan_s: float
    """End of the last record, seconds."""


@dataclass(frozen=True)
class EngineCounters(SummaryPart):
    """summary.json's ``engine`` block: how much work the simulation did."""

    records: int
    flows_completed: int
    rate_recomputations: int


@dataclass(frozen=True)
class TrainingTimes(SummaryPart):
    """The timing keys every training strategy shares (see :func:`training_summary`)."""

    iteration_time_s: float
    iteration_times_s: list[float]
    throughput_samples_per_s: float
    per_iteration: dict[str, dict[str, float]]
    bubble_fraction: float


@dataclass(frozen=True)
class FlopRates(SummaryPart):
    """The FLOP keys of a training summary (see :func:`flop_rates`)."""

    tflops_per_gpu: float
    model_tflops_per_gpu: float
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float


def union_length(intervals: Iterable[Interval]) -> float:
    """Total length (s) covered by ``intervals``, overlaps counted once."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def device_breakdown(
    records: Sequence[Record], makespan_s: float, device_order: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Compute / communication / exposed communication / idle seconds per active device.

    Devices that neither computed nor communicated are left out; the order is
    ``device_order`` (the topology's).
    """
    compute: dict[str, list[Interval]] = {}
    comm: dict[str, list[Interval]] = {}
    for r in records:
        if r.kind == "compute":
            compute.setdefault(r.resource, []).append((r.start_s, r.end_s))
        elif r.kind in COMMUNICATION_KINDS:
            comm.setdefault(r.src, []).append((r.start_s, r.end_s))
            if r.dst != r.src:
                comm.setdefault(r.dst, []).append((r.start_s, r.end_s))
    out: dict[str, dict[str, float]] = {}
    for name in device_order:
        c = compute.get(name, [])
        m = comm.get(name, [])
        if not c and not m:
            continue
        compute_s = union_length(c)
        comm_s = union_length(m)
        busy_s = union_length(c + m)
        out[name] = {
            "compute_s": compute_s,
            "communication_s": comm_s,
            "exposed_communication_s": busy_s - compute_s,
            "idle_s": max(makespan_s - busy_s, 0.0),
        }
    return out


def link_table(
    link_stats: Sequence[Any], links: Sequence[Any], makespan_s: float
) -> list[dict[str, Any]]:
    """Every link that carried bytes, busiest (by utilisation) first."""
    rows = []
    for stat in link_stats:
        if stat.bytes <= 0 and stat.peak_flows == 0:
            continue
        link = links[stat.index]
        capacity = link.bandwidth_Bps * makespan_s
        rows.append(
            {
                "link": link.name,
                "bandwidth_Bps": link.bandwidth_Bps,
                "bytes": stat.bytes,
                "busy_s": stat.busy_s,
                "busy_fraction": stat.busy_s / makespan_s if makespan_s > 0 else 0.0,
                "utilisation": stat.bytes / capacity if capacity > 0 else 0.0,
                "peak_flows": stat.peak_flows,
            }
        )
    rows.sort(key=lambda r: (-r["utilisation"], -r["bytes"], r["link"]))
    return rows


def _canonical(value: Any) -> Any:
    """Floats rounded to 12 significant digits, so summaries compare byte for byte."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def canonical_json(summary: dict[str, Any]) -> str:
    """The text of summary.json: stable key order (as built), rounded floats, newline at end."""
    return json.dumps(_canonical(summary), indent=2, ensure_ascii=False) + "\n"


def training_summary(
    clock: Any,
    records: Sequence[Record],
    iterations: int,
    global_batch: float,
    devices: Sequence[str],
) -> dict[str, Any]:
    """The summary keys every training strategy shares, from its ``IterationClock``.

    * ``iteration_times_s`` -- per iteration, from the end of the previous one
      (or time 0) to the moment its last worker ended it (seconds);
    * ``iteration_time_s`` -- their mean;
    * ``throughput_samples_per_s`` -- ``global_batch`` / ``iteration_time_s``;
    * ``per_iteration`` -- for each of ``devices`` that was active, its
      compute / communication / exposed communication / idle seconds over the
      run up to the last iteration's end, divided by the number of iterations
      (the mean per iteration, as the iteration windows tile the run);
    * ``bubble_fraction`` -- mean over those devices of idle time / run time.

    ``clock`` is a :class:`clustersim.training.IterationClock`.
    """
    times = clock.iteration_times(iterations)
    done = len(times)
    mean = sum(times) / done if done else 0.0
    run_s = sum(times)
    breakdown = device_breakdown(records, run_s, devices) if done else {}
    per_iteration = {
        name: {key: value / done for key, value in row.items()} for name, row in breakdown.items()
    }
    idle = [row["idle_s"] / run_s for row in breakdown.values() if run_s > 0]
    return TrainingTimes(
        iteration_time_s=mean,
        iteration_times_s=list(times),
        throughput_samples_per_s=global_batch / mean if mean > 0 else 0.0,
        per_iteration=per_iteration,
        bubble_fraction=sum(idle) / len(idle) if idle else 0.0,
    ).as_dict()


def flop_rates(
    model_flops: float, hardware_flops: float, iteration_s: float, gpus: int
) -> dict[str, float]:
    """The FLOP keys of a training summary.

    ``model_flops_per_iteration`` (forward + backward over the global batch),
    ``hardware_flops_per_iteration`` (plus recomputation: what Megatron-LM's
    96 B s l h^2 (...) formula counts), and per GPU in TFLOP/s over the mean
    iteration time: ``tflops_per_gpu`` (hardware, Narayanan et al.'s
    "achieved TFLOP/s per GPU") and ``model_tflops_per_gpu``.
    """
    per_gpu = iteration_s * gpus * 1e12
    return FlopRates(
        tflops_per_gpu=hardware_flops / per_gpu if per_gpu > 0 else 0.0,
        model_tflops_per_gpu=model_flops / per_gpu if per_gpu > 0 else 0.0,
        model_flops_per_iteration=model_flops,
        hardware_flops_per_iteration=hardware_flops,
    ).as_dict()
