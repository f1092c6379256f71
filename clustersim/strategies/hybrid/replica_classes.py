"""Which data-parallel replicas run alike: the classes ``simulate_replicas: one`` plays.

``parallelism.simulate_replicas: one`` plays one replica of each *class* of replicas that
run alike, instead of every replica: two replicas are alike when they run the same number
of micro-batches and, place by place (stage, tensor rank, context rank), their devices
compute alike (:func:`~clustersim.parallel.batch_shares.speed_key`: kind, type, peak,
efficiency, memory bandwidth, compute model) and have the same straggler slowdown in
every iteration (fixed or drawn: :meth:`~clustersim.devices.Stragglers.factor`), and none
of their own flows can cross a degraded link (below).  A cluster of identical replicas is
one class (replica 0 stands for all, as before); one slow node makes its replica a class
of its own; a pod of H100 nodes among A100 pods makes the replicas on it another class.

Why one replica of a class stands for the others: the replicas meet only in the
data-parallel collectives, which start when the last simulated replica reaches them and
run in the congestion-aware analytical model over every replica's devices and links
(:mod:`clustersim.collectives.fluid`); until then a replica's operations depend only on its
own devices, its own micro-batches and the collectives.  Alike replicas therefore reach
each collective at the same instant, and the slowest class sets when it starts, as it
does with every replica played.  What one replica per class leaves out is what it left
out with one class: the pipeline and tensor-parallel flows of the replicas not played do
not load the fabric (their links are mostly their own nodes' and racks').  Where no link can
carry own flows of two replicas (:func:`shared_own_link` finds none), every replica's own
flows are laid out as its played replica's (:func:`unlike_twin`) and the data-parallel
collectives are rings, that leaves out nothing, and one replica per class is exactly every
replica with the same collectives (:func:`inexact_reason`); the summary says which
(``replicas_exact``).

A degraded link (a ``stragglers`` entry with ``links``) slows the data-parallel collectives
that cross it for every replica alike (they run over every replica's links), and the own
flows of the replicas whose pipeline sends or tensor- and context-parallel collectives can
cross it (on any of their equal-cost routes): each such replica is a class of its own.
Expert parallelism with more than one class is refused (its all-to-alls span replicas, and
the replicas not played would not join them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...devices import stragglers_of
from ...errors import Problem, ScenarioError
from ...parallel.batch_shares import rank_label, speed_key
from ...scenario.node_groups import is_mixed

__all__ = [
    "SharedOwnLink",
    "FOLD_ALL_AT",
    "class_problem",
    "fold_classes",
    "inexact_reason",
    "link_stand_ins",
    "own_pairs",
    "raise_if_unclassable",
    "replica_classes",
    "shared_own_link",
    "stands_for",
    "unlike_twin",
]


def replica_classes(strategy: Any) -> list[list[int]]:
    """The replicas of ``strategy`` (a hybrid pipeline) that run alike, one list per class;
    classes ordered by their first replica, replicas in order (the first class holds
    replica 0)."""
    scenario = strategy.scenario
    stragglers = stragglers_of(scenario, strategy.topology) if scenario.stragglers else None
    iterations = range(strategy.train.iterations)
    reprs: dict[int, str] = {}
    classes: dict[tuple[Any, ...], list[int]] = {}
    for d in range(strategy.dp):
        devices = strategy._replica_devices(d)
        key: tuple[Any, ...] = (
            strategy.replica_micro_batches[d],
            tuple(speed_key(device, reprs) for device in devices),
        )
        if stragglers is not None:
            key += (tuple(stragglers.factor(x, it) for x in devices for it in iterations),)
            if stragglers.links and _crosses(strategy, d, {x.link_index for x in stragglers.links}):
                key += (d,)  # its own flows meet a degraded link: a class of its own
        classes.setdefault(key, []).append(d)
    return list(classes.values())


def own_pairs(strategy: Any, d: int) -> list[tuple[str, str]]:
    """The (source, destination) devices of replica ``d``'s own flows: every ordered pair of
    two devices of one of its stages (tensor and context parallelism) and of the same
    places of neighbouring stages, both ways (pipeline sends, the last stage's to the
    first's included)."""
    groups = strategy.groups[d]
    pairs = [(a, b) for group in groups for a in group for b in group if a != b]
    for s, group in enumerate(groups):
        after = groups[(s + 1) % len(groups)]
        pairs += [(a, b) for a, b in zip(group, after, strict=True) if a != b]
        pairs += [(b, a) for a, b in zip(group, after, strict=True) if a != b]
    return pairs


def _crosses(strategy: Any, d: int, links: set[int]) -> bool:
    """Whether a flow of replica ``d``'s own (:func:`own_pairs`) can cross one of ``links``
    (indices) on any of its equal-cost routes."""
    topology = strategy.topology
    return any(
        link.index in links
        for a, b in own_pairs(strategy, d)
        for route in topology.routes(a, b)
        for link in route.links
    )


@dataclass(frozen=True)
class SharedOwnLink:
    """A link that own flows of two replicas can both cross (:func:`shared_own_link`)."""

    link: str
    """The link's name (``rack0/tor->spine1``)."""
    first: int
    """The lower of the two replicas."""
    second: int
    """The other replica."""

    def text(self) -> str:
        """The link and the replicas, as a run line and the summary say it."""
        return f"{self.link} (replicas {self.first} and {self.second})"


ONE_SWITCH_RACKS = frozenset({"two_tier", "three_tier"})
"""Cluster kinds whose two nodes of a rack reach each other through the rack's switch, on
links of their own: their NICs' ports (a rail-optimized cluster's rails do not)."""


def shared_own_link(strategy: Any) -> SharedOwnLink | None:
    """The first link (in replica order) that own flows (:func:`own_pairs`) of two
    data-parallel replicas can both cross on one of their equal-cost routes; None when the
    replicas' own flows are on links of their own.

    Then, and with replicas of one class alike, one replica per class is exactly every
    replica with the same collectives: what the replicas not played leave out -- their own
    pipeline and tensor-parallel flows -- loads only links no played flow crosses, beside
    the data-parallel collectives that load every replica's links alike.

    A pair inside one node, or between two nodes of one rack of a two- or three-tier
    cluster, is routed on links no pair outside those nodes takes (tests/test_replicas_exact.py
    holds it for every node of the catalog), so it is followed only where one of its nodes
    holds devices of two replicas; pairs across racks are followed everywhere."""
    topology = strategy.topology
    devices = topology.devices
    holders: dict[str, set[int]] = {}
    replicas = range(strategy.dp)
    for d in replicas:
        for group in strategy.groups[d]:
            for device in group:
                holders.setdefault(devices[device].node or device, set()).add(d)
    one_switch_racks = topology.kind in ONE_SWITCH_RACKS
    owner: dict[int, int] = {}
    for d in replicas:
        places = strategy._replica_devices(d)
        nodes = {x.node for x in places}
        if None not in nodes and all(len(holders[n]) == 1 for n in nodes):  # type: ignore[index]
            if len(nodes) == 1 or (one_switch_racks and len({x.rack for x in places}) == 1):
                continue  # every pair skipped below
        for a, b in own_pairs(strategy, d):
            da, db = devices[a], devices[b]
            if (
                da.node is not None
                and db.node is not None
                and len(holders[da.node]) == 1
                and len(holders[db.node]) == 1
                and (da.node == db.node or (one_switch_racks and da.rack == db.rack))
            ):
                continue  # inside a node, or a rack's switch, between nodes of its own
            for route in topology.routes(a, b):
                for link in route.links:
                    first = owner.setdefault(link.index, d)
                    if first != d:
                        return SharedOwnLink(link.name, first, d)
    return None


RING_LIKE_OPS = frozenset({"reducescatter", "allgather"})
"""Operations ``auto`` runs as rings only (:data:`clustersim.collectives.auto.CANDIDATES`)."""


def inexact_reason(strategy: Any, classes: Sequence[Sequence[int]] | None = None) -> str | None:
    """Why one replica per class (``simulate_replicas: one``) is not exactly every replica
    with the same collectives; None when it is.

    It is when (1) no link can carry own flows of two replicas (:func:`shared_own_link`),
    (2) every replica's own flows are laid out as its class's played replica's
    (:func:`unlike_twin`), and (3) the data-parallel collectives load every replica's links
    alike: rings (``ring``, or ``auto`` for the reduce-scatters and all-gathers of the
    distributed optimizer, which it runs as rings), without expert parallelism.  Then the
    flows the replicas not played leave out meet no played flow, and the played replica's
    flows meet what each of its twins' would: the same links, the same collectives' load.
    ``classes``: the classes of alike replicas (default: the strategy's)."""
    shared = shared_own_link(strategy)
    if shared is not None:
        return f"own flows of two replicas can share {shared.text()}"
    if classes is None:
        classes = strategy.replica_classes or [list(range(strategy.dp))]
    twin = unlike_twin(strategy, classes)
    if twin is not None:
        return f"replica {twin[1]}'s own flows are not laid out as replica {twin[0]}'s"
    algorithm = strategy.sync.algorithm
    experts = getattr(strategy, "experts", None)
    if experts is not None and experts.ep > 1:
        return f"expert parallelism (ep {experts.ep}) loads the replicas' links unevenly"
    if algorithm != "ring" and not (algorithm == "auto" and strategy.dp_op in RING_LIKE_OPS):
        return (
            f"the data-parallel {strategy.dp_op} ({algorithm}) may load the replicas' links "
            "unevenly (a tree's ranks differ); rings do not"
        )
    return None


FOLD_ALL_AT = 4096
"""GPUs from which ``simulate_replicas: all`` with the analytical network plays one replica
per class where that is exactly every replica (:func:`fold_classes`): the size from which a
run folder is written folded by default (:data:`clustersim.outputs.modes.FOLD_AT`), so its
timeline holds one replica's records either way."""


def fold_classes(strategy: Any) -> list[list[int]] | None:
    """``simulate_replicas: all``: the classes of alike replicas when one of each can be
    played for every replica with the very same result -- the analytical network (the
    collectives priced alike either way), :data:`FOLD_ALL_AT` GPUs or more, no scheduled
    failures, and :func:`inexact_reason` finding nothing; else None (every replica played)."""
    scenario = strategy.scenario
    if (
        strategy.parallelism.simulate_replicas != "all"
        or strategy.dp < 2
        or scenario.network.model != "analytical"
        or len(strategy.placement.workers) < FOLD_ALL_AT
        or getattr(scenario, "failures", None)
    ):
        return None
    classes = replica_classes(strategy)
    if class_problem(strategy, classes) is not None or inexact_reason(strategy, classes):
        return None
    return classes


def link_stand_ins(strategy: Any, classes: Sequence[Sequence[int]]) -> dict[int, int]:
    """Each link that own flows of a replica not played can cross -> the link in its place
    on the played replica of its class (their routes zipped pair by pair: laid out alike,
    :func:`unlike_twin`)."""
    topology = strategy.topology
    out: dict[int, int] = {}
    for members in classes:
        played = own_pairs(strategy, members[0])
        for d in members[1:]:
            for (a, b), (pa, pb) in zip(own_pairs(strategy, d), played, strict=True):
                for route, standing in zip(
                    topology.routes(a, b), topology.routes(pa, pb), strict=True
                ):
                    for link, stand in zip(route.links, standing.links, strict=True):
                        out[link.index] = stand.index
    return out


def unlike_twin(strategy: Any, classes: Sequence[Sequence[int]]) -> tuple[int, int] | None:
    """The first (played, other) replicas of one class whose own flows are not laid out
    alike; None when every replica's are laid out as its class's played replica's.

    Alike: pair by pair (:func:`own_pairs`, the same places in both), routes of the same
    count and hops (bandwidth and latency, hop by hop), sharing links in the same pattern
    (links numbered in order of first use); inside a node, its links named within the node
    (nodes of one kind, or in a mixed cluster the same links inside them).  Replicas whose
    devices a relabelling of the cluster's pods, racks and nodes maps one onto the other
    (:meth:`~clustersim.topology.Topology.orbit_key`) are alike without comparing.  A
    replica whose stages straddle two racks while the one standing for it stays in one is
    not alike."""
    topology = strategy.topology
    inside = _links_inside_nodes(topology) if is_mixed(strategy.scenario.cluster) else None
    memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for members in classes:
        key = topology.orbit_key(_names(strategy, members[0]))
        reference: list[tuple[Any, ...]] | None = None
        for d in members[1:]:
            if key is not None and topology.orbit_key(_names(strategy, d)) == key:
                continue  # a relabelling of the cluster maps one onto the other
            if reference is None:
                reference = _laid_out(strategy, members[0], inside, memo)
            if _laid_out(strategy, d, inside, memo) != reference:
                return members[0], d
    return None


def _names(strategy: Any, d: int) -> list[str]:
    """The names of replica ``d``'s devices, stage by stage (``_replica_devices``)."""
    return [device.name for device in strategy._replica_devices(d)]


def _laid_out(
    strategy: Any,
    d: int,
    inside: dict[str, tuple[Any, ...]] | None,
    memo: dict[tuple[Any, ...], tuple[Any, ...]],
) -> list[tuple[Any, ...]]:
    """Replica ``d``'s own flows named by what they cross rather than where (see
    :func:`unlike_twin`): per pair, its routes as hops (link number, bandwidth, latency).
    A link inside a node is named (node, its ends within the node), so that a pair inside a
    node is routed once per kind of node and place (``memo``)."""
    topology = strategy.topology
    devices = topology.devices
    number: dict[Any, int] = {}
    out: list[tuple[Any, ...]] = []
    for a, b in own_pairs(strategy, d):
        node = devices[a].node
        if node is not None and node == devices[b].node:
            cut = len(node) + 1
            key = (None if inside is None else inside.get(node), a[cut:], b[cut:])
            local = memo.get(key)
            if local is None:
                local = memo[key] = tuple(
                    tuple(
                        (link.src[cut:], link.dst[cut:], link.bandwidth_Bps, link.latency_s)
                        for link in route.links
                    )
                    for route in topology.routes(a, b)
                )
            routes = [[((node, src, dst), bw, lat) for src, dst, bw, lat in r] for r in local]
        else:
            routes = [
                [(_link_name(link), link.bandwidth_Bps, link.latency_s) for link in route.links]
                for route in topology.routes(a, b)
            ]
        out.append(
            tuple(
                tuple((number.setdefault(name, len(number)), bw, lat) for name, bw, lat in route)
                for route in routes
            )
        )
    return out


def _links_inside_nodes(topology: Any) -> dict[str, tuple[Any, ...]]:
    """Per node, its links between two of its own devices, switches and NICs, named within
    the node: a mixed cluster's nodes of two kinds can hold one GPU type."""
    nodes = {device.node for device in topology.devices.values() if device.node}
    out: dict[str, list[tuple[Any, ...]]] = {}
    for link in topology.links:
        name = _link_name(link)
        if isinstance(name, tuple) and name[0] in nodes:
            out.setdefault(name[0], []).append((*name[1:], link.bandwidth_Bps, link.latency_s))
    return {node: tuple(sorted(links)) for node, links in out.items()}


def _link_name(link: Any) -> Any:
    """A link as :func:`_laid_out` names it: (node, ends within it) when both its ends are
    in one node (a device, switch or NIC named ``NODE/...``), else its index."""
    node = link.src.rsplit("/", 1)[0]
    if "/" in link.src and link.dst.rsplit("/", 1)[0] == node:
        cut = len(node) + 1
        return node, link.src[cut:], link.dst[cut:]
    return link.index


def class_problem(strategy: Any, classes: Sequence[Sequence[int]]) -> Problem | None:
    """Why one replica per class cannot stand for the others in ``strategy``'s run: expert
    parallelism across more than one class; None when it can."""
    experts = getattr(strategy, "experts", None)
    if len(classes) > 1 and experts is not None and experts.ep > 1:
        d = classes[1][0]
        return Problem(
            "parallelism.simulate_replicas",
            f"replica {d} runs on {rank_label(strategy._replica_devices(d))}, replica 0 on "
            f"{rank_label(strategy._replica_devices(0))}, and expert parallelism "
            f"(ep {experts.ep}) spans replicas: the replicas not played would not join its "
            "all-to-alls",
            "all (every replica played), or replicas that are all alike",
        )
    return None


def raise_if_unclassable(strategy: Any, classes: Sequence[Sequence[int]]) -> None:
    """:func:`class_problem` as a ScenarioError."""
    problem = class_problem(strategy, classes)
    if problem is not None:
        raise ScenarioError(problem)


def stands_for(strategy: Any) -> dict[str, int]:
    """Each played worker of ``strategy`` -> how many replicas' devices in its place it
    stands for (its class's size; 1 when every replica is played)."""
    out: dict[str, int] = {}
    for members in strategy.replica_classes or [[d] for d in strategy.played]:
        for group in strategy.groups[members[0]]:
            for device in group:
                out[device] = len(members)
    return out
