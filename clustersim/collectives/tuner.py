"""NCCL's tuner: the share of the links each protocol and algorithm reaches.

NCCL's tuner prices an algorithm and protocol by a bus bandwidth: its channels times their
speed (:mod:`~clustersim.collectives.channels`), then per protocol and algorithm capped by
what its kernels reach (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and its
constant tables; read at v2.21.5 and on master, 2026).  With ``B = channels x speed``:

* ring, Simple: ``B``;
* ring, LL: ``min(0.5 B, llMaxBw)``;
* ring, LL128: ``min(0.92 B, channels x perChMaxRingLL128Bw)``;
* tree (all-reduce), Simple: ``T = min(0.92 B, channels x perChMaxTreeBw)``;
  LL: ``min(T / 3.8, llMaxBw)``; LL128: ``min(T x (7/9 on one node, else 120/128),
  channels x perChMaxTreeLL128Bw)``.

clustersim applies them as the share of link bandwidth a collective's data gets (its wire
factor): the numbers above over ``B``, the line formats' own shares (LL 1/2, LL128 120/128)
in place of NCCL's 0.5 and 0.92.  The caps are per GPU architecture (the node's NVLink
generation) and per node count (1, 2, 3 or more); llMaxBw across nodes is NCCL's Intel-CPU
row (a cluster description names no CPU vendor).  Left out: NCCL's size-dependent tree
correction factors, the Hopper simple-tree 0.85, and CollNet.
"""

from __future__ import annotations

from .channels import Graph

ARCHS = (70, 80, 90, 100)
"""Architectures of the tables (Volta, Ampere, Hopper, Blackwell); older ones use Volta's."""

LL_MAX_ONE_NODE_GBps = {70: 39.0, 80: 87.7, 90: 141.0, 100: 282.0}
"""llMaxBws on one node, by architecture (GB/s, the whole collective)."""
LL_MAX_NODES_GBps = (39.0, 20.4)
"""llMaxBws across 2 nodes and across 3 or more (Intel CPUs), GB/s."""
RING_LL128_PER_CHANNEL_GBps = {70: 20.0, 80: 20.0, 90: 36.7, 100: 40.0}
"""perChMaxRingLL128Bws by architecture, GB/s per channel (same for every node count)."""
TREE_PER_CHANNEL_GBps = {
    70: (26.5, 18.5, 10.0),
    80: (24.0, 23.6, 17.8),
    90: (38.7, 41.4, 36.0),
    100: (70.0, 42.8, 24.0),
}
"""perChMaxTreeBws by architecture for 1, 2 and 3+ nodes, GB/s per channel."""
TREE_LL128_PER_CHANNEL_GBps = {
    70: (20.0, 20.0, 20.0),
    80: (20.0, 20.0, 20.0),
    90: (36.7, 36.7, 29.0),
    100: (55.6, 31.67, 20.0),
}
"""perChMaxTreeLL128Bws by architecture for 1, 2 and 3+ nodes, GB/s per channel."""
TREE_KERNEL_SHARE = 0.92
"""Share of the links' bandwidth NCCL's tree kernels reach (tuning.cc: ``busBw * .92``)."""
TREE_LL_DIVISOR = 3.8
"""NCCL's tree LL bandwidth: the tree's bus bandwidth / 3.8."""
LL128_SHARE = 120.0 / 128.0
LL_SHARE = 0.5


def _arch(graph: Graph) -> int:
    return max((a for a in ARCHS if a <= graph.arch), default=ARCHS[0])


def _by_nodes(table: tuple[float, float, float], nodes: int) -> float:
    return table[min(nodes, 3) - 1]


def _ll_max(graph: Graph) -> float:
    if graph.nodes == 1:
        return LL_MAX_ONE_NODE_GBps[_arch(graph)]
    return LL_MAX_NODES_GBps[0 if graph.nodes == 2 else 1]


def link_share(protocol: str, family: str, graph: Graph) -> float:
    """The share of link bandwidth a collective of ``family`` (``ring``, ``tree``) reaches
    with ``protocol`` on the channels ``graph`` (see the module docstring)."""
    arch, speed = _arch(graph), graph.speed_GBps
    bus = graph.searched * speed
    if family == "tree":
        tree = min(TREE_KERNEL_SHARE, _by_nodes(TREE_PER_CHANNEL_GBps[arch], graph.nodes) / speed)
        if protocol == "LL":
            return min(tree / TREE_LL_DIVISOR, _ll_max(graph) / bus)
        if protocol == "LL128":
            kernel = 7.0 / 9.0 if graph.nodes == 1 else LL128_SHARE
            cap = _by_nodes(TREE_LL128_PER_CHANNEL_GBps[arch], graph.nodes) / speed
            return min(tree * kernel, cap)
        return tree
    if protocol == "LL":
        return min(LL_SHARE, _ll_max(graph) / bus)
    if protocol == "LL128":
        return min(LL128_SHARE, RING_LL128_PER_CHANNEL_GBps[arch] / speed)
    return 1.0
