"""The memory efficiency of a GPU fitted to a profiler trace of a step of a known run.

clustersim prices a memory-bound kernel (``norm_residual``, ``softmax``, ``activation``,
``cross_entropy``: :mod:`clustersim.model.operators`, ``flops`` 0) at ``bytes / (memory
bandwidth x memory_efficiency)`` (:class:`~clustersim.compute.models.Roofline`).  Given the
run the trace is a step of (``--scenario``), :func:`scenario_step` lists that run's
memory-bound operations of one micro-batch on one GPU -- forward and backward with the run's
recomputation, at its micro-batch size, tp and cp, as the pipeline strategy prices them
(:class:`~clustersim.strategies.hybrid.compute_time.StageTimes`) -- and :func:`fit_memory`
compares their time at the full bandwidth of the base GPU with the measured time of the
trace's element-wise, norm and reduction kernels (:data:`~.trace.ELEMENTWISE`: not products,
attention, NCCL, the optimizer's kernels, copies or sets)::

    memory_efficiency = min(1, predicted at full bandwidth / measured)

rounded to the 6 digits the GPU file writes.  What the trace holds is taken as ``steps``
training steps (its ``ProfilerStep#N`` annotations; one when it has none) of the run's
micro-batches on one GPU (those of data-parallel replica 0), and checked: the trace's
matrix products must add up to the FLOPs of that many steps of the run within a factor of 2.
Kernels the framework runs that the model does not list (casts, embedding lookups, gradient
additions) are in the measured time, so the efficiency takes them in: it is the share of the
bandwidth that makes the model's list take the step's measured time.

One ratio has no held-out share: the framework's kernels do not map one by one onto the
model's operations (a layer norm may be one kernel or several, fused with the residual add
or not), so no subset of kernels has a prediction of its own to hold out.

Units: seconds, bytes, B/s, FLOPs.  Problems are ScenarioErrors at ``--scenario``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..compute.models import Operation
from ..errors import Problem, ScenarioError
from ..hardware import Preset
from ..model.operators import FLASH
from ..units import parse_bandwidth
from .trace import ELEMENTWISE, Profile

FLOP_RATIO_LIMIT = 2.0
"""Largest factor between the trace's matrix-product FLOPs and the run's steps' accepted."""
SCENARIO_KEY = "--scenario"
"""The option problems are reported at."""


def _refuse(file: str, message: str, allowed: str) -> ScenarioError:
    return ScenarioError(Problem(SCENARIO_KEY, message, allowed), file)


@dataclass(frozen=True)
class MemoryStep:
    """The memory-bound work of one step of a run on one GPU, as clustersim prices it."""

    scenario: str
    """The scenario file."""
    operations: tuple[Operation, ...]
    """The memory-bound operations of one micro-batch (forward, recomputation, backward)."""
    micro_batches: int
    """Micro-batches one GPU runs per step (data-parallel replica 0's)."""
    cp: int
    """Context parallelism: a GPU holds 1/cp of each sequence, so 1/cp of the work."""
    product_flops: float
    """FLOPs of the matrix products of one step on one GPU (the fused attention kernel,
    which a trace does not count among its products, left out)."""
    bandwidth_Bps: float
    """The base GPU's memory bandwidth, B/s."""
    base_efficiency: float = 1.0
    """The base GPU's own ``compute.memory_efficiency`` (a file fitted before: the
    prediction it makes for this trace checks it)."""
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> float:
        """Bytes the memory-bound operations of one step read and write on one GPU."""
        return sum(op.bytes for op in self.operations) * self.micro_batches / self.cp


@dataclass(frozen=True)
class MemoryFit:
    """The memory efficiency fitted to a trace, and the numbers it came from."""

    trace: str
    step: MemoryStep
    steps: int
    """Training steps the trace is taken to hold."""
    kernels: int
    """The trace's element-wise, norm and reduction kernels."""
    measured_s: float
    """Their GPU time, s."""
    predicted_s: float
    """The run's memory-bound operations of ``steps`` steps at the full bandwidth, s."""
    memory_efficiency: float
    """min(1, predicted / measured), rounded to 6 digits."""
    product_ratio: float
    """The trace's matrix-product FLOPs over ``steps`` steps' of the run."""
    notes: list[str] = field(default_factory=list)

    @property
    def fitted_s(self) -> float:
        """The memory-bound operations' time at the fitted efficiency, s."""
        return self.predicted_s / self.memory_efficiency

    def note(self) -> str:
        """The GPU file's note on the fitted ``compute.memory_efficiency``."""
        return (
            f"fitted: {self.trace}: {self.kernels} element-wise/norm/reduction kernels, "
            f"measured {self.measured_s:.6g} s against {self.predicted_s:.6g} s predicted at "
            f"the full memory bandwidth for {self.steps} step(s) of {self.step.scenario} "
            f"({self.step.micro_batches} micro-batch(es) per GPU)"
        )


