"""The fit of a GPU's matrix-product curves to the kernel times of a profiler trace.

The products of the trace (:mod:`.trace`) are grouped by precision and shape (``batch``,
``m``, ``n``, ``k``); a shape's measured time is the median of its kernels' times (the first
call of a shape, which may pay for cuBLAS's heuristics, does not move it).  Per precision the
shapes are ordered by FLOPs and held out by ``--hold-out`` as a log's sizes are
(:func:`.holdout.hold_out_rule`; default: every other shape and the largest), and the curve
of :mod:`clustersim.compute.curve`, ``eff(F) = e_max F / (F + F_half)``, is fitted to the
others at the base GPU's peak of that precision by :func:`~clustersim.compute.curve.fit_curve`
(least squares on the log of the efficiency).  The prediction of a shape is the roofline's
(:class:`~clustersim.compute.models.Roofline`) for the kernel alone: the slower of
``F / (peak x eff(F))`` and its bytes (16-bit operands and result) over the base GPU's memory
bandwidth times its ``memory_efficiency`` (a scenario's ``efficiency`` then multiplies the
first for the whole step).  A shape whose bytes take at least as long as its FLOPs at the
base curve is *memory-bound*: priced by its bytes whatever the curve, it is held out of the
curve's fit (a head-sized batched product of unfused attention, a thin embedding product)
and its error reported apart.

``e_max`` is fitted only where the trace can tell it: when the free fit's ceiling is above
the peak, or its ``F_half`` above the largest product fitted (every product below half the
ceiling, where e_max and F_half trade off against each other), or one shape alone is fitted,
``e_max`` keeps the base GPU's value and ``F_half`` alone is fitted.  Numbers are rounded to
the 6 digits the GPU file writes before they predict anything, so that the report and the
file agree.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..compute.curve import DEFAULT_CURVE, EfficiencyCurve, KernelSample, curve_at, fit_curve
from ..errors import Problem, ScenarioError
from ..hardware import Preset
from ..hardware.curves import PRECISIONS, curve_for
from ..model.operators import product_bytes
from ..units import parse_bandwidth, parse_flop_rate, parse_flops, parse_time
from .holdout import hold_out_rule
from .trace import Product, Profile

ALLOWED = "default, none, a fraction from 0 to 1 (0.25), or a FLOP range MIN:MAX (1GFLOP:1TFLOP)"
"""What ``--hold-out`` takes for a trace."""


@dataclass(frozen=True)
class Shape:
    """The products of one precision and shape, and their measured time."""

    precision: str
    batch: int
    m: int
    n: int
    k: int
    op: str
    """The op most of them are (``aten::addmm``)."""
    times_s: tuple[float, ...]
    """Each product's kernel time (s)."""
    kernels: tuple[str, ...]
    """Their kernels' names, the most frequent first."""

    @property
    def flops(self) -> float:
        """2 batch m n k."""
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        """Bytes it reads and writes as the roofline prices a product: 16-bit operands and
        result, 2 batch (m k + k n + m n) (:func:`clustersim.model.operators.product_bytes`)."""
        return product_bytes(self.m, self.n, self.k, self.batch)

    @property
    def time_s(self) -> float:
        """The measured time: the median of :attr:`times_s`."""
        return statistics.median(self.times_s)

    @property
    def label(self) -> str:
        """``mm 1024x512x96`` (``bmm 64 x 128x128x64`` with a batch)."""
        op = self.op.removeprefix("aten::")
        batch = f"{self.batch} x " if self.batch > 1 else ""
        return f"{op} {batch}{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class CurveFit:
    """The curve of one precision: the base GPU's, the calibrated one and how it was found."""

    precision: str
    peak_flops: float
    """The base GPU's peak of this precision (FLOP/s)."""
    base: EfficiencyCurve
    curve: EfficiencyCurve
    """Calibrated (rounded as written)."""
    e_max_fitted: bool
    half_fitted: bool
    reason: str
    """Why e_max (or the whole curve) keeps the base's value; empty when both are fitted."""
    fitted: tuple[Shape, ...]
    """The shapes it was fitted to."""
    memory_Bps: float = math.inf
    """The base GPU's memory bandwidth times its memory efficiency (B/s): the roofline's
    other bound."""

    def kernel_time_s(self, curve: EfficiencyCurve) -> float:
        """``curve``'s fixed cost per product: F_half / (e_max x peak), s."""
        return curve.half_flops / (curve.e_max * self.peak_flops)

    def predict(self, shape: Shape) -> float:
        """The calibrated time of ``shape``'s product alone, as the roofline prices it
        (without a scenario's whole-step ``efficiency``): the slower of the curve's
        ``F / (peak x eff(F))`` and the bytes over the memory rate, s."""
        compute = shape.flops / (self.peak_flops * self.curve(shape.flops))
        return max(compute, shape.bytes / self.memory_Bps)


