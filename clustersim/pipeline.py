"""Pipeline schedules, stage splitting and the theoretical bubble.

A pipeline of ``p`` stage devices trains ``m`` micro-batches per iteration and
ends each iteration with a *flush* (every backward done, then the optimizer
step).  A :class:`Schedule` says, for each stage device, the order in which
it runs its operations: :class:`Op` ``("fwd" | "bwd", micro-batch j, chunk c)``.
Schedules are plugins: a subclass of :class:`Schedule` that defines ``name``
registers itself (:func:`registered_schedules`).  Built in:

* ``naive`` -- one micro-batch at a time through all stages and back
  (``F0 B0 F1 B1 ...`` on every stage); bubble ``(p-1)/p``;
* ``gpipe`` -- all forwards, then all backwards in reverse order (GPipe,
  Huang et al. 2019); bubble ``(p-1)/(m+p-1)``, stage ``s`` stores ``m``
  micro-batches of activations;
* ``1f1b`` -- PipeDream-Flush (Narayanan et al. 2021): ``min(p-s-1, m)``
  warm-up forwards, then one forward and one backward alternately, then the
  remaining backwards; the same bubble as GPipe but at most ``min(p-s, m)``
  micro-batches stored on stage ``s``;
* ``interleaved`` -- Megatron-LM's interleaved 1F1B (Narayanan et al. 2021):
  each device holds ``v`` model chunks; chunk ``c`` of device ``s`` is virtual
  stage ``c p + s``; ``m`` must be a multiple of ``p``; bubble
  ``(p-1)/(v m + p - 1)``.

Dependencies (what the simulator enforces, not the schedule): the forward of
``(j, c)`` on virtual stage ``k`` needs the activation of ``(j, c)`` from
virtual stage ``k-1`` (none for ``k = 0``); its backward needs the gradient
from virtual stage ``k+1`` (the last virtual stage needs its own forward).
:func:`ideal_timeline` plays a schedule under those rules with fixed times
and free communication -- the textbook setting of the bubble formulas.

Stages are contiguous runs of layers: :func:`balanced_split` balances them by
compute time (forward + backward FLOPs per sample), or the scenario lists the
layer counts (``pipeline.stage_layers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from .errors import Problem, ScenarioError
from .registry import Registered, Registry

__all__ = [
    "Op",
    "Schedule",
    "balanced_split",
    "check_stage_layers",
    "ideal_timeline",
    "make_schedule",
    "registered_schedules",
]

FORWARD = "fwd"
BACKWARD = "bwd"


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a stage device: the forward or backward of micro-batch ``j``, chunk ``c``."""

    kind: str
    """``"fwd"`` or ``"bwd"``."""
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        letter = "F" if self.kind == FORWARD else "B"
        return f"{letter}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def _schedule_line(name: str, cls: type[Schedule]) -> str:
    """``clustersim list schedules``: name and description."""
    return f"{name:<12} {cls.description}"


