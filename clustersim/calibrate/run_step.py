"""The run a profiler trace is a step of (``calibrate profile --scenario RUN.yaml``): its
operations of one micro-batch on one GPU, as clustersim prices them, and the checks that the
trace can be a step of it.

:func:`run_step` prepares the scenario and lists its kernels of one micro-batch -- forward
and backward with the run's recomputation, at its micro-batch size and tp, as the pipeline
strategy prices them (:class:`~clustersim.strategies.hybrid.compute_time.StageTimes`; in fp8
with Transformer Engine's casts and transposes) -- and those of the step (the fp8 casts of
the weights, once a step: :mod:`clustersim.model.fp8_casts`), with the micro-batches one GPU
runs per step (data-parallel replica 0's) and cp (a GPU holds 1/cp of each sequence).  The
run must be a transformer trained by the pipeline strategy, on the ``--base`` GPU.  With
pipeline parallelism a GPU runs one stage: :func:`run_steps` lists the step of each stage
(the virtual stages ``c p + s`` of stage ``s``, its chunks with an interleaved schedule), and
:func:`chosen_step` takes the one ``--stage`` names or, by default, the one whose matrix
products are nearest the trace's in FLOPs (saying so).  :func:`traced_steps` reads how many
steps the trace holds (its ``ProfilerStep#N`` annotations; one when it has none) and
:func:`product_ratio` checks that the trace's matrix products add up to the FLOPs of that
many steps of the run within a factor of :data:`FLOP_RATIO_LIMIT`; :func:`traced_passes`
takes a trace without backward work whose products are the run's forward passes' as a trace
of those alone.  The fits of :mod:`.memory_fit` and :mod:`.attention_fit` take their
operations from here.

Units: FLOPs, B/s.  Problems are ScenarioErrors at ``--scenario``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..compute.models import Operation
from ..errors import Problem, ScenarioError
from ..hardware import Preset
from ..model.operators import FLASH
from ..units import parse_bandwidth
from .trace import Profile

FLOP_RATIO_LIMIT = 2.0
"""Largest factor between the trace's matrix-product FLOPs and the run's steps' accepted."""
FORWARD_RATIO_LIMIT = 1.25
"""Largest factor between a trace's matrix-product FLOPs and the run's forward passes' for
a trace without backward work to be taken as forward passes (:func:`traced_passes`): tighter
than :data:`FLOP_RATIO_LIMIT`, so that a trace of whole steps of another run is refused as
before rather than read as forward passes."""
SCENARIO_KEY = "--scenario"
"""The option problems are reported at."""
TRANSFORMER = (
    "a transformer trained by the pipeline strategy: a pipeline: section (or tp, pp, cp or "
    "ep above 1)"
)
"""What ``--scenario`` takes."""


def refuse(file: str, message: str, allowed: str) -> ScenarioError:
    """A problem of the run (or of the trace against it) at ``--scenario``."""
    return ScenarioError(Problem(SCENARIO_KEY, message, allowed), file)


@dataclass(frozen=True)
class RunStep:
    """The kernels of one micro-batch of a run on one GPU, and how many make a step."""

    scenario: str
    """The scenario file."""
    operations: tuple[Operation, ...]
    """The kernels of one micro-batch (forward, recomputation, backward)."""
    micro_batches: int
    """Micro-batches one GPU runs per step (data-parallel replica 0's)."""
    cp: int
    """Context parallelism: a GPU holds 1/cp of each sequence, so 1/cp of the work."""
    precision: str | None
    """The run's ``training.precision``."""
    folder: Path
    """The scenario's folder (relative kernels files are read from it)."""
    notes: list[str] = field(default_factory=list)
    step_operations: tuple[Operation, ...] = ()
    """The kernels one GPU runs once per step, whatever its micro-batches and cp (the fp8
    casts of its weights)."""
    stage: int = 0
    """The pipeline stage (0-based) whose GPU this is the step of."""
    stages: int = 1
    """The run's pipeline stages (pp)."""
    forward: tuple[Operation, ...] = ()
    """The forward kernels of one micro-batch (a part of :attr:`operations`)."""
    passes: str = "forward and backward"
    """Which passes :attr:`operations` holds (``forward`` for :meth:`forward_only`'s)."""

    @property
    def share(self) -> float:
        """Micro-batches per GPU over cp: what one micro-batch's work is multiplied by."""
        return self.micro_batches / self.cp

    @property
    def product_flops(self) -> float:
        """FLOPs of the matrix products of one step on one GPU (the fused attention kernel,
        which a trace does not count among its products, left out)."""
        products = (op for op in self.operations if op.m and not op.name.startswith(FLASH))
        return sum(op.flops for op in products) * self.share

    def forward_only(self) -> RunStep:
        """This step's forward passes alone (the weights' once-a-step casts kept: fp8
        casts its weights in the first forward)."""
        return replace(self, operations=self.forward, passes="forward", notes=list(self.notes))