@dataclass
class KernelFit:
    """A trace's products fitted: every shape, held out or not, and the curve per precision."""

    profile: Profile
    base: Preset
    shapes: list[Shape]
    held_out: list[bool]
    curves: dict[str, CurveFit]
    notes: list[str] = field(default_factory=list)
    memory_bound: list[bool] = field(default_factory=list)
    """Per shape, whether the roofline prices it by its bytes (held out of the curve's fit:
    :func:`memory_bound`)."""

    def predicted_s(self, index: int) -> float:
        """The calibrated time of shape ``index``, s."""
        shape = self.shapes[index]
        return self.curves[shape.precision].predict(shape)

    def error(self, index: int) -> float:
        """Relative error of shape ``index``: predicted / measured - 1."""
        return self.predicted_s(index) / self.shapes[index].time_s - 1

    def errors(self, held_out: bool) -> list[float]:
        """Relative errors of the fitted shapes (or of the held-out ones that the curve
        prices: the memory-bound ones are :meth:`memory_errors`)."""
        return [
            self.error(i)
            for i, held in enumerate(self.held_out)
            if held == held_out and not self.is_memory_bound(i)
        ]

    def memory_errors(self) -> list[float]:
        """Relative errors of the memory-bound shapes (priced by their bytes)."""
        return [self.error(i) for i in range(len(self.shapes)) if self.is_memory_bound(i)]

    def is_memory_bound(self, index: int) -> bool:
        """Whether shape ``index`` is memory-bound at the base curve (see :attr:`memory_bound`)."""
        return bool(self.memory_bound) and self.memory_bound[index]

    def set_of(self, index: int) -> str:
        """Which set shape ``index`` is in: ``fit``, ``held out`` or ``memory`` (bound)."""
        if self.is_memory_bound(index):
            return "memory"
        return "held out" if self.held_out[index] else "fit"


def group_shapes(products: Sequence[Product]) -> list[Shape]:
    """``products`` grouped by precision and shape, by precision (as :data:`PRECISIONS`
    lists them) then FLOPs."""
    groups: dict[tuple[str, int, int, int, int], list[Product]] = {}
    for p in products:
        groups.setdefault((p.precision, p.batch, p.m, p.n, p.k), []).append(p)
    shapes = []
    for (precision, batch, m, n, k), members in groups.items():
        op = Counter(p.op for p in members).most_common(1)[0][0]
        kernels = Counter(name for p in members for name in p.kernels)
        names = tuple(name for name, _ in kernels.most_common())
        times = tuple(p.time_s for p in members)
        shapes.append(Shape(precision, batch, m, n, k, op, times, names))
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return sorted(shapes, key=lambda s: (order[s.precision], s.flops, s.batch, s.m, s.n, s.k))


