"""NCCL's latency model of a ring: what a ring collective pays besides its bytes.

NCCL's tuner prices the latency of a ring all-reduce, reduce-scatter or all-gather of
``nRanks`` ranks on ``nNodes`` nodes with a protocol as (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoTuneModel``; read at tag v2.29.7-1, commit b91894bd, the same since v2.23.4-1)::

    baseLat + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat

* ``nsteps``: 2 (nRanks - 1) steps for an all-reduce, nRanks - 1 for a reduce-scatter or
  an all-gather;
* ``nInterSteps``, the steps that cross the network: none on one node, else 2 (nNodes - 1)
  for an all-reduce and nNodes - 1 for the others;
* ``intraLat``: the protocol's per-hop latency over NVLink where the node's GPUs reach each
  other over NVLink (NCCL's ``typeIntra == LINK_NVL``), else over PCIe (``hwLatencies``,
  :data:`~clustersim.collectives.protocol.PROTOCOLS`); on several nodes at least NCCL's net
  overhead, :data:`NET_OVERHEAD_US` per step, three times that with Simple;
* ``interLat``: the protocol's per-hop network latency of the ring, the tree's where every
  node holds one rank ("with ppn=1 latencies are fully exposed, use the Tree network
  latency"), plus the network plugin's latency (``graph->latencyInter``), twice with Simple
  ("the flush extra latency"): InfiniBand's and the sockets' plugins report 0
  (``src/transport/net_ib/init.cc``, ``net_socket.cc``: ``props->latency = 0``),
  aws-ofi-nccl 35-75 us by instance type; clustersim takes it from
  ``cluster.node.nic.plugin_latency`` (default 0).

``baseLat`` is the protocol's base latency, which clustersim already pays once before the
first send (:meth:`~clustersim.collectives.protocol.Protocol.base_latency`);
:func:`ring_steps_latency_s` is the rest.  NCCL's per-hop figures are the time of a step as
NCCL measured it, the link's own latency included, so a ring priced this way does not add
the catalog's link latencies on top of them.

Where clustersim's cluster has no nodes (a flat switch, a ring of links, a custom fabric),
each device counts as its own node when the ring's hops are network hops
(:func:`~clustersim.collectives.protocol.link_kind`), else all of them as one node whose
GPUs talk over the hops' kind.

Left out: the operations NCCL does not run on this formula (broadcast and reduce, which
it prices per step at the network figure; all-to-all, gather, scatter and barrier, which it
does not run on rings): their sends keep the protocol's per-hop latency on top of their
routes' own (:class:`~clustersim.collectives.protocol.ProtocolView`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..caches import registered
from .call import CollectiveCall, node_groups
from .protocol import PROTOCOLS, link_kind, plugin_times

if TYPE_CHECKING:
    from ..topology import Topology

US = 1e-6

NET_OVERHEAD_US = 1.0
"""NCCL's network post overhead per ring step on several nodes, microseconds (tuning.cc
``getNetOverhead``: 1 us on Intel x86 and every CPU but AMD x86, 2 us there; a cluster
description names no CPU vendor, so the Intel figure, as :mod:`.tuner` takes its llMaxBw)."""
NET_OVERHEAD_TIMES = {"LL": 1.0, "LL128": 1.0, "Simple": 3.0}
"""How many times each protocol counts the net overhead (tuning.cc: ``netOverhead *= 3``
with Simple)."""


@dataclass(frozen=True)
class RingSteps:
    """How NCCL counts the steps of one ring operation (tuning.cc ``nsteps``,
    ``nInterSteps``), as multiples of (ranks - 1) and (nodes - 1)."""

    per_rank: int
    """Steps per rank beyond the first: ``nsteps = per_rank x (nRanks - 1)``."""
    per_node: int
    """Network steps per node beyond the first: ``nInterSteps = per_node x (nNodes - 1)``."""


STEPS: dict[str, RingSteps] = {
    "allreduce": RingSteps(2, 2),
    "reducescatter": RingSteps(1, 1),
    "allgather": RingSteps(1, 1),
}
"""The ring operations NCCL's formula prices, by operation."""


@dataclass(frozen=True)
class RingShape:
    """What NCCL's ring latency depends on besides the operation and the protocol."""

    ranks: int
    """Ranks of the ring (NCCL's ``nRanks``)."""
    nodes: int
    """Nodes they sit on (``nNodes``); on a flat network every rank is a node."""
    intra_kind: str
    """``NVLink`` or ``PCI``: how the GPUs of a node reach each other."""
    plugin_s: float = 0.0
    """Seconds the network plugin reports as its latency (NCCL's ``latencyInter``)."""


_CACHE_LIMIT = 1024
_shapes: dict[tuple[int, Hashable], tuple[object, RingShape]] = registered({})


def ring_shape(call: CollectiveCall, topology: Topology) -> RingShape:
    """The ranks, nodes and intra-node link kind of ``call``'s ring on ``topology`` (see the
    module docstring for clusters without nodes); remembered per topology and group, or
    orbit of groups that sit alike (:mod:`clustersim.topology.symmetry`)."""
    orbit = topology.orbit_key(call.devices) if hasattr(topology, "orbit_key") else None
    key = (id(topology), call.devices if orbit is None else orbit)
    found = _shapes.get(key)
    if found is not None and found[0] is topology:
        return found[1]
    if len(_shapes) >= _CACHE_LIMIT:
        _shapes.clear()
    shape = _shape(call, topology)
    _shapes[key] = (topology, shape)
    return shape


def _shape(call: CollectiveCall, topology: Topology) -> RingShape:
    """:func:`ring_shape`, worked out from the kinds of the ring's hops."""
    devices = call.devices
    n = len(devices)
    hops = [(devices[i], devices[(i + 1) % n]) for i in range(n)]
    plugin_s = float(getattr(topology, "nic_plugin_latency_s", 0.0))
    groups = node_groups(call, topology)
    if groups is None:
        kinds = {link_kind(topology.first_route(a, b)) for a, b in hops}
        if "NET" in kinds:
            return RingShape(n, n, "NVLink", plugin_s)
        return RingShape(n, 1, "PCI" if "PCI" in kinds else "NVLink")
    node_of = {devices[r]: k for k, ranks in enumerate(groups) for r in ranks}
    kinds = {link_kind(topology.first_route(a, b)) for a, b in hops if node_of[a] == node_of[b]}
    return RingShape(n, len(groups), "PCI" if "PCI" in kinds else "NVLink", plugin_s)


def ring_steps_latency_s(op: str, protocol: str, shape: RingShape) -> float | None:
    """Seconds of NCCL's ring latency beyond the base latency for ``op`` with ``protocol``
    on a ring of ``shape`` (see the module docstring); None for an operation the formula
    does not price."""
    steps = STEPS.get(op)
    if steps is None or shape.ranks < 2:
        return None if steps is None else 0.0
    hop = PROTOCOLS[protocol].hop_latency_s
    nsteps = steps.per_rank * (shape.ranks - 1)
    inter = 0 if shape.nodes == 1 else steps.per_node * (shape.nodes - 1)
    intra_s = hop["ring", shape.intra_kind]
    if shape.nodes > 1:
        intra_s = max(intra_s, NET_OVERHEAD_US * US * NET_OVERHEAD_TIMES[protocol])
    one_per_node = shape.nodes == shape.ranks
    inter_s = hop["tree" if one_per_node else "ring", "NET"]
    inter_s += shape.plugin_s * plugin_times(protocol)
    return (nsteps - inter) * intra_s + inter * inter_s
