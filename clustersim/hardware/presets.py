"""Presets expanded into spec values: a device or node mapping that names a ``preset`` gets the
preset's values under the keys it gives itself (deep merge: keys beside the preset win, the
preset's other keys stay).

Used by the scenario models (``DeviceSpec``, ``NodeSpec``: validation) and by the run
folder's ``scenario.resolved.yaml`` (the same expansion, written out), so both see the same
values.  Units are those of the YAML: values stay as written (``80GB``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import units
from ..errors import Problem, ScenarioError
from .catalog import PRECISIONS, Preset, find

CURVE_FALLBACK = ("bf16", "fp16")
"""Curves a precision without its own takes, in this order (then the built-in curve)."""


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on it: mappings merge key by key (recursively), anything
    else in ``over`` (a number, a list, null) replaces what ``base`` has.  Copies."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def expand(data: Mapping[str, Any], kind: str, base_dir: Path | None = None) -> dict[str, Any]:
    """``data`` (a device or node mapping with a ``preset``) as the preset's values with the
    other keys of ``data`` laid on them; no ``preset`` key.  ScenarioError at ``preset`` for
    an unknown name or a bad file."""
    preset = find(data.get("preset"), kind, base_dir)
    given = {key: value for key, value in data.items() if key != "preset"}
    return deep_merge(preset.spec, given)


def canonical_name(data: Mapping[str, Any], kind: str, base_dir: Path | None = None) -> str:
    """The catalog name (or the file) of the preset ``data`` names."""
    return find(data.get("preset"), kind, base_dir).name


# --------------------------------------------------------------------------- curves


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


def curve_for(curves: Mapping[str, Any], precision: str) -> Any:
    """The curve of ``precision`` among ``curves`` (by precision), else the first of
    :data:`CURVE_FALLBACK` there is; None if none."""
    for name in (precision, *CURVE_FALLBACK):
        if name in curves:
            return curves[name]
    return None


# --------------------------------------------------------------------------- listing


LINK_NAMES = {"nvlink": "NVLink", "infinity_fabric": "Infinity Fabric", "pcie": "PCIe"}
"""How ``clustersim list gpus`` names the kinds of GPU-to-GPU link."""


def _rate(value: Any) -> str:
    """A FLOP rate in TFLOP/s, as few digits as it needs."""
    return f"{units.parse_flop_rate(value) / 1e12:g}"


def gpu_summary(preset: Preset) -> str:
    """One line of ``clustersim list gpus``: peaks by precision (dense TFLOP/s), memory,
    memory bandwidth, GPU-to-GPU bandwidth per direction."""
    spec = preset.spec
    peaks = spec.get("peaks", {})
    shown = ", ".join(f"{p} {_rate(peaks[p])}" for p in PRECISIONS if p in peaks)
    memory = units.format_size(units.parse_size(spec["memory"]))
    bandwidth = units.format_bandwidth(units.parse_bandwidth(spec["memory_bandwidth"]))
    links = ", ".join(
        f"{LINK_NAMES.get(kind, kind)} {units.format_bandwidth(units.parse_bandwidth(value))}"
        for kind, value in preset.interconnect.items()
    )
    return f"{preset.title}: dense TFLOP/s {shown}; {memory} at {bandwidth}; {links} per direction"


def node_summary(preset: Preset) -> str:
    """One line of ``clustersim list nodes``: GPUs, their links, the NICs."""
    spec = preset.spec
    gpu = spec.get("gpu", {}).get("preset", "?")
    nvlink = spec.get("nvlink")
    if nvlink is None:
        links = "no NVLink"
    else:
        bandwidth = units.format_bandwidth(units.parse_bandwidth(nvlink["bandwidth"]))
        pairs = nvlink.get("pairs")
        count = sum(pair[2] if len(pair) > 2 else 1 for pair in pairs or ())
        links = (
            f"NVSwitch {bandwidth}"
            if pairs is None
            else f"{len(pairs)} GPU pairs, {count} links of {bandwidth}"
        )
    links += " per direction"
    domain = spec.get("nvlink_domain", 1)
    if domain > 1:
        links += f" (an NVLink domain of {domain} nodes)"
    nic = units.parse_bandwidth(spec["nic"]["bandwidth"]) * 8 / 1e9
    pcie = units.format_bandwidth(units.parse_bandwidth(spec["pcie"]["bandwidth"]))
    return (
        f"{preset.title}: {spec.get('gpus', 8)} x {gpu}, {links}, "
        f"{spec.get('nics', 1)} x {nic:g} Gb/s NICs, PCIe {pcie}"
    )
