"""What ``clustersim list gpus`` and ``clustersim list nodes`` print for a preset: one line
each (peaks in dense TFLOP/s, memory, bandwidths per direction, NICs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import units
from .curves import PRECISIONS

if TYPE_CHECKING:
    from .catalog import Preset

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
    plugin = units.parse_time(spec["nic"].get("plugin_latency", "0")) * 1e6
    plugin_phrase = f" ({plugin:g} us plugin latency)" if plugin > 0 else ""
    pcie = units.format_bandwidth(units.parse_bandwidth(spec["pcie"]["bandwidth"]))
    return (
        f"{preset.title}: {spec.get('gpus', 8)} x {gpu}, {links}, "
        f"{spec.get('nics', 1)} x {nic:g} Gb/s NICs{plugin_phrase}, PCIe {pcie}"
    )
