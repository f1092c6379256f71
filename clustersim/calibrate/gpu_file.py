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
measured and predicted.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

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


def gpu_spec(fit: KernelFit, memory: MemoryFit | None = None) -> dict[str, Any]:
    """The base GPU's spec with the fitted curves in it (values as a catalog file writes
    them: ``e_max`` a share of the peak, ``kernel_time`` in us), and the fitted
    ``memory_efficiency`` when ``memory`` is given."""
    spec = copy.deepcopy(dict(fit.base.spec))
    compute = spec.setdefault("compute", {})
    if memory is not None:
        compute["memory_efficiency"] = memory.memory_efficiency
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
    fit: KernelFit, name: str, header: Sequence[str], memory: MemoryFit | None = None
) -> str:
    """The GPU file of ``fit`` (and of ``memory``, the fitted memory efficiency, if given):
    YAML text with a comment header (``header`` lines) above it, checked to read back as a
    catalog GPU file."""
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
            "shapes)"
            + (
                f"; the memory efficiency: the measured time of its element-wise, norm and "
                f"reduction kernels against {memory.step.scenario}'s memory-bound work"
                if memory is not None
                else ""
            )
        )
    }
    title = f"{base.title}, calibrated on a profiler trace"
    spec = gpu_spec(fit, memory)
    return catalog_text(
        "gpu", name, title, spec, annotate, references, base, header, base.interconnect
    )


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
