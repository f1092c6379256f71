"""``algorithm: auto`` and ``protocol: auto``: choose as NCCL's tuner does.

NCCL predicts, for every algorithm and protocol it may use, ``time = latency +
size / bandwidth`` from its model of the topology and picks the smallest
(NVIDIA/nccl ``src/enqueue.cc``, ``topoGetAlgoInfo``; ``src/graph/tuning.cc``).
It has no fixed size thresholds: where the tree stops winning follows from
the two models.  clustersim does the same with its own cost model: for each
candidate algorithm that can run the call (and, with ``protocol: auto``, each
of LL, LL128 and Simple) it prices the call by the algorithm's alpha-beta cost
(:meth:`Algorithm.cost`, with the protocol's latencies and efficiency,
:func:`protocol.priced_cost`) on the call's own topology, and runs the fastest;
ties go to the earlier candidate, then the earlier protocol.  The candidates
are NCCL's:

* all-reduce: ``ring`` and ``double_tree`` (NCCL's Ring and Tree), and
  ``in_network`` where the group meets in an NVSwitch that reduces (NVLink
  SHARP, NCCL's NVLS: ``cluster.node.nvlink.sharp``), priced at the switch's
  reduction throughput (:meth:`Algorithm.nccl_candidate`).  Switches that do
  not say they reduce (a ToR, SHARP on InfiniBand, which NCCL reaches only
  through its CollNet plugin) are not weighed: ``in_network`` runs there when
  named;
* barrier: ``double_tree``, ``ring``;
* all-to-all, gather and scatter: ``direct`` (NCCL builds them from
  point-to-point sends posted at once);
* broadcast, reduce, all-gather, reduce-scatter: ``ring`` (NCCL runs them on
  rings).

The crossover this gives is measured, for shipped clusters, in
docs/collectives.md ("Choosing an algorithm").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..topology import Topology
from .algorithm import Algorithm, registered_algorithms
from .call import CollectiveCall
from .channels import slice_counts
from .ops import OPERATIONS
from .protocol import PROTOCOLS, priced_cost

CANDIDATES: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "double_tree", "in_network"),
    "barrier": ("double_tree", "ring"),
    "alltoall": ("direct",),
    "gather": ("direct",),
    "scatter": ("direct",),
}
"""Algorithms ``auto`` chooses among, per operation, in order of preference on a tie."""
OTHER_CANDIDATES = ("ring",)
"""Candidates of the operations :data:`CANDIDATES` does not name."""

_CACHE_LIMIT = 4096
_choices: dict[tuple[Any, ...], tuple[str, str | None]] = {}


def candidates(op: str) -> tuple[str, ...]:
    """The algorithms ``auto`` considers for ``op``."""
    return CANDIDATES.get(op, OTHER_CANDIDATES)


def choose(
    call: CollectiveCall, topology: Topology, siblings: Sequence[CollectiveCall] = ()
) -> tuple[str, str | None]:
    """(algorithm, protocol) for ``call``: its own where named, the fastest where ``auto``.

    ``siblings`` are the slices of the collective that run at once with ``call`` (itself
    among them; its channels): each candidate is priced on the links as its slices share
    them (:func:`slice_counts`), so that the choice is the whole collective's."""
    orbit = _orbit(call, topology, siblings)
    key = (
        len(siblings),
        topology,
        call.op,
        call.devices if orbit is None else orbit,
        call.size_bytes,
        call.algorithm,
        call.protocol,
        call.root,
        call.chunk_bytes,
        call.bidirectional,
        call.reduce_cost,
    )
    found = _choices.get(key)
    if found is not None:
        return found
    if orbit is not None:  # price the orbit's first group, for every group alike
        call, siblings = _canonical(call, topology, siblings, orbit)
    algorithms = registered_algorithms()
    names = candidates(call.op) if call.algorithm == "auto" else (call.algorithm,)
    best: tuple[float, str, str | None] | None = None
    for name in names:
        cls = algorithms.get(name)
        if cls is None:
            continue
        algo = cls()
        protocols: tuple[str | None, ...] = (call.protocol,)
        if call.protocol == "auto":
            protocols = algo.nccl_protocols or tuple(PROTOCOLS)
        plain = replace(call, algorithm=name, protocol=None)
        if algo.unsupported(plain, topology) is not None:
            continue
        if call.algorithm == "auto" and not algo.nccl_candidate(plain, topology):
            continue
        counts = _counts(algo, siblings, topology)
        for protocol in protocols:
            cost = priced_cost(algo, replace(plain, protocol=protocol), topology, counts)
            if best is None or cost < best[0]:
                best = (cost, name, protocol)
    if best is None:
        raise ValueError(f"no algorithm can run {call.op} here")  # unsupported() said so first
    if len(_choices) >= _CACHE_LIMIT:
        _choices.clear()
    _choices[key] = (best[1], best[2])
    return best[1], best[2]


