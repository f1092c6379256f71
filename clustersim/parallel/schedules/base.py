"""Pipeline schedules, stage splitting and the theoretical bubble.

A pipeline of ``p`` stage devices trains ``m`` micro-batches per iteration and
ends each iteration with a *flush* (every backward done, then the optimizer
step; the flush-free PipeDream schedules excepted, :attr:`Schedule.flush`).  A
:class:`Schedule` says, for each stage device, the order in which it runs its
operations: :class:`Op` ``("fwd" | "bwd", micro-batch j, chunk c)``, or with a split
backward (:attr:`Schedule.split_backward`) ``"bwd_input"`` (B) and ``"bwd_weight"`` (W).
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
from virtual stage ``k+1`` (the last virtual stage needs its own forward); so does a
B, and a W needs only its own B (:func:`dependency`).  Which device holds virtual stage
``k`` is the schedule's to say (:meth:`Schedule.device_of`; ZB-V's V shape differs).
:func:`ideal_timeline` plays a schedule under those rules with fixed times
and free communication -- the textbook setting of the bubble formulas.

Stages are contiguous runs of layers: :func:`balanced_split` balances them by
compute time (forward + backward FLOPs per sample), or the scenario lists the
layer counts (``pipeline.stage_layers``).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...errors import Problem, ScenarioError
from ...registry import Registered, Registry
from .. import rules

__all__ = [
    "BACKWARD_INPUT",
    "BACKWARD_WEIGHT",
    "Op",
    "Schedule",
    "dependency",
    "ideal_timeline",
    "make_schedule",
    "played_timeline",
    "registered_schedules",
    "schedule_modules",
]

FORWARD = "fwd"
BACKWARD = "bwd"
BACKWARD_INPUT = "bwd_input"
"""B of the zero-bubble schedules: the gradient of the stage input (sent to the previous stage)."""
BACKWARD_WEIGHT = "bwd_weight"
"""W of the zero-bubble schedules: the gradient of the stage's weights (needs only B)."""
LETTERS = {FORWARD: "F", BACKWARD: "B", BACKWARD_INPUT: "B", BACKWARD_WEIGHT: "W"}
"""The letter of each op kind, as the papers draw them."""


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a stage device: the forward or backward of micro-batch ``j``, chunk ``c``."""

    kind: str
    """``"fwd"`` or ``"bwd"``; the zero-bubble schedules split ``"bwd"`` into
    ``"bwd_input"`` (B) and ``"bwd_weight"`` (W)."""
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{LETTERS[self.kind]}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


BUILTIN_SCHEDULES = (
    "naive",
    "gpipe",
    "one_f_one_b",
    "interleaved",
    "zb_h1",
    "zb_v",
    "pipedream",
    "pipedream_2bw",
)
"""Modules of :mod:`clustersim.parallel.schedules` holding one built-in schedule each, in
the order ``clustersim list schedules`` shows them."""

_NOT_SCHEDULES = ("base",)
"""Modules of the folder that hold no schedule."""


def schedule_modules() -> list[str]:
    """Every module of :mod:`clustersim.parallel.schedules` that holds a schedule: the
    built-ins in :data:`BUILTIN_SCHEDULES` order, then any other module of the folder by
    name.  So a new schedule is one new file, found without being listed anywhere."""
    folder = Path(__file__).parent
    found = {m.name for m in pkgutil.iter_modules([str(folder)])}
    others = sorted(found.difference(BUILTIN_SCHEDULES, _NOT_SCHEDULES))
    return [*BUILTIN_SCHEDULES, *others]


def _schedule_line(name: str, cls: type[Schedule]) -> str:
    """``clustersim list schedules``: name and description."""
    return f"{name:<14} {cls.description}"


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
        builtins=[f"{__package__}.{module}" for module in schedule_modules()],
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    multi_chunk: ClassVar[bool] = False
    """Whether the schedule accepts more than one model chunk per device."""
    split_backward: ClassVar[bool] = False
    """Whether the backward is split into B (``bwd_input``) and W (``bwd_weight``) ops."""
    flush: ClassVar[bool] = True
    """Whether each iteration ends with a flush; False: the pipeline runs on across
    iterations (PipeDream, PipeDream-2BW; see :meth:`run_operations`)."""
    default_chunks: ClassVar[int] = 1
    """Chunks per device when ``pipeline.chunks`` is not given."""
    micro_batch_per_stage: ClassVar[bool] = False
    """Whether a run needs at least one micro-batch per stage (m >= p), as 1F1B's warm-up
    does: the hybrid strategy then enforces
    :func:`~clustersim.parallel.rules.micro_batch_per_stage_problem` (the operations
    themselves are defined for any m)."""

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
        """What forbids this schedule for ``(p, m, v)``; key paths in the scenario.

        The rules every schedule shares (:func:`~clustersim.parallel.rules.schedule_problems`);
        a subclass adds its own from :mod:`clustersim.parallel.rules`.
        """
        return rules.schedule_problems(cls.name, stages, micro_batches, chunks, cls.multi_chunk)

    @property
    def virtual_stages(self) -> int:
        """Model pieces in pipeline order: ``p v``."""
        return self.stages * self.chunks

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """Position of chunk ``chunk`` of device ``stage`` in the pipeline: ``c p + s``
        (a schedule may place its chunks otherwise, as ZB-V's V shape does; everything
        asks this method and :meth:`device_of`)."""
        return chunk * self.stages + stage

    def device_of(self, virtual_stage: int) -> tuple[int, int]:
        """(device stage, chunk) holding ``virtual_stage``: the inverse of :meth:`virtual_stage`."""
        return virtual_stage % self.stages, virtual_stage // self.stages

    def weight_versions(self, stage: int) -> int:
        """Weight versions stage ``stage`` holds at once (1: no weight stashing)."""
        return 1

    def updates_per_iteration(self) -> int:
        """Weight updates (gradient sync and optimizer step) per stage per iteration."""
        return 1

    def operations(self, stage: int) -> list[Op]:
        """The operations of stage device ``stage`` in one iteration, in the order it runs them."""
        raise NotImplementedError

    def theoretical_bubble(self) -> float:
        """Idle share of an iteration with equal stage times and free communication."""
        p, m = self.stages, self.micro_batches
        return (p - 1) / (m + p - 1)


def registered_schedules() -> dict[str, type[Schedule]]:
    """Every registered schedule class by name."""
    return Schedule.registry.entries()


def make_schedule(
    name: str, stages: int, micro_batches: int, chunks: int | None = None
) -> Schedule:
    """The schedule ``name`` for ``p`` stages, ``m`` micro-batches and ``v`` chunks (default:
    the schedule's :attr:`~Schedule.default_chunks`); ScenarioError if forbidden."""
    kind = Schedule.registry.lookup(name, "pipeline.schedule")
    return kind(stages, micro_batches, kind.default_chunks if chunks is None else chunks)


# --------------------------------------------------------------------------- ideal timing


def ideal_timeline(
    schedule: Schedule, forward_s: float, backward_s: float, weight_s: float = 0.0
) -> dict[tuple[int, Op], tuple[float, float]]:
    """Start and end (s) of every operation of one iteration, communication free.

    ``forward_s`` and ``backward_s`` are the times of one micro-batch through
    one *chunk*; with a split backward ``backward_s`` is B's and ``weight_s`` W's,
    and an unsplit backward takes ``backward_s + weight_s``.  Each device runs its
    operations in order, each as soon as its dependencies (module docstring) have
    ended.  Raises ValueError when the schedule deadlocks (its dependencies form a
    cycle).
    """
    cost = {
        FORWARD: forward_s,
        BACKWARD: backward_s + weight_s,
        BACKWARD_INPUT: backward_s,
        BACKWARD_WEIGHT: weight_s,
    }
    return played_timeline(schedule, lambda _stage, op: cost[op.kind])


OpSeconds = Callable[[int, Op], float]
"""``seconds(device stage, op)``: how long an operation computes (seconds)."""
HopSeconds = Callable[[int, int], float]
"""``seconds(from virtual stage, to virtual stage)``: how long what one sends the other
travels (seconds; 0 within a virtual stage)."""


def played_timeline(
    schedule: Schedule, seconds: OpSeconds, hop: HopSeconds | None = None
) -> dict[tuple[int, Op], tuple[float, float]]:
    """Start and end (s) of every operation of one iteration: each device runs its
    operations in order, each as soon as its device is free and its dependency
    (:func:`dependency`) has ended and its activation or gradient has travelled ``hop``
    from the dependency's virtual stage (default: free).  :func:`ideal_timeline` with times
    of its own per operation and transfers that take time -- the analytical pipeline model
    ``pipeline.chunks: auto`` prices its candidates with.  ValueError on a deadlock."""
    p, v = schedule.stages, schedule.chunks
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
                dep = dependency(schedule, s, op)
                if dep is not None and dep not in end:
                    break
                ready = 0.0
                if dep is not None:
                    ready = end[dep]
                    k, before = (schedule.virtual_stage(x, o.chunk) for x, o in ((s, op), dep))
                    if hop is not None and before != k:
                        ready += hop(before, k)
                start = max(free[s], ready)
                free[s] = start + seconds(s, op)
                end[s, op] = free[s]
                out[s, op] = (start, free[s])
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {schedule.name} deadlocks (p={p}, v={v})")
    return out


def dependency(schedule: Schedule, stage: int, op: Op) -> tuple[int, Op] | None:
    """The (device stage, op) whose end ``op`` of device ``stage`` waits for, or None.

    Forward: the forward of the same micro-batch on the previous virtual stage.  Backward
    (or B): the gradient of the next virtual stage, sent after its backward (or B); on the
    last virtual stage its own forward.  W: the same stage's B.
    """
    k = schedule.virtual_stage(stage, op.chunk)
    j = op.microbatch
    if op.kind == FORWARD:
        return None if k == 0 else _on(schedule, k - 1, FORWARD, j)
    if op.kind == BACKWARD_WEIGHT:
        return stage, Op(BACKWARD_INPUT, j, op.chunk)
    if k == schedule.virtual_stages - 1:
        return stage, Op(FORWARD, j, op.chunk)
    return _on(schedule, k + 1, op.kind, j)


def _on(schedule: Schedule, k: int, kind: str, j: int) -> tuple[int, Op]:
    s, c = schedule.device_of(k)
    return s, Op(kind, j, c)
