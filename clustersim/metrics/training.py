"""The summary keys training strategies share: iteration times, device shares, FLOP rates;
the bases of the training families' parts (:class:`TrainingSummary`,
:class:`FlopTrainingSummary`) and what their collectives ran as (:class:`CollectivesRan`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import Record
from .breakdown import DeviceTimes, device_breakdown
from .families import StrategySummary
from .parts import OPTIONAL, SPLICE, SummaryPart

BUBBLE_FRACTION = "mean over the training workers of idle time / run time"
"""The one definition of ``bubble_fraction`` in every training summary (DESIGN's output
contract): the share of the run each worker is idle -- neither computing nor
communicating, e.g. waiting for another pipeline stage or for a slower worker -- averaged
over the workers (parameter servers left out).  ``non_compute_fraction`` keeps the wider
share the pipeline summaries called the bubble before: 1 - compute time / run time
(idle time plus exposed communication)."""


@dataclass(frozen=True)
class IterationTimes(SummaryPart):
    """The first keys of every training summary."""

    iteration_time_s: float
    """Mean of ``iteration_times_s``."""
    iteration_times_s: list[float]
    """Per iteration, from the end of the previous one (or time 0) to its end, seconds."""
    throughput_samples_per_s: float


@dataclass(frozen=True)
class DeviceShares(SummaryPart):
    """Where the devices' time went: the last keys of most training summaries."""

    per_iteration: dict[str, DeviceTimes]
    """Per active device: its breakdown over the run divided by the iterations (seconds)."""
    bubble_fraction: float
    """Mean over the workers of idle time / run time (:data:`BUBBLE_FRACTION`)."""
    non_compute_fraction: float
    """Mean over the workers of 1 - compute time / run time: idle time plus exposed
    communication."""


@dataclass(frozen=True)
class TrainingTimes(SummaryPart):
    """What :func:`training_summary` measures: iteration times and device shares."""

    times: IterationTimes = field(metadata=SPLICE)
    shares: DeviceShares = field(metadata=SPLICE)


@dataclass(frozen=True)
class FlopRates(SummaryPart):
    """The FLOP keys of a training summary (see :func:`flop_rates`)."""

    tflops_per_gpu: float
    model_tflops_per_gpu: float
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float


@dataclass(frozen=True)
class ModelInfo(SummaryPart):
    """The ``model`` block of a training summary."""

    name: str
    params: float
    """Parameter count."""


@dataclass(frozen=True)
class TrainingSummary(StrategySummary):
    """Base of the training families: their summaries start with the iteration times."""

    times: IterationTimes = field(metadata=SPLICE)

    def iteration_times(self) -> list[float]:
        return list(self.times.iteration_times_s or [])

    def job_workers(self) -> int:
        """Devices the job trains on: its ``workers`` (every replica's in one-replica mode)."""
        return len(getattr(self, "workers", None) or [])


@dataclass(frozen=True)
class FlopTrainingSummary(TrainingSummary):
    """Base of the training families that count FLOPs: after the times come the FLOP
    rates, the model, the workers and the global batch."""

    flops: FlopRates = field(metadata=SPLICE)
    model: ModelInfo
    workers: list[str]
    global_batch: float

    def replicas(self) -> list[list[str]]:
        """Each worker holds a whole replica (data parallelism, ZeRO)."""
        return [[w] for w in self.workers or []]


@dataclass(frozen=True)
class TypeShares(SummaryPart):
    """The batch shares of the ranks of one type (:class:`BatchShares`)."""

    ranks: int
    """Ranks of this type: workers (data_parallel, zero) or replicas (pipeline)."""
    share_min: int
    """The smallest share of one of them, in the block's ``unit``."""
    share_max: int
    """The largest share of one of them, in the block's ``unit``."""
    samples: float
    """Samples per iteration of these ranks together."""