def _orbit(
    call: CollectiveCall, topology: Topology, siblings: Sequence[CollectiveCall]
) -> tuple[int, Any] | None:
    """(``call``'s place among its siblings, the orbit of the siblings) in ``topology``:
    one key for every set of groups that sits alike (:mod:`clustersim.topology.symmetry`);
    None where the cluster has none.  Siblings without ``call`` among them count it first."""
    if not isinstance(topology, Topology):
        return None
    groups = tuple(s.devices for s in siblings)
    if call.devices not in groups:
        groups = (call.devices, *groups)
    found = topology.orbit_key([name for group in groups for name in group])  # remembered there
    return None if found is None else (groups.index(call.devices), found)


def _canonical(
    call: CollectiveCall,
    topology: Topology,
    siblings: Sequence[CollectiveCall],
    orbit: tuple[int, Any],
) -> tuple[CollectiveCall, list[CollectiveCall]]:
    """``call`` and ``siblings`` moved onto the first groups of their orbit (same ranks,
    same roots), where NCCL's tuner model prices them: alike groups differ only in the
    ECMP hash of their device names, which the tuner does not know either."""
    index, key = orbit
    names = topology.canonical(key)
    members = list(siblings) if call.devices in (s.devices for s in siblings) else [call, *siblings]
    moved, at = [], 0
    for member in members:
        moved.append(replace(member, devices=tuple(names[at : at + member.n])))
        at += member.n
    return replace(call, devices=moved[index].devices), moved[len(members) - len(siblings) :]


_slice_counts: dict[tuple[Any, ...], dict[int, int] | None] = {}


def _counts(
    algo: Algorithm, siblings: Sequence[CollectiveCall], topology: Topology
) -> dict[int, int] | None:
    """Link index -> slices of ``siblings`` that ``algo`` would put on it (None for fewer
    than two slices, or an algorithm without its own :meth:`Algorithm.link_flows`, whose
    slices are priced alone)."""
    if len(siblings) < 2 or type(algo).link_flows is Algorithm.link_flows:
        return None
    key = (algo.name, topology, tuple(s.devices for s in siblings), siblings[0].root)
    found = _slice_counts.get(key, False)
    if found is False:
        plain = [replace(s, algorithm=algo.name, protocol=None) for s in siblings]
        counts = slice_counts(algo, plain, topology)
        found = counts if any(k > 1 for k in counts.values()) else None
        if len(_slice_counts) >= _CACHE_LIMIT:
            _slice_counts.clear()
        _slice_counts[key] = found
    return found  # type: ignore[return-value]


def resolve(
    call: CollectiveCall, topology: Topology, siblings: Sequence[CollectiveCall] = ()
) -> CollectiveCall:
    """``call`` with ``auto`` algorithm and protocol replaced by the choice (``siblings``:
    the slices that run with it, see :func:`choose`)."""
    if call.algorithm != "auto" and call.protocol != "auto":
        return call
    name, protocol = choose(call, topology, siblings)
    return replace(call, algorithm=name, protocol=protocol)


class Auto(Algorithm):
    """The fastest of NCCL's candidates by the cost model (see the module docstring)."""

    name = "auto"
    description = "as NCCL's tuner: the fastest candidate by the cost model, per size and group"
    ops = frozenset(OPERATIONS)

    def unsupported(self, call: CollectiveCall, topology: Topology) -> str | None:
        """None if a candidate can run ``call``, else why not."""
        if call.op not in self.ops:
            return f"auto does not implement {call.op}"
        algorithms = registered_algorithms()
        for name in candidates(call.op):
            cls = algorithms.get(name)
            plain = replace(call, algorithm=name, protocol=None)
            if cls is None or cls().unsupported(plain, topology) is not None:
                continue
            if cls().nccl_candidate(plain, topology):
                return None
        return f"none of auto's candidates ({', '.join(candidates(call.op))}) can run it here"

    def _chosen(self, call: CollectiveCall, topology: Topology) -> tuple[Algorithm, Any]:
        chosen = resolve(call, topology)
        return registered_algorithms()[chosen.algorithm](), chosen

    def schedule(self, call: CollectiveCall, topology: Topology) -> Any:
        """The chosen algorithm's schedule."""
        algo, chosen = self._chosen(call, topology)
        return algo.schedule(chosen, topology)

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The chosen algorithm's sends."""
        algo, chosen = self._chosen(call, topology)
        return algo.sends(chosen, topology)

    def priced_sends(self, call: CollectiveCall, topology: Topology) -> float:
        """What pricing the chosen algorithm builds."""
        algo, chosen = self._chosen(call, topology)
        return algo.priced_sends(chosen, topology)

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """The chosen algorithm's cost (with the chosen protocol)."""
        algo, chosen = self._chosen(call, topology)
        return priced_cost(algo, chosen, topology)
