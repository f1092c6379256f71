"""GPU peaks and efficiency curves by number format: the precisions a GPU may have a peak
(and a curve) for, a catalog curve as the spec values DeviceSpec takes (``e_max`` from
``mamf / peak``, FLOP/s over FLOP/s), which curve a precision uses, and the check of a GPU
file's ``compute.memory_efficiency`` (the share of the memory bandwidth memory-bound
kernels reach)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import units
from ..errors import Problem, ScenarioError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
"""Number formats a GPU may have a peak (and a curve) for, as ``training.precision`` names them."""

CURVE_FALLBACK = ("bf16", "fp16")
"""Curves a precision without its own takes, in this order (then the built-in curve)."""


def _curve_spec(curve: Any, peak: Any, where: str) -> dict[str, Any]:
    """A catalog curve (``mamf`` or ``e_max``, and ``kernel_time``) as spec values
    ``{e_max, kernel_time}``: ``e_max = mamf / peak`` (both FLOP/s)."""
    if not isinstance(curve, dict) or set(curve) not in (
        {"mamf", "kernel_time"},
        {"e_max", "kernel_time"},
    ):
        raise ScenarioError(
            Problem("preset", f"{where}: a curve is {{mamf or e_max, kernel_time}}")
        )
    if "e_max" in curve:
        return dict(curve)
    try:
        e_max = units.parse_flop_rate(curve["mamf"]) / units.parse_flop_rate(peak)
    except (units.UnitError, TypeError, ZeroDivisionError) as exc:
        message = f"{where}: mamf {curve['mamf']!r} over peak {peak!r} ({exc})"
        raise ScenarioError(Problem("preset", message)) from None
    return {"e_max": e_max, "kernel_time": curve["kernel_time"]}


def curves_as_spec(spec: Mapping[str, Any], file: str) -> dict[str, Any]:
    """A GPU file's ``spec`` with its ``compute.curves`` in the form DeviceSpec takes."""
    compute = spec.get("compute")
    curves = compute.get("curves") if isinstance(compute, Mapping) else None
    if not isinstance(curves, Mapping):
        return dict(spec)
    peaks = spec.get("peaks", {})
    converted = {
        p: _curve_spec(
            curve, peaks.get(p) if isinstance(peaks, Mapping) else None, f"{file} curve {p}"
        )
        for p, curve in curves.items()
    }
    return {**spec, "compute": {**compute, "curves": converted}}


MEMORY_EFFICIENCY_ALLOWED = "a number > 0 and <= 1: the share of memory_bandwidth reached"
"""What ``compute.memory_efficiency`` takes."""


def check_memory_efficiency(spec: Mapping[str, Any], file: str) -> None:
    """ScenarioError (at key ``preset``, naming ``file``) when a GPU file's
    ``compute.memory_efficiency`` is given and is not a number in (0, 1]."""
    compute = spec.get("compute")
    if not isinstance(compute, Mapping) or "memory_efficiency" not in compute:
        return
    value = compute["memory_efficiency"]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0 < value <= 1:
        message = f"{file}: compute.memory_efficiency is {value!r}"
        raise ScenarioError(Problem("preset", message, MEMORY_EFFICIENCY_ALLOWED))


def curve_for(curves: Mapping[str, Any], precision: str) -> Any:
    """The curve of ``precision`` among ``curves`` (by precision), else the first of
    :data:`CURVE_FALLBACK` there is; None if none."""
    for name in (precision, *CURVE_FALLBACK):
        if name in curves:
            return curves[name]
    return None
