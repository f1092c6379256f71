"""The calibrated GPU, written as a hardware-catalog GPU file (``kind: gpu``), so that
``cluster.node.gpu: {preset: ./my_gpu.yaml}`` runs any scenario on it.

The file holds every key of the base GPU (a GPU file names no preset of its own: the catalog
expands one level), each number ``{value, source, note}`` as in the catalog's files: the
fitted curves (``compute.curves.<precision>``: ``e_max`` and ``kernel_time``) cite
``profile-fit`` (the trace, listed in the file's ``references``) and their notes name the
shapes and kernels they were fitted to; everything else keeps the base's value and source.
A curve's ``e_max`` the trace cannot tell keeps the base's, its note saying why.  With the
run the trace is a step of (:mod:`.memory_fit`), ``compute.memory_efficiency`` is fitted
too, citing ``profile-fit`` with a note naming the trace, its kernels and the seconds
measured and predicted; and, when the run's attention is fused and the trace has its
kernels (:mod:`.attention_fit`), ``compute.attention``: the peak the attention core ran at
(the base's, citing its source), the fitted ``curve.e_max`` (``profile-fit``, its note
naming the trace, the kernels and both times) and the base curve's ``kernel_time`` (kept,
citing its source).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from .attention_fit import AttentionFit
from .kernel_fit import CurveFit, KernelFit, Shape
from .memory_fit import MemoryFit
from .node_file import catalog_text

FIT_SOURCE = "profile-fit"
"""The reference id fitted numbers cite."""
SHAPES_CITED = 12
"""Most shapes a note lists by name (then how many more)."""


def shapes_cited(file: str, shapes: Sequence[Shape]) -> str:
    """``trace.json: 12 shapes, 58 kernels: mm 1024x512x96 (x6), ...``."""
    kernels = sum(len(s.times_s) for s in shapes)
    named = [f"{s.label} (x{len(s.times_s)})" for s in shapes[:SHAPES_CITED]]
    more = len(shapes) - SHAPES_CITED
    listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
    return f"{file}: {len(shapes)} shapes, {kernels} products: {listed}"


def gpu_spec(
    fit: KernelFit, memory: MemoryFit | None = None, attention: AttentionFit | None = None
) -> dict[str, Any]:
    """The base GPU's spec with the fitted curves in it (values as a catalog file writes
    them: ``e_max`` a share of the peak, ``kernel_time`` in us), the fitted
    ``memory_efficiency`` when ``memory`` is given, and the fitted ``attention`` when
    ``attention`` is given and fitted."""
    spec = copy.deepcopy(dict(fit.base.spec))
    compute = spec.setdefault("compute", {})
    if memory is not None:
        compute["memory_efficiency"] = memory.memory_efficiency
    if attention is not None and attention.fitted:
        core = attention.core
        compute["attention"] = {
            "peak": f"{core.peak_flops / 1e12:.6g}TFLOPS",
            "curve": {
                "e_max": attention.e_max,
                "kernel_time": f"{core.kernel_time_s * 1e6:.6g}us",
            },
        }
    curves = compute.setdefault("curves", {})
    for precision, result in fit.curves.items():
        if result.half_fitted:
            curves[precision] = {
                "e_max": result.curve.e_max,
                "kernel_time": f"{result.kernel_time_s(result.curve) * 1e6:.6g}us",
            }
    return spec


def _curve_note(result: CurveFit, key: str, base: str, file: str) -> tuple[str, str] | None:
    """(source, note) of a fitted curve's ``key`` (``e_max``, ``kernel_time``), None when
    it keeps the base's."""
    if key == "e_max" and not result.e_max_fitted:
        return None
    was = (
        f"{result.base.e_max:.4g} of the {result.peak_flops / 1e12:.4g} TFLOP/s peak"
        if key == "e_max"
        else f"{result.kernel_time_s(result.base) * 1e6:.4g} us (F_half {result.base.half_flops:.4g} FLOPs)"
    )
    now = f"F_half {result.curve.half_flops:.4g} FLOPs; " if key == "kernel_time" else ""
    return FIT_SOURCE, f"fitted: {was} in {base}; {now}to {shapes_cited(file, result.fitted)}"