def fit_profile(profile: Profile, base: Preset, hold_out: str) -> KernelFit:
    """Fit ``base``'s curves to ``profile``'s products, holding out by ``hold_out``.
    ScenarioError for a trace of one shape, or of precisions the base GPU has no peak for."""
    rule = hold_out_rule(hold_out, parse_flops, ALLOWED)
    peaks = base.spec.get("peaks") or {}
    shapes = group_shapes(profile.products)
    notes = []
    missing = sorted({s.precision for s in shapes if s.precision not in peaks})
    for precision in missing:
        count = sum(1 for s in shapes if s.precision == precision)
        notes.append(f"{count} {precision} shapes left out: {base.name} has no {precision} peak")
    shapes = [s for s in shapes if s.precision in peaks]
    if not shapes:
        raise ScenarioError(
            Problem(
                "--base",
                f"{base.name} has no peak for the trace's products ({', '.join(missing)})",
                "a GPU with those peaks (clustersim list gpus)",
            ),
            profile.file,
        )
    if len(shapes) == 1:
        raise ScenarioError(
            Problem(
                "trace",
                f"one distinct matrix-product shape ({shapes[0].label}, {shapes[0].precision}): "
                "a curve needs products of two sizes or more",
                "a trace of a training step, whose products come in several shapes",
            ),
            profile.file,
        )
    held = [False] * len(shapes)
    bound = [False] * len(shapes)
    memory = memory_rate(base.spec)
    curves = {}
    for precision in dict.fromkeys(s.precision for s in shapes):
        peak = parse_flop_rate(peaks[precision])
        prior = _base_curve(base.spec, precision, peak)
        index = [i for i, s in enumerate(shapes) if s.precision == precision]
        for i in index:
            bound[i] = held[i] = memory_bound(shapes[i], peak, prior, memory)
        index = [i for i in index if not bound[i]]
        for i in rule([shapes[i].flops for i in index]):
            held[index[i]] = True
        fitted = [shapes[i] for i in index if not held[i]]
        curves[precision] = _fit(precision, peak, prior, fitted, memory)
    if any(bound):
        notes.append(
            f"{sum(bound)} shape(s) memory-bound at the base curve (their bytes over "
            f"{memory / 1e12:.4g} TB/s take longer than their FLOPs): predicted by the "
            "roofline's bytes, held out of the curve's fit"
        )
    return KernelFit(profile, base, shapes, held, curves, notes, bound)


def memory_bound(shape: Shape, peak: float, curve: EfficiencyCurve, memory: float) -> bool:
    """Whether the roofline prices ``shape`` by its bytes at ``curve`` (the base GPU's): its
    bytes over the memory rate ``memory`` (B/s) take at least its FLOPs at ``peak`` (FLOP/s)
    times the curve's efficiency."""
    return shape.bytes / memory >= shape.flops / (peak * curve(shape.flops))


def memory_rate(spec: Mapping[str, Any]) -> float:
    """A GPU spec's memory bandwidth times its ``compute.memory_efficiency`` (B/s; inf
    where it gives no bandwidth): the rate the roofline prices bytes at."""
    given = spec.get("memory_bandwidth")
    if given is None:
        return math.inf
    compute = spec.get("compute") or {}
    return parse_bandwidth(given) * float(compute.get("memory_efficiency", 1.0))


def _base_curve(spec: Mapping[str, Any], precision: str, peak: float) -> EfficiencyCurve:
    """The base GPU's curve for ``precision`` (as a scenario would price it)."""
    compute = spec.get("compute") or {}
    found = curve_for(compute.get("curves") or {}, precision)
    if found is None:
        return DEFAULT_CURVE
    return curve_at(float(found["e_max"]), parse_time(found["kernel_time"]), peak)


def _fit(
    precision: str, peak: float, base: EfficiencyCurve, fitted: Sequence[Shape], memory: float
) -> CurveFit:
    def written(e_max: float, half: float) -> EfficiencyCurve:
        e_max = float(f"{e_max:.6g}")
        kernel_s = float(f"{half / (e_max * peak) * 1e6:.6g}") * 1e-6
        return curve_at(e_max, kernel_s, peak)

    if not fitted:
        reason = "every shape of this precision is held out or memory-bound"
        return CurveFit(precision, peak, base, base, False, False, reason, (), memory)
    samples = [KernelSample(s.m, s.n, s.k, s.batch, precision, s.time_s) for s in fitted]
    largest = max(s.flops for s in fitted)
    reason = ""
    if len(fitted) > 1:
        free = fit_curve(samples, peak)
        if free.e_max >= 1:
            reason = "the products fitted reach no ceiling below the peak"
        elif free.half_flops > largest:
            reason = (
                f"the largest product fitted ({largest:.3g} FLOPs) is below F_half, where "
                "e_max and F_half trade off: the trace cannot tell the ceiling"
            )
        else:
            curve = written(free.e_max, free.half_flops)
            return CurveFit(precision, peak, base, curve, True, True, "", tuple(fitted), memory)
    else:
        reason = "one shape fitted"
    held = fit_curve(samples, peak, base.e_max)
    curve = written(base.e_max, held.half_flops)
    return CurveFit(precision, peak, base, curve, False, True, reason, tuple(fitted), memory)
