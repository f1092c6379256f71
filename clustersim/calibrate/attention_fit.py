"""The attention core's rate of a GPU fitted to a profiler trace of a step of a known run.

clustersim prices the fused attention kernel (``flash_attention``,
:mod:`clustersim.model.operators`) at the device's ``compute.attention`` peak and curve when
it has them, else at the products' peak and curve of the training precision -- fp8 training
at the 16-bit ones, as Transformer Engine keeps attention in 16 bits
(:meth:`~clustersim.scenario.devices.DeviceSpec.priced`).  On a curve of ceiling ``e_max``
and fixed cost ``kernel_time`` (:func:`~clustersim.compute.curve.curve_at`), a kernel of
``W`` hardware FLOPs takes ``W / (peak x e_max) + kernel_time`` (the roofline takes the
larger of that and its bytes over the memory bandwidth).

Given the run the trace is a step of (:func:`~.run_step.run_step`), :func:`attention_core`
takes the fused kernels ``compute.attention`` prices -- the forward ``flash_attention``
kernels of one micro-batch, those the recomputation runs again included
(:data:`~clustersim.compute.models.ATTENTION_CORE`) -- times the micro-batches per GPU and
the steps the trace marks, over cp, and :func:`fit_attention` compares their time on the
base GPU's curve with the measured time of the trace's forward attention kernels
(:data:`~.trace.ATTENTION_KERNEL` names without ``bwd``, ``bprop``, ``backward`` or
``cutlassB``: :data:`BACKWARD_KERNEL`).  The rule: the base curve's ``kernel_time`` is
kept, and ``e_max`` is the ceiling at which the run's forward kernels take the measured time
exactly (found by bisection, the time falling as ``e_max`` rises; ``sum W / (peak x
(measured - n x kernel_time))`` when every kernel is compute-bound), capped at 1, rounded to
the 6 digits the GPU file writes.  Scaling ``e_max`` by predicted / measured would not give
the measured time back: the fixed cost does not scale with it, and at short sequences it is
most of a kernel's time.  Nor are ``e_max`` and ``kernel_time`` both fitted, as
:mod:`.kernel_fit` fits them to products of many shapes: a step's attention kernels are all
of one size (one sequence length, head count and micro-batch), which cannot tell a ceiling
from a fixed cost.

The backward kernels (``flash_attention.backward``) run at the same rate
(:data:`~clustersim.compute.models.ATTENTION_CORE` names them too), so the fitted ceiling
prices them as well; they are measured and predicted at the base's and at the fitted ceiling
(a check of the fit), not fitted: their names are less regular than the forward's.  The fit is written as
``compute.attention`` (:mod:`.gpu_file`): one peak and curve, whatever the precision a
scenario of the file trains at.  It is not made, with the reason the report prints, when
the run's attention is not fused (its ``scores`` and ``context`` are the trace's matrix
products, in the products' curve), when the trace has no fused attention kernels, or when
their names do not tell forward from backward.

Units: seconds, FLOPs, FLOP/s.  Problems are ScenarioErrors at ``--scenario``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..compute.curve import EfficiencyCurve, curve_at
from ..compute.models import ComputeModel, Operation, ProductRate, compute_model
from ..hardware import Preset
from ..hardware.curves import CURVE_FALLBACK
from ..model.operators import FLASH
from ..units import parse_flop_rate
from .run_step import RunStep, refuse, traced_steps
from .trace import Profile

if TYPE_CHECKING:
    from ..scenario.devices import DeviceSpec

BACKWARD_KERNEL = re.compile(r"bwd|bprop|backward|cutlassB", re.IGNORECASE)
"""A fused attention kernel's name that marks a backward (FlashAttention's ``flash_bwd_*``,
cuDNN's ``*_bprop_*``, PyTorch's memory-efficient ``fmha_cutlassB_*``)."""
HALVINGS = 200
"""Bisection steps of the search for ``e_max`` (the interval falls below a double's)."""


@dataclass(frozen=True)
class AttentionCore:
    """The fused attention kernels of a run's step on one GPU and the rate the base GPU
    prices them at, each kernel alone (efficiency 1)."""

    scenario: str
    forward: tuple[Operation, ...]
    """The kernels ``compute.attention`` prices of one micro-batch (forward and recomputed)."""
    backward: tuple[Operation, ...]
    """The fused backward kernels of one micro-batch (at the attention core's rate too)."""
    share: float
    """Micro-batches per GPU over cp."""
    origin: str
    """Whose peak and curve they run at (``bf16``, ``compute.attention``)."""
    peak_flops: float
    """The attention core's peak, FLOP/s (as the GPU file writes it)."""
    e_max: float
    """The base curve's ceiling."""
    kernel_time_s: float
    """The base curve's fixed cost, s (6 digits, as written)."""
    model: ComputeModel
    """The base GPU's model of the run's precision, efficiency 1."""
    paths: dict[str, str] = field(default_factory=dict)
    """Written key (``peak``, ``kernel_time``) -> the base's key path it comes from."""

    @property
    def curve(self) -> EfficiencyCurve:
        """The base's curve of the attention core."""
        return curve_at(self.e_max, self.kernel_time_s, self.peak_flops)

    def seconds(
        self, e_max: float, memory_efficiency: float, steps: int, backward: bool = False
    ) -> float:
        """The forward (or ``backward``) kernels of ``steps`` steps at ceiling ``e_max``, s."""
        rate = ProductRate(self.peak_flops, curve_at(e_max, self.kernel_time_s, self.peak_flops))
        model = self.model
        priced = compute_model(
            model.name,
            model.peak_flops,
            1.0,
            model.bandwidth_Bps,
            model.curve,
            attention=rate,
            memory_efficiency=memory_efficiency,
            sixteen_bit=model.sixteen_bit,
        )
        kernels = self.backward if backward else self.forward
        return priced.seconds(kernels) * self.share * steps

    def backward_seconds(self, steps: int) -> float:
        """The backward kernels of ``steps`` steps on the base's model, s."""
        return self.model.seconds(self.backward) * self.share * steps


def attention_core(run: RunStep, base: Preset) -> AttentionCore:
    """``run``'s fused attention kernels and ``base``'s rate for them at the run's precision."""
    from ..scenario.devices import DeviceSpec
    from ..strategies.kernel_times import DeviceModels
    from ..topology import Device

    spec = DeviceSpec.model_validate(dict(base.spec))
    try:
        priced = spec.priced(run.precision)
    except KeyError:
        message = f"{base.name} has no peak for its precision {run.precision}"
        raise refuse(run.scenario, message, "a run of a precision --base has a peak for") from None
    device = Device(
        base.name,
        "gpu",
        0,
        priced.flops_per_s,
        1.0,
        priced.memory_bytes,
        priced.memory_bandwidth_Bps,
        compute=priced.compute,
        type=base.name,
    )
    model = DeviceModels(run.folder).of(device)
    rate_peak, curve = model.attention or (model.peak_flops, model.curve)
    kernel_us = float(f"{curve.half_flops / (curve.e_max * rate_peak) * 1e6:.6g}")
    origin, paths = _origin(spec, run.precision)
    return AttentionCore(
        run.scenario,
        tuple(op for op in run.operations if op.name == FLASH),
        tuple(op for op in run.operations if op.name == FLASH + ".backward"),
        run.share,
        origin,
        parse_flop_rate(f"{rate_peak / 1e12:.6g}TFLOPS"),
        curve.e_max,
        kernel_us * 1e-6,
        model,
        paths,
    )


def _origin(spec: DeviceSpec, precision: str | None) -> tuple[str, dict[str, str]]:
    """Whose peak and curve the attention core runs at on ``base``, and the key paths of the
    written peak and kernel time there."""
    from ..scenario.devices import FP8

    if spec.compute.attention is not None:
        where = "spec.compute.attention"
        return "compute.attention", {
            "peak": f"{where}.peak",
            "kernel_time": f"{where}.curve.kernel_time",
        }
    chosen = spec.precision_of(precision)
    if chosen == FP8:
        chosen = spec.sixteen_bit() or chosen
    paths = {"peak": f"spec.peaks.{chosen}"} if chosen in spec.peaks else {}
    curves = spec.compute.curves
    key = next((k for k in (chosen, *CURVE_FALLBACK) if k in curves), None)
    if key is not None:
        paths["kernel_time"] = f"spec.compute.curves.{key}.kernel_time"
    return chosen, paths


@dataclass(frozen=True)
class AttentionFit:
    """The attention core's ceiling fitted to a trace (or why not), and the numbers."""

    trace: str
    core: AttentionCore
    steps: int
    reason: str
    """Why it is not fitted; empty when it is."""
    forward_kernels: int = 0
    measured_s: float = 0.0
    """The trace's forward attention kernels' time, s."""
    backward_kernels: int = 0
    backward_measured_s: float = 0.0
    predicted_s: float = 0.0
    """The run's forward kernels of ``steps`` steps on the base's curve, s."""
    e_max: float = 0.0
    """The fitted ceiling (6 digits)."""
    fitted_s: float = 0.0
    """The forward kernels at the fitted ceiling, s."""
    backward_predicted_s: float = 0.0
    """The run's backward kernels on the base's model, s."""
    backward_fitted_s: float = 0.0
    """The run's backward kernels at the fitted ceiling, s."""
    notes: list[str] = field(default_factory=list)

    @property
    def fitted(self) -> bool:
        """True when the ceiling was fitted (no :attr:`reason`)."""
        return not self.reason

    @property
    def factor(self) -> float:
        """predicted / measured: the share of the base curve's rate the kernels reach."""
        return self.predicted_s / self.measured_s

    def note(self) -> str:
        """The GPU file's note on the fitted ``compute.attention.curve.e_max``."""
        return (
            f"fitted: {self.core.e_max:.6g} ({self.core.origin} curve); {self.trace}: "
            f"{self.forward_kernels} forward attention kernels, measured {self.measured_s:.6g} s "
            f"against {self.predicted_s:.6g} s predicted for {self.steps} step(s) of "
            f"{self.core.scenario} ({len(self.core.forward)} fused kernels per micro-batch)"
        )


def fit_attention(profile: Profile, core: AttentionCore, memory_efficiency: float) -> AttentionFit:
    """``core``'s ceiling fitted to ``profile`` (see the module docstring); a memory-bound
    kernel priced at ``memory_efficiency`` (the one the GPU file writes)."""
    steps = traced_steps(profile, [])
    kernels = profile.attention
    forward = [s for name, s in kernels if not BACKWARD_KERNEL.search(name)]
    backward = [s for name, s in kernels if BACKWARD_KERNEL.search(name)]
    reason = _unfitted(core, len(kernels), len(forward), len(backward), profile.file)
    if reason:
        return AttentionFit(profile.file, core, steps, reason)
    measured = sum(forward)
    notes: list[str] = []
    e_max = _ceiling(lambda e: core.seconds(e, memory_efficiency, steps), measured, notes)
    return AttentionFit(
        profile.file,
        core,
        steps,
        "",
        len(forward),
        measured,
        len(backward),
        sum(backward),
        core.seconds(core.e_max, memory_efficiency, steps),
        e_max,
        core.seconds(e_max, memory_efficiency, steps),
        core.backward_seconds(steps),
        core.seconds(e_max, memory_efficiency, steps, backward=True),
        notes,
    )


def _unfitted(core: AttentionCore, kernels: int, forward: int, backward: int, file: str) -> str:
    """Why the trace and the run leave the attention core unfitted ("" when they do not)."""
    if not core.forward:
        traced = f"the trace has {kernels} fused attention kernels but " if kernels else ""
        return (
            f"{traced}the run's attention is not fused (model.transformer.flash_attention): "
            "its scores and context are the trace's matrix products, in the products' fit"
        )
    if not kernels:
        return (
            f"{file} has no fused attention kernels (flash, fmha or attention in the name) "
            f"for the run's {len(core.forward)} per micro-batch"
        )
    if not forward or not backward:
        missing = "forward" if not forward else "backward"
        return (
            f"none of the trace's {kernels} attention kernels is named as a {missing} one "
            "(bwd, bprop, backward or cutlassB mark a backward): the forward's time is unknown"
        )
    return ""


def _ceiling(seconds: Callable[[float], float], measured: float, notes: list[str]) -> float:
    """The ``e_max`` at which ``seconds(e_max)`` (falling as it rises) is ``measured``,
    capped at 1 (with a note), 6 digits."""
    fastest = seconds(1.0)
    if fastest >= measured:
        if fastest > measured:
            notes.append(
                f"the kernels ran faster ({measured:.6g} s) than the curve allows at e_max 1 "
                f"({fastest:.6g} s, its kernel time kept): capped at 1"
            )
        return 1.0
    low, high = 0.5, 1.0
    for _ in range(HALVINGS):
        if seconds(low) >= measured:
            break
        low, high = low / 2, low
    for _ in range(HALVINGS):
        middle = (low + high) / 2
        low, high = (middle, high) if seconds(middle) > measured else (low, middle)
    return float(f"{(low + high) / 2:.6g}")