def traced_passes(run: RunStep, profile: Profile) -> RunStep:
    """``run``, or :meth:`RunStep.forward_only` when ``profile`` holds no backward work (no
    autograd CPU ops: :attr:`Profile.backward_ops`) and its matrix products are within
    :data:`FORWARD_RATIO_LIMIT` of the FLOPs of the run's forward passes and nearer them than
    those of its whole steps (with a note saying so).  A trace of forward passes (a profiler
    started around the forward, an evaluation step) is then fitted to the forward kernels;
    one of whole steps is as before."""
    if profile.backward_ops or not run.forward:
        return run
    forward = run.forward_only()
    traced = sum(p.flops for p in profile.products)
    count = profile.steps or 1
    whole, ahead = run.product_flops * count, forward.product_flops * count
    if traced <= 0 or ahead <= 0:
        return run
    near = abs(math.log(traced / ahead))
    if near > math.log(FORWARD_RATIO_LIMIT) or near >= abs(math.log(traced / whole)):
        return run
    forward.notes.append(
        f"the trace holds no backward work (no autograd ops) and its matrix products are "
        f"{traced / ahead:.3g} x those of the run's forward passes ({traced / whole:.3g} x "
        f"its whole steps'): fitted to the forward passes alone"
    )
    return forward


def run_step(path: str, base: Preset, stage: int = 0) -> RunStep:
    """The kernels of a micro-batch on one GPU of pipeline stage ``stage`` of the run
    ``path`` (a scenario file): :func:`run_steps`' entry of that stage (ScenarioError at
    ``--stage`` for a stage the run does not have)."""
    steps = run_steps(path, base)
    return checked_stage(steps, stage, path)


def run_steps(path: str, base: Preset) -> list[RunStep]:
    """The kernels of a micro-batch on one GPU of each pipeline stage of the run ``path`` (a
    scenario file), by stage.  ScenarioError at ``--scenario`` for a run that is not one the
    trace can be a step of: no transformer model, not the pipeline strategy, GPUs other than
    ``base``, a fractional micro-batch."""
    from ..api import prepare
    from ..scenario.presets import scenario_folder
    from ..strategies.hybrid import Pipeline
    from ..strategies.hybrid.compute_time import StageTimes, run_casts
    from ..strategies.kernel_times import whole_samples

    prepared = prepare(path)
    strategy: Any = prepared.strategy
    model = getattr(strategy, "model", None)
    if model is None or getattr(model, "transformer", None) is None:
        raise refuse(path, "the run has no transformer model", TRANSFORMER)
    if not isinstance(strategy, Pipeline):
        raise refuse(path, f"the run's workload is {strategy.name!r}", TRANSFORMER)
    notes = _device_notes(prepared, strategy, base, path)
    b = whole_samples(strategy.micro_batch)
    if b is None:
        message = f"its micro-batch is {strategy.micro_batch} sequences"
        raise refuse(path, message, "a whole number of sequences per micro-batch")
    layers = [(plan.first_layer, plan.layers) for plan in strategy.plans]
    folder = scenario_folder(prepared.scenario.source or path)
    modes = strategy.virtual_recompute()
    times = StageTimes(
        strategy.model,
        layers,
        strategy.tp,
        modes,
        folder,
        fp8=run_casts(strategy),
        ep=strategy.parallelism.ep,
    )
    counts = strategy.replica_micro_batches
    if len(set(counts)) > 1:
        notes.append(f"replicas run {min(counts)} to {max(counts)} micro-batches: replica 0's")
    training = getattr(prepared.scenario, "training", None)
    pp = strategy.pp
    out = []
    for stage in range(pp):
        chunks = range(stage, len(layers), pp)  # chunk c of stage s: virtual stage c p + s
        passes = [times.operations(k, f, b) for k in chunks for f in (True, False)]
        forward = tuple(op for ops in passes[::2] for op in ops)
        out.append(
            RunStep(
                path,
                tuple(op for ops in passes for op in ops),
                counts[0],
                strategy.cp,
                getattr(training, "precision", None),
                folder,
                list(notes),
                tuple(op for k in chunks for op in times.weight_operations(k)),
                stage,
                pp,
                forward,
            )
        )
    return out


