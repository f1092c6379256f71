"""nccl-tests' all-reduce bus bandwidth on DGX A100 and DGX H100, with clustersim's defaults.

Every case runs ``clustersim collective``'s defaults -- ``algorithm: auto``, ``protocol:
auto``, ``channels: auto``, the flow-level model -- on the DGX cluster described below and
compares the bus bandwidth (nccl-tests' ``busbw``, GB = 1e9 bytes) with a published
``all_reduce_perf`` figure, within 15%.

The clusters are the hardware catalog's nodes (docs/hardware.md): ``dgx-a100`` (8 A100 SXM4
80 GB on NVSwitch, NVLink 3 at 300 GB/s per GPU and direction, 8 ConnectX-6 HDR NICs of 200
Gb/s, one per GPU behind PCIe Gen4 switches), ``dgx-h100`` (8 H100 SXM5 80 GB, NVLink 4 at 450
GB/s with NVLink SHARP, 8 ConnectX-7 NDR NICs of 400 Gb/s behind PCIe Gen5) and ``hgx-h200``
(the same with H200s), the nodes on one non-blocking switch.

Which figures are held: every published figure of a default run (no ``NCCL_ALGO`` or
``NCCL_PROTO`` forced) on these nodes at 1 GiB and more -- where the bus bandwidth has
reached its plateau, the regime clustersim models (sources below, one per case;
docs/collectives.md lists them with clustersim's numbers).  Left out,
and why (docs/collectives.md gives clustersim's numbers for them): smaller sizes (8 to 256
MiB: NCCL's ramp to its plateau, which clustersim does not model, costs 10-40%); two-node
H100 runs (NCCL runs NVLSTree there, NVLink SHARP inside the node and a tree across, which
clustersim does not have: 446-487 GB/s measured, 375-383 simulated); runs with the
algorithm forced; an RoCE cluster's 320 GB/s on four H100 nodes (nccl#1221; +18-19%).
"""

from __future__ import annotations

import functools
from typing import Any

from ..scenario import parse_scenario
from .case import Case, Tolerance, Value

FAMILY = "nccl"
TOLERANCE = Tolerance(rel=0.15)
GIB = 2.0**30

NODES: dict[str, dict[str, Any]] = {
    "DGX A100": {"preset": "dgx-a100"},
    "DGX H100": {"preset": "dgx-h100"},
    "HGX H200": {"preset": "hgx-h200"},
}
"""The machines of the cases: catalog node presets."""


def dgx_scenario(kind: str, nodes: int, size_bytes: float) -> dict[str, Any]:
    """A ``collective`` scenario: an all-reduce of ``size_bytes`` over every GPU of
    ``nodes`` nodes of ``kind`` (a key of :data:`NODES`), clustersim's defaults."""
    return {
        "name": f"nccl-tests-{kind.lower().replace(' ', '-')}-{nodes}",
        "cluster": {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": NODES[kind]},
        "workload": {"collective": "allreduce", "bytes": f"{size_bytes:.0f}B"},
    }


@functools.lru_cache(maxsize=32)
def busbw_GBps(kind: str, nodes: int, size_bytes: float) -> Value:
    """nccl-tests' bus bandwidth (GB/s) of the simulated all-reduce (simulated once per
    machine, node count and size: several sources report the same point)."""
    from ..api import simulate

    return simulate(parse_scenario(dgx_scenario(kind, nodes, size_bytes))).summary["busbw_GBps"]


def _case(
    name: str, kind: str, nodes: int, gib: float, expected: float, source: str, note: str = ""
) -> Case:
    size = gib * GIB
    label = f"{kind}, {nodes} node{'s' if nodes > 1 else ''}, {gib:g} GiB all-reduce"
    return Case(
        f"nccl-{name}",
        FAMILY,
        f"{label} bus bandwidth{note}",
        source,
        expected,
        "GB/s",
        TOLERANCE,
        lambda: busbw_GBps(kind, nodes, size),
        f"{label}: clustersim.validation.nccl_tests.dgx_scenario, the defaults",
    )


STAS00 = "stas00/ml-engineering, network/README.md, nccl-tests on one A100 node"
AWS_P5 = "aws-samples/awsome-distributed-training, nccl-tests/aws-batch, one p5.48xlarge"

CASES = (
    _case("a100-1n-1g", "DGX A100", 1, 1, 229.04, STAS00),
    _case("a100-1n-4g", "DGX A100", 1, 4, 233.88, STAS00),
    _case("a100-1n-8g", "DGX A100", 1, 8, 234.61, STAS00),
    _case("a100-1n-16g", "DGX A100", 1, 16, 234.89, STAS00),
    _case("a100-1n-1g-p4d", "DGX A100", 1, 1, 230.77, "NVIDIA/nccl#527, AWS p4d, NCCL 2.9.9"),
    _case("a100-1n-4g-1048", "DGX A100", 1, 4, 232.54, "NVIDIA/nccl#1048 (max size 4 GiB)"),
    _case(
        "a100-4n-8g",
        "DGX A100",
        4,
        8,
        192.0,
        "NVIDIA/nccl#812, NVIDIA: 'we measure 192GB/s' on DGX A100 with 8 HDR NICs",
        " (node count not stated: 4)",
    ),
    _case("h100-1n-1g", "DGX H100", 1, 1, 441.81, AWS_P5),
    _case("h100-1n-4g", "DGX H100", 1, 4, 475.97, AWS_P5),
    _case("h100-1n-8g", "DGX H100", 1, 8, 480.43, AWS_P5),
    _case("h100-1n-16g", "DGX H100", 1, 16, 483.05, AWS_P5),
    _case(
        "h100-1n-16g-nhc",
        "DGX H100",
        1,
        16,
        477.873,
        "Azure/azurehpc-health-checks, distributed_nhc log, ND H100 v5",
    ),
    _case("h100-1n-4g-290", "DGX H100", 1, 4, 476.0, "NVIDIA/nccl-tests#290 (NVIDIA: expected)"),
    _case(
        "h100-1n-8g-212",
        "DGX H100",
        1,
        8,
        480.0,
        "NVIDIA/nccl-tests#212, NVIDIA: 'peak busBw of ~480GB/s' with NVLS",
    ),
    _case(
        "h100-4n-8g",
        "DGX H100",
        4,
        8,
        376.0,
        "NVIDIA/nccl-tests#290, NVIDIA: '46-48GB/s per NIC' for NDR, x 8 NICs",
        " (47 GB/s per NIC)",
    ),
    _case(
        "h200-4n-4g",
        "HGX H200",
        4,
        4,
        364.87,
        "stas00/ml-engineering, 4 x p5en (H200, NVLink 4, 3.2 Tb/s EFA), ring chosen",
    ),
)
