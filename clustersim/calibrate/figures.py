"""The node figures a calibration fits, and how each is read from and written into a node spec.

A node spec here is the mapping of ``cluster.node`` as a catalog file's ``spec`` holds it
(values as YAML writes them: ``300GB/s``, ``1us``).  Every figure is the value the node file
carries, at line rate: clustersim applies NCCL's shares itself when it prices a collective
(:mod:`clustersim.collectives.bus`: NVLink 0.8-0.82 by generation, PCIe 0.75, NICs 0.96), so
a fitted line rate makes the simulator reach exactly the bandwidth the logs show.

Which logs can determine a figure: the NVLink (or, on a node without NVLink, the PCIe)
figures only logs of one node with 2 GPUs or more (over several nodes the intra-node hops
cannot be told from the NIC's); the NIC figures only logs over two nodes or more.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..collectives.bus import NET_SHARE, PCI_SHARE
from ..scenario.nvlink import NVLS_SHARE, nvlink_generation
from ..units import parse_bandwidth, parse_time

Spec = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """One number of a node spec that a calibration may fit."""

    key: str
    """Dotted key in the node spec (``nvlink.bandwidth``)."""
    label: str
    """What it is, in words."""
    unit: str
    """The unit it is shown and written in: ``GB/s`` or ``us``."""
    scale: float
    """SI per unit: 1e9 (bytes/s per GB/s) or 1e-6 (seconds per us)."""
    log: bool
    """Fitted on a log scale (a bandwidth, above 0) or linearly (a latency, 0 or more)."""
    scope: str
    """Which logs see it: ``intra`` (one node of 2 GPUs or more) or ``inter`` (2 nodes or
    more)."""
    applies: Callable[[Mapping[str, Any]], bool]
    """Whether the node has it (an NVLink figure needs NVLink, ...)."""

    def get(self, spec: Mapping[str, Any]) -> float:
        """The figure's value in ``spec``, in :attr:`unit`."""
        value = _dig(spec, self.key)
        parse = parse_bandwidth if self.unit == "GB/s" else parse_time
        return parse(value) / self.scale

    def put(self, spec: Spec, value: float) -> Spec:
        """``spec`` with the figure set to ``value`` (in :attr:`unit`), as YAML text with 6
        significant digits; a copy."""
        out = copy.deepcopy(spec)
        head, _, last = self.key.rpartition(".")
        _dig(out, head)[last] = format_value(value, self.unit)
        return out


def format_value(value: float, unit: str) -> str:
    """``value`` in ``unit`` as a spec writes it: ``271.345GB/s``, ``1.52us``."""
    return f"{value:.6g}{unit}"


def _dig(spec: Mapping[str, Any], key: str) -> Any:
    node: Any = spec
    for part in key.split("."):
        node = node[part]
    return node


def _has(*keys: str) -> Callable[[Mapping[str, Any]], bool]:
    def applies(spec: Mapping[str, Any]) -> bool:
        node: Any = spec
        for part in keys:
            if not isinstance(node, Mapping) or node.get(part) in (None, False):
                return False
            node = node[part]
        return True

    return applies


def _no_nvlink(spec: Mapping[str, Any]) -> bool:
    return not spec.get("nvlink")


FIGURES: tuple[Figure, ...] = (
    Figure(
        "nvlink.bandwidth",
        "NVLink bandwidth per GPU and direction",
        "GB/s",
        1e9,
        True,
        "intra",
        _has("nvlink"),
    ),
    Figure("nvlink.latency", "NVLink latency per hop", "us", 1e-6, False, "intra", _has("nvlink")),
    Figure(
        "nvlink.sharp",
        "NVLink SHARP (NVLS) all-reduce throughput per GPU",
        "GB/s",
        1e9,
        True,
        "intra",
        _has("nvlink", "sharp"),
    ),
    Figure("pcie.bandwidth", "PCIe bandwidth per GPU", "GB/s", 1e9, True, "intra", _no_nvlink),
    Figure("pcie.latency", "PCIe latency per hop", "us", 1e-6, False, "intra", _no_nvlink),
    Figure("nic.bandwidth", "NIC bandwidth (line rate)", "GB/s", 1e9, True, "inter", _has("nic")),
    Figure("nic.latency", "NIC latency per message", "us", 1e-6, False, "inter", _has("nic")),
    Figure(
        "nic.plugin_latency",
        "network plugin latency per network step",
        "us",
        1e-6,
        False,
        "inter",
        _has("nic"),
    ),
)
"""Every figure a calibration may fit, in the order reports list them."""


def working_spec(base: Mapping[str, Any]) -> Spec:
    """``base`` (a node preset's spec) made ready to fit: its NVLink generation written out
    (so that NCCL's shares and channel speeds stay those of the hardware while the
    bandwidth moves) and ``sharp: true`` written as the throughput it stands for (so that
    it does not follow a fitted NVLink bandwidth), and the NIC's network plugin latency
    written out (0: InfiniBand's) where it is not given, so that it can be fitted.  A copy."""
    spec = copy.deepcopy(dict(base))
    nic = spec.get("nic")
    if isinstance(nic, dict) and "plugin_latency" not in nic:
        nic["plugin_latency"] = "0us"  # InfiniBand's and the sockets' (scenario/node.py)
    nvlink = spec.get("nvlink")
    if isinstance(nvlink, dict):
        bandwidth = parse_bandwidth(nvlink["bandwidth"])
        generation = nvlink.get("generation") or nvlink_generation(bandwidth)
        if generation is not None:
            nvlink["generation"] = generation
        if nvlink.get("sharp") is True:
            share = NVLS_SHARE.get(generation or 0, NVLS_SHARE[4])
            nvlink["sharp"] = format_value(share * bandwidth / 1e9, "GB/s")
    return spec


def couple_pcie(spec: Spec, fitted: Mapping[str, float]) -> Spec:
    """``spec`` with its PCIe raised where it would cap a fitted NIC: clustersim's path from
    a GPU to the network runs at min(PCIe x 0.75, NIC x 0.96) (NCCL's figures), and the logs
    see that path as one number, which the NIC figure carries.  PCIe stays as it is where it
    is itself fitted (a node without NVLink) or already fast enough."""
    if "nic.bandwidth" not in fitted or "pcie.bandwidth" in fitted:
        return spec
    nic = parse_bandwidth(spec["nic"]["bandwidth"])
    pcie = parse_bandwidth(spec["pcie"]["bandwidth"])
    needed = nic * NET_SHARE / PCI_SHARE
    if pcie >= needed:
        return spec
    out = copy.deepcopy(spec)
    out["pcie"]["bandwidth"] = format_value(needed / 1e9, "GB/s")
    return out