STAGE_KEY = "--stage"
"""The option naming the traced GPU's pipeline stage."""


def checked_stage(steps: list[RunStep], stage: int, path: str) -> RunStep:
    """``steps[stage]``; ScenarioError at ``--stage`` when the run has no such stage."""
    if not 0 <= stage < len(steps):
        allowed = "0" if len(steps) == 1 else f"0 to {len(steps) - 1}"
        raise ScenarioError(
            Problem(
                STAGE_KEY,
                f"the run has {len(steps)} pipeline stage(s); stage {stage} is not one",
                f"a stage of the run: {allowed} (0-based)",
            ),
            path,
        )
    return steps[stage]


def chosen_step(steps: list[RunStep], profile: Profile, stage: int | None, path: str) -> RunStep:
    """The step of the traced GPU: stage ``stage`` (``--stage``), the only one, or, when the
    run has several and none is named, the stage whose matrix products over the trace's
    steps are nearest the trace's in FLOPs (by ratio), with a note saying so."""
    if stage is not None:
        return checked_stage(steps, stage, path)
    if len(steps) == 1:
        return steps[0]
    traced = sum(p.flops for p in profile.products)
    count = profile.steps or 1
    ratios = [
        traced / (step.product_flops * count) if step.product_flops > 0 else math.inf
        for step in steps
    ]
    distance = [abs(math.log(r)) if 0 < r < math.inf else math.inf for r in ratios]
    best = min(range(len(steps)), key=lambda s: (distance[s], s))
    found = steps[best]
    found.notes.append(
        f"pipeline stage {best} of {len(steps)} taken as the traced GPU's: its matrix products "
        f"are {ratios[best]:.3g} x the trace's (the other stages' "
        + ", ".join(f"{r:.3g}" for s, r in enumerate(ratios) if s != best)
        + "); --stage N names another"
    )
    return found


def _device_notes(prepared: Any, strategy: Any, base: Preset, path: str) -> list[str]:
    """Notes on the run's GPUs; ScenarioError when they are not ``base``."""
    devices = [prepared.topology.devices[name] for name in strategy.placement.workers]
    types = sorted({device.type or "(no preset)" for device in devices})
    if types != [base.name]:
        raise refuse(
            path,
            f"the run's GPUs are {', '.join(types)}, the trace's {base.name} (--base)",
            f"a run on {base.name}, or --base naming the run's GPU",
        )
    bandwidth = parse_bandwidth(base.spec.get("memory_bandwidth"))
    given = {device.memory_bandwidth_Bps for device in devices}
    if given != {bandwidth}:
        return [
            f"the run's GPUs have memory_bandwidth {', '.join(f'{g:.6g}' for g in sorted(given))}"
            f" B/s: priced at {base.name}'s {bandwidth:.6g} B/s, the file's"
        ]
    return []


def traced_steps(profile: Profile, notes: list[str]) -> int:
    """The training steps ``profile`` holds: its ``ProfilerStep#N`` annotations, else one
    (with a note in ``notes`` saying so)."""
    if not profile.steps:
        notes.append("the trace marks no steps (ProfilerStep#N): taken as one step")
    return profile.steps or 1


def product_ratio(profile: Profile, scenario: str, step_flops: float, steps: int) -> float:
    """The trace's matrix-product FLOPs over ``steps`` steps' of the run ``scenario``
    (``step_flops`` a step's on one GPU: :attr:`RunStep.product_flops`).  ScenarioError
    when they are more than :data:`FLOP_RATIO_LIMIT` apart."""
    traced = sum(p.flops for p in profile.products)
    expected = step_flops * steps
    ratio = traced / expected if expected > 0 else float("inf")
    if not 1 / FLOP_RATIO_LIMIT <= ratio <= FLOP_RATIO_LIMIT:
        raise refuse(
            scenario,
            f"the trace's matrix products ({traced:.4g} FLOPs) are {ratio:.3g} x those of "
            f"{steps} step(s) of the run on one GPU ({expected:.4g} FLOPs)",
            "the run the trace is a step of: its model, micro-batch, micro-batches per GPU "
            "(global_batch / (dp x micro_batch)), tp and cp as profiled",
        )
    return ratio
