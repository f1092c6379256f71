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
carry own flows of two replicas (:func:`shared_own_link` finds none), that leaves out
nothing, and one replica per class is exactly every replica with the same collectives; the
summary says which (``replicas_exact``).

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

__all__ = [
    "SharedOwnLink",
    "class_problem",
    "own_pairs",
    "raise_if_unclassable",
    "replica_classes",
    "shared_own_link",
    "stands_for",
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


def shared_own_link(strategy: Any) -> SharedOwnLink | None:
    """The first link (in replica order) that own flows (:func:`own_pairs`) of two
    data-parallel replicas can both cross on one of their equal-cost routes; None when the
    replicas' own flows are on links of their own.

    Then, and with replicas of one class alike, one replica per class is exactly every
    replica with the same collectives: what the replicas not played leave out -- their own
    pipeline and tensor-parallel flows -- loads only links no played flow crosses, beside
    the data-parallel collectives that load every replica's links alike.

    Pairs inside one node are routed inside it (a node's links join its own GPUs, CPUs,
    switches and NICs: tests/test_replica_classes.py holds it for every node of the
    catalog), so they are followed only on nodes that hold devices of two replicas, and the
    pairs across nodes everywhere: at 16,384 GPUs a few hundred milliseconds."""
    topology = strategy.topology
    node_of = {name: device.node for name, device in topology.devices.items()}
    holders: dict[str, set[int]] = {}
    replicas = range(strategy.dp)
    for d in replicas:
        for group in strategy.groups[d]:
            for device in group:
                holders.setdefault(node_of.get(device) or device, set()).add(d)
    owner: dict[int, int] = {}
    for d in replicas:
        for a, b in own_pairs(strategy, d):
            node = node_of.get(a)
            if node is not None and node == node_of.get(b) and len(holders[node]) == 1:
                continue  # inside a node no other replica uses
            for route in topology.routes(a, b):
                for link in route.links:
                    first = owner.setdefault(link.index, d)
                    if first != d:
                        return SharedOwnLink(link.name, first, d)
    return None


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