@dataclass(frozen=True)
class BatchShares(SummaryPart):
    """``batch_shares``: how the global batch was shared out when ``data_parallel.balance``
    is not ``even`` -- per type of rank, so it stays small on 16,384 GPUs."""

    balance: str
    """``speed`` or ``weights``."""
    unit: str
    """What a share counts: ``sample`` (a worker's samples) or ``micro-batch`` (a
    replica's micro-batches, each ``micro_batch_size`` samples)."""
    types: dict[str, TypeShares]
    """Per type of rank (a GPU type; a replica over several types joins them with ``+``),
    in rank order."""

    @classmethod
    def of(
        cls,
        balance: str,
        unit: str,
        labels: Sequence[str],
        shares: Sequence[int],
        samples_per_unit: float = 1.0,
    ) -> BatchShares:
        """The block of ``shares`` (per rank, in ``unit``) of ranks of types ``labels``."""
        groups: dict[str, list[int]] = {}
        for label, share in zip(labels, shares, strict=True):
            groups.setdefault(label, []).append(share)
        types = {
            label: TypeShares(len(got), min(got), max(got), sum(got) * samples_per_unit)
            for label, got in groups.items()
        }
        return cls(balance, unit, types)

    def describe(self) -> str:
        """``16 x a100-sxm4-80gb 5-6 samples, 16 x h100-sxm5-80gb 10 samples`` (validate's line)."""
        words, units = [], self.unit + ("es" if self.unit.endswith("h") else "s")
        for label, got in self.types.items():
            span = f"{got.share_min}" + (
                f"-{got.share_max}" if got.share_max > got.share_min else ""
            )
            words.append(f"{got.ranks} x {label} {span} {units}")
        return ", ".join(words)


@dataclass(frozen=True)
class CollectivesRan(SummaryPart):
    """What ran for one kind of communicator of a training run (``auto`` resolved)."""

    algorithm: str
    """The algorithm asked for (``auto``: NCCL's choice)."""
    protocol: str
    """The protocol asked for (``auto``, ``LL``, ``LL128``, ``Simple`` or ``none``)."""
    channels: int
    """Channels per collective (``auto``: NCCL's count for the communicators' groups)."""
    chosen: dict[str, int]
    """``algorithm/protocol`` -> how many of one iteration's collectives ran so."""
    channels_played: int | None = field(default=None, metadata=OPTIONAL)
    """Slices simulated per collective, when fewer than ``channels`` (copies merged)."""


def training_summary(
    clock: Any,
    records: Sequence[Record],
    iterations: int,
    global_batch: float,
    devices: Sequence[str],
    workers: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> TrainingTimes:
    """The summary keys every training strategy shares, from its ``IterationClock``.

    * ``iteration_times_s`` -- per iteration, from the end of the previous one
      (or time 0) to the moment its last worker ended it (seconds);
    * ``iteration_time_s`` -- their mean;
    * ``throughput_samples_per_s`` -- ``global_batch`` / ``iteration_time_s``;
    * ``per_iteration`` -- for each of ``devices`` that was active, its
      compute / communication / exposed communication / idle seconds over the
      run up to the last iteration's end, divided by the number of iterations
      (the mean per iteration, as the iteration windows tile the run);
    * ``bubble_fraction`` -- mean over the active ``workers`` (the devices that train;
      default ``devices``) of idle time / run time (:data:`BUBBLE_FRACTION`);
    * ``non_compute_fraction`` -- mean over the same workers of 1 - compute time / run time.

    ``weights`` (worker -> devices it stands for; default 1 each) weighs both means: a
    played replica standing for a class of alike ones (``simulate_replicas: one``).

    ``clock`` is a :class:`clustersim.strategies.training.IterationClock`.
    """
    times = clock.iteration_times(iterations)
    done = len(times)
    mean = sum(times) / done if done else 0.0
    run_s = sum(times)
    breakdown = device_breakdown(records, run_s, devices) if done else {}
    per_iteration = {
        name: DeviceTimes(**{key: value / done for key, value in row.items()})
        for name, row in breakdown.items()
    }
    training = set(devices if workers is None else workers)
    rows = {name: row for name, row in breakdown.items() if name in training and run_s > 0}
    idle = {name: row["idle_s"] / run_s for name, row in rows.items()}
    non_compute = {name: 1.0 - row["compute_s"] / run_s for name, row in rows.items()}
    return TrainingTimes(
        IterationTimes(
            iteration_time_s=mean,
            iteration_times_s=list(times),
            throughput_samples_per_s=global_batch / mean if mean > 0 else 0.0,
        ),
        DeviceShares(
            per_iteration=per_iteration,
            bubble_fraction=weighted_mean(idle, weights),
            non_compute_fraction=weighted_mean(non_compute, weights),
        ),
    )


def weighted_mean(values: Mapping[str, float], weights: Mapping[str, float] | None) -> float:
    """The mean of ``values`` (name -> value), each weighted by ``weights[name]`` (all 1 when
    None: the plain mean, summed in the values' order); 0 for no values."""
    if not values:
        return 0.0
    if weights is None:
        return sum(values.values()) / len(values)
    total = sum(weights[name] for name in values)
    return sum(value * weights[name] for name, value in values.items()) / total


def flop_rates(
    model_flops: float, hardware_flops: float, iteration_s: float, gpus: int
) -> FlopRates:
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
    )