class Schedule(Registered):
    """Base of pipeline schedules: ``p`` stages, ``m`` micro-batches, ``v`` chunks per device.

    Subclasses set ``name`` and ``description`` and implement
    :meth:`operations`; they may restrict the allowed ``(p, m, v)`` in
    :meth:`problems` and give their bubble in :meth:`theoretical_bubble`.
    """

    registry: ClassVar[Registry[type[Schedule]]] = Registry(
        "schedules",
        "pipeline schedule",
        describe=_schedule_line,
        unknown="unknown schedule {name!r}",
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    multi_chunk: ClassVar[bool] = False
    """Whether the schedule accepts more than one model chunk per device."""

    def __init__(self, stages: int, micro_batches: int, chunks: int = 1) -> None:
        problems = self.problems(stages, micro_batches, chunks)
        if problems:
            raise ScenarioError(problems)
        self.stages = stages
        """p: stage devices."""
        self.micro_batches = micro_batches
        """m: micro-batches per iteration."""
        self.chunks = chunks
        """v: model chunks per device."""

    @classmethod
    def problems(cls, stages: int, micro_batches: int, chunks: int) -> list[Problem]:
        """What forbids this schedule for ``(p, m, v)``; key paths in the scenario."""
        out: list[Problem] = []
        if stages < 1:
            out.append(Problem("parallelism.pp", "needs at least one stage", ">= 1"))
        if micro_batches < 1:
            out.append(Problem("pipeline.micro_batches", "needs at least one micro-batch", ">= 1"))
        if chunks != 1 and not cls.multi_chunk:
            out.append(
                Problem(
                    "pipeline.chunks",
                    f"schedule {cls.name} runs one model chunk per device, not {chunks}",
                    "1, or schedule: interleaved",
                )
            )
        return out

    @property
    def virtual_stages(self) -> int:
        """Model pieces in pipeline order: ``p v``."""
        return self.stages * self.chunks

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """Position of chunk ``chunk`` of device ``stage`` in the pipeline: ``c p + s``."""
        return chunk * self.stages + stage

    def operations(self, stage: int) -> list[Op]:
        """The operations of stage device ``stage`` in one iteration, in the order it runs them."""
        raise NotImplementedError

    def theoretical_bubble(self) -> float:
        """Idle share of an iteration with equal stage times and free communication."""
        p, m = self.stages, self.micro_batches
        return (p - 1) / (m + p - 1)


class NaiveSchedule(Schedule):
    """One micro-batch at a time: forward through every stage, then backward."""

    name = "naive"
    description = "one micro-batch at a time through all stages and back"

    def operations(self, stage: int) -> list[Op]:
        ops: list[Op] = []
        for j in range(self.micro_batches):
            ops += [Op(FORWARD, j), Op(BACKWARD, j)]
        return ops

    def theoretical_bubble(self) -> float:
        return (self.stages - 1) / self.stages


class GPipeSchedule(Schedule):
    """All forwards in order, then all backwards in reverse order (GPipe)."""

    name = "gpipe"
    description = "GPipe: all forwards, then all backwards"

    def operations(self, stage: int) -> list[Op]:
        m = self.micro_batches
        return [Op(FORWARD, j) for j in range(m)] + [Op(BACKWARD, j) for j in reversed(range(m))]


class OneFOneBSchedule(Schedule):
    """PipeDream-Flush: warm-up forwards, then one forward / one backward, then cool-down."""

    name = "1f1b"
    description = "1F1B (PipeDream-Flush): warm-up, one forward one backward, cool-down"

    def operations(self, stage: int) -> list[Op]:
        m = self.micro_batches
        warmup = min(self.stages - stage - 1, m)
        ops = [Op(FORWARD, j) for j in range(warmup)]
        for i in range(m - warmup):
            ops += [Op(FORWARD, warmup + i), Op(BACKWARD, i)]
        ops += [Op(BACKWARD, j) for j in range(m - warmup, m)]
        return ops


class InterleavedSchedule(Schedule):
    """Megatron-LM interleaved 1F1B over ``v`` model chunks per device.

    The k-th forward of a device runs chunk ``(k mod p v) div p`` of micro-batch
    ``(k div p v) p + k mod p`` (groups of ``p`` micro-batches go through one
    chunk, then the next); backwards take the chunks in reverse.  Device ``s``
    warms up with ``2 (p - s - 1) + (v - 1) p`` forwards (all of them when
    ``m = p``), then alternates, then cools down.
    """

    name = "interleaved"
    description = "interleaved 1F1B (Megatron-LM): v model chunks per device"
    multi_chunk = True

    @classmethod
    def problems(cls, stages: int, micro_batches: int, chunks: int) -> list[Problem]:
        out = super().problems(stages, micro_batches, chunks)
        if not out and micro_batches % stages:
            out.append(
                Problem(
                    "pipeline.micro_batches",
                    f"the interleaved schedule needs micro_batches ({micro_batches}) to be a "
                    f"multiple of the pipeline stages ({stages})",
                    f"a multiple of {stages}",
                )
            )
        return out

    def _op(self, kind: str, k: int) -> Op:
        p, v = self.stages, self.chunks
        chunk = (k % (p * v)) // p
        if kind == BACKWARD:
            chunk = v - 1 - chunk
        return Op(kind, (k // (p * v)) * p + k % p, chunk)

    def operations(self, stage: int) -> list[Op]:
        p, m, v = self.stages, self.micro_batches, self.chunks
        total = m * v
        warmup = total if m == p else min(2 * (p - stage - 1) + (v - 1) * p, total)
        ops = [self._op(FORWARD, k) for k in range(warmup)]
        for k in range(total - warmup):
            ops += [self._op(FORWARD, warmup + k), self._op(BACKWARD, k)]
        ops += [self._op(BACKWARD, k) for k in range(total - warmup, total)]
        return ops

    def theoretical_bubble(self) -> float:
        p, m, v = self.stages, self.micro_batches, self.chunks
        return (p - 1) / (v * m + p - 1)


def registered_schedules() -> dict[str, type[Schedule]]:
    """Every registered schedule class by name."""
    return Schedule.registry.entries()


def make_schedule(name: str, stages: int, micro_batches: int, chunks: int = 1) -> Schedule:
    """The schedule ``name`` for ``p`` stages, ``m`` micro-batches and ``v`` chunks; ScenarioError if forbidden."""
    return Schedule.registry.lookup(name, "pipeline.schedule")(stages, micro_batches, chunks)


# --------------------------------------------------------------------------- ideal timing


def ideal_timeline(
    schedule: Schedule, forward_s: float, backward_s: float
) -> dict[tuple[int, Op], tuple[float, float]]:
    """Start and end (s) of every operation of one iteration, communication free.

    ``forward_s`` and ``backward_s`` are the times of one micro-batch through
    one *chunk*.  Each device runs its operations in order, each as soon as its
    dependencies (module docstring) have ended.  Raises ValueError when the
    schedule deadlocks (its dependencies form a cycle).
    """
    p, v = schedule.stages, schedule.chunks
    last = schedule.virtual_stages - 1
    lists = [schedule.operations(s) for s in range(p)]
    position = [0] * p
    free = [0.0] * p
    end: dict[tuple[int, Op], float] = {}
    out: dict[tuple[int, Op], tuple[float, float]] = {}
    remaining = sum(len(ops) for ops in lists)
    while remaining:
        progressed = False
        for s in range(p):
            while position[s] < len(lists[s]):
                op = lists[s][position[s]]
                k = schedule.virtual_stage(s, op.chunk)
                if op.kind == FORWARD:
                    dep = (
                        None if k == 0 else ((k - 1) % p, Op(FORWARD, op.microbatch, (k - 1) // p))
                    )
                else:
                    dep = (
                        (s, Op(FORWARD, op.microbatch, op.chunk))
                        if k == last
                        else ((k + 1) % p, Op(BACKWARD, op.microbatch, (k + 1) // p))
                    )
                if dep is not None and dep not in end:
                    break
                start = max(free[s], end[dep] if dep is not None else 0.0)
                free[s] = start + (forward_s if op.kind == FORWARD else backward_s)
                end[s, op] = free[s]
                out[s, op] = (start, free[s])
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {schedule.name} deadlocks (p={p}, v={v})")
    return out


# --------------------------------------------------------------------------- stage split


def balanced_split(costs: Sequence[float], parts: int) -> list[int]:
    """Layer counts of ``parts`` contiguous stages, balanced by cost, input first.

    ``costs`` are per-layer costs (e.g. forward + backward FLOPs per sample);
    every stage gets at least one layer, so ``len(costs) >= parts``.  Two
    candidates are built and the one whose costliest stage is cheaper wins
    (the first on a tie): stage ends placed where the running cost is nearest
    to ``i / parts`` of the total (even stages), and the split that minimises
    the costliest stage (bisection on a greedy packing).
    """
    n = len(costs)
    if parts < 1 or n < parts:
        raise ValueError(f"cannot split {n} layers into {parts} stages")
    candidates = [_proportional(costs, parts), _minimax(costs, parts)]
    return min(candidates, key=lambda counts: _heaviest(costs, counts) * (1 - 1e-12))


def _heaviest(costs: Sequence[float], counts: Sequence[int]) -> float:
    """Cost of the costliest stage of a split."""
    heaviest, first = 0.0, 0
    for count in counts:
        heaviest = max(heaviest, sum(costs[first : first + count]))
        first += count
    return heaviest


def _proportional(costs: Sequence[float], parts: int) -> list[int]:
    """Stage ends where the running cost is nearest to equal shares of the total."""
    n, total = len(costs), sum(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    ends = [0]
    for i in range(1, parts):
        lo, hi = ends[-1] + 1, n - (parts - i)
        target = total * i / parts
        ends.append(min(range(lo, hi + 1), key=lambda e: (abs(prefix[e] - target), e)))
    ends.append(n)
    return [b - a for a, b in zip(ends, ends[1:])]


def _minimax(costs: Sequence[float], parts: int) -> list[int]:
    """A split minimising the costliest stage; missing stages split off the largest."""
    lo = max(max(costs), sum(costs) / parts)
    hi = max(sum(costs), lo)
    if _stages_needed(costs, lo) <= parts:
        hi = lo
    for _ in range(100):
        if hi - lo <= 1e-12 * max(hi, 1e-300):
            break
        mid = (lo + hi) / 2
        if _stages_needed(costs, mid) <= parts:
            hi = mid
        else:
            lo = mid
    counts = _pack_from_end(costs, hi)
    while len(counts) < parts:
        i = max(range(len(counts)), key=lambda x: (counts[x], -x))
        half = counts[i] // 2
        counts[i : i + 1] = [counts[i] - half, half]
    return counts


def _stages_needed(costs: Sequence[float], limit: float) -> int:
    """Stages a greedy packing with at most ``limit`` per stage needs."""
    needed, filled = 1, 0.0
    for cost in costs:
        if filled + cost > limit and filled > 0:
            needed += 1
            filled = 0.0
        filled += cost
    return needed


def _pack_from_end(costs: Sequence[float], limit: float) -> list[int]:
    """Greedy packing from the last layer backwards; layer counts input first."""
    counts: list[int] = []
    filled, count = 0.0, 0
    for cost in reversed(costs):
        if filled + cost > limit and count:
            counts.append(count)
            filled, count = 0.0, 0
        filled += cost
        count += 1
    counts.append(count)
    return counts[::-1]


def check_stage_layers(stage_layers: Sequence[int], layers: int, stages: int) -> None:
    """ScenarioError unless ``stage_layers`` has ``stages`` entries summing to ``layers``."""
    path = "pipeline.stage_layers"
    if len(stage_layers) != stages:
        raise ScenarioError(
            Problem(
                path,
                f"lists {len(stage_layers)} stages, the pipeline has {stages} "
                "(virtual stages: pp x chunks)",
                f"{stages} layer counts",
            )
        )
    if sum(stage_layers) != layers:
        raise ScenarioError(
            Problem(
                path,
                f"the counts add up to {sum(stage_layers)} layers, the model has {layers} "
                "(a layer with repeat: n counts n times)",
                f"counts adding up to {layers}",
            )
        )