def scenario_step(path: str, base: Preset) -> MemoryStep:
    """The memory-bound work of a step on one GPU of the run ``path`` (a scenario file),
    priced at ``base``'s memory bandwidth.  ScenarioError at ``--scenario`` for a run that
    is not one the trace can be a step of: no transformer model, not the pipeline strategy,
    more than one pipeline stage, GPUs other than ``base``, a fractional micro-batch."""
    from ..api import prepare
    from ..scenario.presets import scenario_folder
    from ..strategies.hybrid import Pipeline
    from ..strategies.hybrid.compute_time import StageTimes
    from ..strategies.kernel_times import whole_samples

    prepared = prepare(path)
    strategy: Any = prepared.strategy
    model = getattr(strategy, "model", None)
    if model is None or getattr(model, "transformer", None) is None:
        raise _refuse(path, "the run has no transformer model", _TRANSFORMER)
    if not isinstance(strategy, Pipeline):
        raise _refuse(path, f"the run's workload is {strategy.name!r}", _TRANSFORMER)
    if strategy.pp > 1:
        message = f"the run has {strategy.pp} pipeline stages: a one-GPU trace is one stage's"
        raise _refuse(path, message, "a run of parallelism.pp 1 (tp, cp and dp as profiled)")
    notes = _device_notes(prepared, strategy, base, path)
    b = whole_samples(strategy.micro_batch)
    if b is None:
        message = f"its micro-batch is {strategy.micro_batch} sequences"
        raise _refuse(path, message, "a whole number of sequences per micro-batch")
    layers = [(plan.first_layer, plan.layers) for plan in strategy.plans]
    times = StageTimes(
        strategy.model,
        layers,
        strategy.tp,
        strategy.virtual_recompute(),
        scenario_folder(prepared.scenario.source or path),
    )
    passes = [times.operations(k, f, b) for k in range(len(layers)) for f in (True, False)]
    ops = [op for ops in passes for op in ops]
    counts = strategy.replica_micro_batches
    if len(set(counts)) > 1:
        notes.append(f"replicas run {min(counts)} to {max(counts)} micro-batches: replica 0's")
    m, cp = counts[0], strategy.cp
    products = sum(op.flops for op in ops if op.m and not op.name.startswith(FLASH))
    memory = tuple(op for op in ops if op.flops == 0 and op.bytes > 0)
    bandwidth = parse_bandwidth(base.spec.get("memory_bandwidth"))
    compute = base.spec.get("compute") or {}
    given = float(compute.get("memory_efficiency", 1.0))
    return MemoryStep(path, memory, m, cp, products * m / cp, bandwidth, given, notes)


_TRANSFORMER = (
    "a transformer trained by the pipeline strategy: a pipeline: section (or tp, cp or ep "
    "above 1) and pp 1"
)
"""What ``--scenario`` takes."""


def _device_notes(prepared: Any, strategy: Any, base: Preset, path: str) -> list[str]:
    """Notes on the run's GPUs; ScenarioError when they are not ``base``."""
    devices = [prepared.topology.devices[name] for name in strategy.placement.workers]
    types = sorted({device.type or "(no preset)" for device in devices})
    if types != [base.name]:
        raise _refuse(
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


def fit_memory(profile: Profile, step: MemoryStep) -> MemoryFit:
    """``step``'s memory efficiency fitted to ``profile`` (see the module docstring).
    ScenarioError when the trace has no element-wise kernels, or its products are not
    those of the run's steps within a factor of :data:`FLOP_RATIO_LIMIT`."""
    notes = list(step.notes)
    steps = profile.steps or 1
    if not profile.steps:
        notes.append("the trace marks no steps (ProfilerStep#N): taken as one step")
    kernels, measured = profile.other.get(ELEMENTWISE, (0, 0.0))
    if kernels == 0 or measured <= 0:
        raise _refuse(
            profile.file,
            "the trace has no element-wise, norm or reduction kernels to fit to",
            "a trace of a whole training step (forward and backward)",
        )
    traced = sum(p.flops for p in profile.products)
    expected = step.product_flops * steps
    ratio = traced / expected if expected > 0 else float("inf")
    if not 1 / FLOP_RATIO_LIMIT <= ratio <= FLOP_RATIO_LIMIT:
        raise _refuse(
            step.scenario,
            f"the trace's matrix products ({traced:.4g} FLOPs) are {ratio:.3g} x those of "
            f"{steps} step(s) of the run on one GPU ({expected:.4g} FLOPs)",
            "the run the trace is a step of: its model, micro-batch, micro-batches per GPU "
            "(global_batch / (dp x micro_batch)), tp and cp as profiled",
        )
    predicted = step.bytes * steps / step.bandwidth_Bps
    share = predicted / measured
    if share > 1:
        notes.append(
            f"the kernels ran {share:.3g} x faster than the full bandwidth allows for the "
            "run's bytes: capped at 1 (does the run list more memory-bound work than the trace "
            "holds?)"
        )
    efficiency = float(f"{min(1.0, share):.6g}")
    return MemoryFit(
        profile.file, step, steps, kernels, measured, predicted, efficiency, ratio, notes
    )
