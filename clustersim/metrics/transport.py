"""summary.json's ``tcp`` block: what the kernel's TCP stack cost the hosts.

Only in runs whose NICs run TCP (``cluster.node.nic.transport: tcp``).  Every byte a TCP NIC
sends or receives costs :data:`~clustersim.hardware.transport.TCP_CPU_S_PER_BYTE` of kernel
CPU time on its node (copies between user and socket buffers; one core per 42 Gb/s, Cai et
al., SIGCOMM 2021).  The time is reported, not played: the node CPU's compute stream does
not run it (docs: README, "NIC transport").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..hardware.transport import TCP_CPU_S_PER_BYTE
from ..topology import Topology, nic_node
from .parts import SummaryPart


@dataclass(frozen=True)
class TcpSummary(SummaryPart):
    """The ``tcp`` block (seconds of CPU time, bytes)."""

    nic_bytes: float
    """Bytes the TCP NICs sent and received, all nodes together (each byte counted at both
    ends: once sent, once received)."""
    cpu_s: float
    """Kernel CPU seconds those bytes cost, all nodes together, over the run."""
    busiest_node: str
    """The node whose NICs moved the most bytes (the first by name on a tie)."""
    busiest_node_cpu_s: float
    """Its kernel CPU seconds over the run."""
    busiest_node_cores: float
    """Its kernel CPU seconds over the run's makespan: the cores its TCP stack kept busy on
    average."""


def tcp_summary(
    topology: Topology, index: Sequence[int], nbytes: Sequence[float], makespan_s: float
) -> TcpSummary | None:
    """The ``tcp`` block from the links ``index`` and the bytes each carried, or None when
    the cluster's NICs run RDMA (or no NIC carried a byte)."""
    if getattr(topology, "nic_transport", "rdma") != "tcp":
        return None
    per_node: dict[str, float] = {}
    for link, carried in zip(list(index), list(nbytes), strict=True):
        node = nic_node(topology.links[int(link)])
        if node is not None and carried > 0:
            per_node[node] = per_node.get(node, 0.0) + float(carried)
    if not per_node:
        return None
    busiest = min(per_node, key=lambda node: (-per_node[node], node))
    total = sum(per_node.values())
    node_cpu = per_node[busiest] * TCP_CPU_S_PER_BYTE
    return TcpSummary(
        nic_bytes=total,
        cpu_s=total * TCP_CPU_S_PER_BYTE,
        busiest_node=busiest,
        busiest_node_cpu_s=node_cpu,
        busiest_node_cores=node_cpu / makespan_s if makespan_s > 0 else 0.0,
    )
