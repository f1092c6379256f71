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
ties go to the earlier candidate, then the earlier protocol.

NCCL decides once per collective, for all of its channels (``topoGetAlgoInfo`` runs
once per collective call and the algorithm and protocol it returns are those of every
channel).  So does clustersim: a collective split over channels
(:func:`clustersim.collectives.slices`) is priced per candidate on each of its slices
beside the others, its time the slowest slice's, and every slice runs the one fastest
candidate (:func:`choose_once`), never a mixture.  The candidates are NCCL's:

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

from ..caches import registered
from ..topology import Topology
from .algorithm import Algorithm, registered_algorithms
from .call import CollectiveCall
from .channels import shared_divisors, slice_flows
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
_choices: dict[tuple[Any, ...], dict[tuple[str, str | None], float]] = registered({})
"""Prices of the candidates of a call beside its siblings (:func:`candidate_prices`)."""


def candidates(op: str) -> tuple[str, ...]:
    """The algorithms ``auto`` considers for ``op``."""
    return CANDIDATES.get(op, OTHER_CANDIDATES)


def choose(
    call: CollectiveCall, topology: Topology, siblings: Sequence[CollectiveCall] = ()
) -> tuple[str, str | None]:
    """(algorithm, protocol) for ``call``: its own where named, the fastest where ``auto``.

    ``siblings`` are the slices of the collective that run at once with ``call`` (itself
    among them; its channels): each candidate is priced on the links as its slices share
    them (:func:`~clustersim.collectives.channels.shared_divisors`).  The choice is ``call``'s alone; a collective's slices
    are given one choice by :func:`choose_once`."""
    return _fastest([candidate_prices(call, topology, siblings)], call.op)


def choose_once(parts: Sequence[CollectiveCall], topology: Topology) -> tuple[str, str | None]:
    """(algorithm, protocol) of the collective that runs as ``parts`` at once (its channels'
    slices): one for all of them, as NCCL's tuner picks one algorithm and protocol per
    collective for all its channels (NVIDIA/nccl ``src/enqueue.cc``, ``topoGetAlgoInfo``).
    Each candidate is priced on every part beside the others; its time is its slowest
    part's, and the fastest candidate wins (ties to the earlier, as in :func:`choose`)."""
    if len(parts) == 1:
        return choose(parts[0], topology, parts)
    return _fastest([candidate_prices(part, topology, parts) for part in parts], parts[0].op)


def _fastest(
    prices: Sequence[dict[tuple[str, str | None], float]], op: str
) -> tuple[str, str | None]:
    """The (algorithm, protocol) whose slowest price over ``prices`` (one per part) is the
    least; ties to the earlier in the first part's order.  Only the choices every part
    can run count."""
    best: tuple[float, tuple[str, str | None]] | None = None
    for choice in prices[0]:
        if any(choice not in part for part in prices[1:]):
            continue
        cost = max(part[choice] for part in prices)
        if best is None or cost < best[0]:
            best = (cost, choice)
    if best is None:
        raise ValueError(f"no algorithm can run {op} here")  # unsupported() said so first
    return best[1]


def candidate_prices(
    call: CollectiveCall, topology: Topology, siblings: Sequence[CollectiveCall]
) -> dict[tuple[str, str | None], float]:
    """(algorithm, protocol) -> seconds of ``call`` beside ``siblings``, for every candidate
    that can run it (its own algorithm and protocol where named), in order of preference."""
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
    prices: dict[tuple[str, str | None], float] = {}
    for name in names:
        cls = algorithms.get(name)
        if cls is None:
            continue
        algo = cls()
        protocols: tuple[str | None, ...] = (call.protocol,)
        if call.protocol == "auto":
            protocols = algo.nccl_protocols or tuple(PROTOCOLS)
        plain = replace(call, algorithm=name, protocol=None)
        if call.algorithm == "auto" and not algo.nccl_candidate(plain, topology):
            continue  # asked first: it can say no without the work unsupported() does
        if algo.unsupported(plain, topology) is not None:
            continue
        counts = _counts(algo, call, siblings, topology)
        for protocol in protocols:
            cost = priced_cost(algo, replace(plain, protocol=protocol), topology, counts)
            prices[name, protocol] = cost
    if len(_choices) >= _CACHE_LIMIT:
        _choices.clear()
    _choices[key] = prices
    return prices


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


_slice_flows: dict[tuple[Any, ...], dict[int, float]] = registered({})
_divisors: dict[tuple[Any, ...], dict[int, float] | None] = registered({})


def _counts(
    algo: Algorithm, call: CollectiveCall, siblings: Sequence[CollectiveCall], topology: Topology
) -> dict[int, float] | None:
    """Link index -> how many times the flows ``algo`` puts on it for all of ``siblings``
    outnumber those of ``call`` alone (:func:`shared_divisors`; None for fewer than two
    slices, or an algorithm without its own :meth:`Algorithm.link_flows`, whose slices are
    priced alone)."""
    if len(siblings) < 2 or type(algo).link_flows is Algorithm.link_flows:
        return None
    group = (algo.name, topology, tuple(s.devices for s in siblings), siblings[0].root)
    key = (*group, call.devices)
    found = _divisors.get(key, False)
    if found is False:
        total = _slice_flows.get(group)
        if total is None:
            plain = [replace(s, algorithm=algo.name, protocol=None) for s in siblings]
            total = slice_flows(algo, plain, topology)
            if len(_slice_flows) >= _CACHE_LIMIT:
                _slice_flows.clear()
            _slice_flows[group] = total
        own = replace(call, algorithm=algo.name, protocol=None)
        counted = call.devices in (s.devices for s in siblings)
        found = shared_divisors(algo, own, total, topology, counted) or None
        if len(_divisors) >= _CACHE_LIMIT:
            _divisors.clear()
        _divisors[key] = found
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


def resolve_once(parts: Sequence[CollectiveCall], topology: Topology) -> list[CollectiveCall]:
    """``parts`` (the slices of one collective, run at once) with ``auto`` algorithm and
    protocol replaced by one choice for all of them (:func:`choose_once`)."""
    first = parts[0]
    if first.algorithm != "auto" and first.protocol != "auto":
        return list(parts)
    name, protocol = choose_once(parts, topology)
    return [replace(part, algorithm=name, protocol=protocol) for part in parts]


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