def gpu_file_text(
    fit: KernelFit,
    name: str,
    header: Sequence[str],
    memory: MemoryFit | None = None,
    attention: AttentionFit | None = None,
) -> str:
    """The GPU file of ``fit`` (and of ``memory``, the fitted memory efficiency, and
    ``attention``, the fitted attention core, if given): YAML text with a comment header
    (``header`` lines) above it, checked to read back as a catalog GPU file."""
    base = fit.base
    file = fit.profile.file

    def annotate(path: str) -> tuple[str | None, str | None]:
        parts = path.split(".")
        if parts[:3] == ["spec", "compute", "curves"] and len(parts) == 5:
            result = fit.curves.get(parts[3])
            if result is not None and result.half_fitted:
                fitted = _curve_note(result, parts[4], base.name, file)
                if fitted is not None:
                    return fitted
                source, note = _base_note(base, path)
                kept = f"kept from {base.name}: {result.reason}"
                return source or FIT_SOURCE, f"{note}; {kept}" if note else kept
        if path == "spec.compute.memory_efficiency" and memory is not None:
            return FIT_SOURCE, memory.note()
        if path.startswith(ATTENTION) and attention is not None and attention.fitted:
            return _attention_note(attention, path, base)
        if path == "spec.efficiency":
            source, note = _base_note(base, path)
            why = (
                f"kept from {base.name}: a trace times each kernel alone, efficiency is the "
                "share of that a whole step keeps (docs/compute.md)"
            )
            return source, f"{note}; {why}" if note else why
        return _base_note(base, path)

    products = sum(len(s.times_s) for s in fit.shapes)
    device = f"{fit.profile.device}, " if fit.profile.device else ""
    references = {
        FIT_SOURCE: (
            "clustersim calibrate profile: least squares on the log of each shape's efficiency "
            f"(median kernel time) at {base.name}'s peaks, fitted to the GPU kernel times of "
            f"the matrix products of {file} ({device}{products} products of {len(fit.shapes)} "
            "shapes"
            + (
                f", {sum(fit.memory_bound)} of them memory-bound at the base curve and left out"
                if any(fit.memory_bound)
                else ""
            )
            + ")"
            + (
                f"; the memory efficiency: the measured time of its element-wise, norm and "
                f"reduction kernels against {memory.step.scenario}'s memory-bound work"
                if memory is not None
                else ""
            )
            + (
                f"; the attention core's e_max: the measured time of its forward attention "
                f"kernels against {attention.core.scenario}'s fused attention kernels"
                if attention is not None and attention.fitted
                else ""
            )
        )
    }
    title = f"{base.title}, calibrated on a profiler trace"
    spec = gpu_spec(fit, memory, attention)
    return catalog_text(
        "gpu", name, title, spec, annotate, references, base, header, base.interconnect
    )


ATTENTION = "spec.compute.attention."
"""Where the fitted attention core is written."""


def _attention_note(attention: AttentionFit, path: str, base: Any) -> tuple[str, str]:
    """(source, note) of a key of the fitted ``compute.attention``: ``e_max`` fitted, the
    peak and ``kernel_time`` the base's, citing where they come from in it."""
    key = path.removeprefix(ATTENTION).removeprefix("curve.")
    core = attention.core
    if key == "e_max":
        return FIT_SOURCE, attention.note()
    kept = {
        "peak": f"the attention core's peak on {base.name}: its {core.origin} peak",
        "kernel_time": (
            f"kept from {base.name}'s {core.origin} curve: a step's attention kernels are of "
            "one size, which cannot tell the ceiling from the fixed cost"
        ),
    }[key]
    source, note = _base_note(base, core.paths.get(key, path))
    return source or FIT_SOURCE, f"{kept} ({note})" if note else kept


def _base_note(base: Any, path: str) -> tuple[str | None, str | None]:
    """The base's source and note of ``path``; a curve's ``e_max`` read from its ``mamf``
    (the catalog writes the rate, the spec holds the share) says so."""
    source, note = base.sources.get(path), base.notes.get(path)
    if source is None and path.endswith(".e_max"):
        mamf = path.removesuffix(".e_max") + ".mamf"
        source = base.sources.get(mamf)
        if source is not None:
            share = "mamf over the peak"
            note = f"{share}: {base.notes[mamf]}" if mamf in base.notes else share
    return source, note
