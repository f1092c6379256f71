"""The memory efficiency of a GPU fitted to a profiler trace of a step of a known run.

clustersim prices a memory-bound kernel (``norm_residual``, ``softmax``, ``activation``,
``cross_entropy``: :mod:`clustersim.model.operators`, ``flops`` 0) at ``bytes / (memory
bandwidth x memory_efficiency)`` (:class:`~clustersim.compute.models.Roofline`).  Given the
run the trace is a step of (``--scenario``), :func:`memory_step` takes that run's
memory-bound operations of one micro-batch on one GPU from :func:`~.run_step.run_step` --
forward and backward with the run's recomputation, at its micro-batch size, tp and cp, as
the pipeline strategy prices them -- and :func:`fit_memory`
compares their time at the full bandwidth of the base GPU with the measured time of the
trace's element-wise, norm and reduction kernels (:data:`~.trace.ELEMENTWISE`: not products,
attention, NCCL, the optimizer's kernels, copies or sets)::

    memory_efficiency = min(1, predicted at full bandwidth / measured)

rounded to the 6 digits the GPU file writes.  What the trace holds is taken as ``steps``
training steps (its ``ProfilerStep#N`` annotations; one when it has none) of the run's
micro-batches on one GPU (those of data-parallel replica 0), and checked: the trace's
matrix products must add up to the FLOPs of that many steps of the run within a factor of 2.
Kernels the framework runs that the model does not list (dtype casts, embedding lookups,
gradient additions) are in the measured time, so the efficiency takes them in: it is the share
of the bandwidth that makes the model's list take the step's measured time.  An fp8 run's list
holds Transformer Engine's casts and transposes (those of each micro-batch and, once a step,
those of the weights: :mod:`clustersim.model.fp8_casts`), as the trace's element-wise kernels
hold their kernels (:mod:`.trace`), so they are counted on both sides once.

One ratio has no held-out share: the framework's kernels do not map one by one onto the
model's operations (a layer norm may be one kernel or several, fused with the residual add
or not), so no subset of kernels has a prediction of its own to hold out.

Units: seconds, bytes, B/s, FLOPs.  Problems are ScenarioErrors at ``--scenario``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compute.models import Operation
from ..hardware import Preset
from ..units import parse_bandwidth
from .run_step import RunStep, product_ratio, refuse, run_step, traced_steps
from .trace import ELEMENTWISE, Profile


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
    step_operations: tuple[Operation, ...] = ()
    """The memory-bound operations one GPU runs once per step (the fp8 casts of its
    weights)."""
    base_efficiency: float = 1.0
    """The base GPU's own ``compute.memory_efficiency`` (a file fitted before: the
    prediction it makes for this trace checks it)."""
    notes: list[str] = field(default_factory=list)
    passes: str = "forward and backward"
    """Which passes of the micro-batches the operations are (``forward`` for a trace of
    forward passes: :func:`~.run_step.traced_passes`)."""

    @property
    def bytes(self) -> float:
        """Bytes the memory-bound operations of one step read and write on one GPU."""
        per_step = sum(op.bytes for op in self.step_operations)
        return sum(op.bytes for op in self.operations) * self.micro_batches / self.cp + per_step


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
            f"({self.step.micro_batches} micro-batch(es) per GPU, {self.step.passes})"
        )


def memory_step(run: RunStep, base: Preset) -> MemoryStep:
    """The memory-bound work of ``run``'s step on one GPU, priced at ``base``'s memory
    bandwidth (and its own memory efficiency, the prediction it makes)."""
    memory = tuple(op for op in run.operations if op.flops == 0 and op.bytes > 0)
    bandwidth = parse_bandwidth(base.spec.get("memory_bandwidth"))
    compute = base.spec.get("compute") or {}
    given = float(compute.get("memory_efficiency", 1.0))
    return MemoryStep(
        run.scenario,
        memory,
        run.micro_batches,
        run.cp,
        run.product_flops,
        bandwidth,
        tuple(op for op in run.step_operations if op.flops == 0 and op.bytes > 0),
        given,
        list(run.notes),
        run.passes,
    )


def scenario_step(path: str, base: Preset, stage: int = 0) -> MemoryStep:
    """The memory-bound work of a step on one GPU of pipeline stage ``stage`` of the run
    ``path`` (a scenario file; :func:`~.run_step.run_step` checks it), priced at ``base``'s
    memory bandwidth."""
    return memory_step(run_step(path, base, stage), base)


def fit_memory(profile: Profile, step: MemoryStep) -> MemoryFit:
    """``step``'s memory efficiency fitted to ``profile`` (see the module docstring).
    ScenarioError when the trace has no element-wise kernels, or its products are not
    those of the run's steps within a factor of :data:`~.run_step.FLOP_RATIO_LIMIT`."""
    notes = list(step.notes)
    steps = traced_steps(profile, notes)
    kernels, measured = profile.other.get(ELEMENTWISE, (0, 0.0))
    if kernels == 0 or measured <= 0:
        raise refuse(
            profile.file,
            "the trace has no element-wise, norm or reduction kernels to fit to",
            "a trace of a training step (forward and backward) or of its forward passes",
        )
    ratio = product_ratio(profile, step.scenario, step.product_flops, steps)
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
