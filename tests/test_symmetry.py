"""Alike groups of devices (clustersim.topology.symmetry): one key per orbit, a canonical
group that exists and sits alike, and prices that do not depend on which alike group is
priced -- checked against pricing each group on its own."""

from __future__ import annotations

import random
import zlib
from typing import Any

import pytest

from clustersim.collectives import CollectiveCall, algorithm
from clustersim.collectives import auto as auto_module
from clustersim.collectives.protocol import PROTOCOLS, protocol_view
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

NODE = {
    "gpus": 8,
    "nics": 8,
    "nvlink": {"bandwidth": "300GB/s"},
    "pcie": {"bandwidth": "32GB/s"},
    "nic": {"bandwidth": "200Gb/s"},
}
CLUSTERS: dict[str, dict[str, Any]] = {
    "two_tier": {"kind": "two_tier", "racks": 4, "nodes_per_rack": 3, "spines": 2},
    "three_tier": {
        "kind": "three_tier",
        "pods": 3,
        "racks_per_pod": 2,
        "nodes_per_rack": 2,
        "spines": 2,
        "cores": 2,
        "pod_uplink": {"oversubscription": 2},
    },
    "rail_optimized": {"kind": "rail_optimized", "groups": 3, "nodes_per_group": 2, "spines": 2},
}


def topology(kind: str, split: bool = False, node: dict[str, Any] | None = None, **more: Any):
    cluster = {**CLUSTERS[kind], "node": node or NODE, **more}
    if split:
        cluster["spine_routing"] = "split"
    doc = {"name": "sym", "cluster": cluster, "workload": {"program": []}}
    return build_topology(parse_scenario(doc).cluster)


def gpus(topo) -> list[str]:
    return [d.name for d in topo.devices.values() if d.kind == "gpu"]


def random_group(topo, rng: random.Random, n: int) -> tuple[str, ...]:
    return tuple(rng.sample(gpus(topo), n))


@pytest.mark.parametrize("kind", sorted(CLUSTERS))
@pytest.mark.parametrize("seed", range(5))
def test_canonical_group_exists_and_sits_alike(kind: str, seed: int) -> None:
    topo = topology(kind)
    rng = random.Random(seed)
    group = random_group(topo, rng, rng.randint(2, 12))
    key = topo.orbit_key(group)
    first = topo.canonical(key)
    assert len(set(first)) == len(group)  # distinct devices stay distinct
    assert all(name in topo.devices for name in first)
    assert topo.orbit_key(first) == key
    assert [n.rsplit("/", 1)[-1] for n in first] == [n.rsplit("/", 1)[-1] for n in group]


def test_keys_tell_places_apart() -> None:
    """Same node vs two nodes of a rack vs two racks vs two pods: four orbits."""
    topo = topology("three_tier")
    pairs = [
        ("pod0/rack0/node0/gpu0", "pod0/rack0/node0/gpu1"),
        ("pod0/rack0/node0/gpu0", "pod0/rack0/node1/gpu0"),
        ("pod0/rack0/node0/gpu0", "pod0/rack1/node0/gpu0"),
        ("pod0/rack0/node0/gpu0", "pod1/rack0/node0/gpu0"),
    ]
    keys = {topo.orbit_key(p) for p in pairs}
    assert len(keys) == 4
    # a pair two pods apart sits like any other such pair
    assert topo.orbit_key(("pod2/rack1/node1/gpu0", "pod0/rack0/node0/gpu0")) == topo.orbit_key(
        pairs[3]
    )


def test_nvlink_domains_are_a_level() -> None:
    """Nodes of one multi-node NVLink domain are not alike to nodes of two domains."""
    node = {**NODE, "nvlink": {"bandwidth": "900GB/s"}, "nvlink_domain": 2}
    topo = topology("two_tier", node=node, nodes_per_rack=4)
    same = ("rack0/node0/gpu0", "rack0/node1/gpu0")
    apart = ("rack0/node1/gpu0", "rack0/node2/gpu0")
    assert topo.orbit_key(same) != topo.orbit_key(apart)
    assert topo.orbit_key(topo.canonical(topo.orbit_key(apart))) == topo.orbit_key(apart)


def test_a_restricted_view_has_no_orbits() -> None:
    topo = topology("two_tier")
    part = topo.restricted(gpus(topo)[:16])
    assert part.orbit_key(gpus(part)[:2]) is None


@pytest.mark.parametrize("kind", sorted(CLUSTERS))
def test_first_route_is_the_first_of_the_routes(kind: str) -> None:
    topo = topology(kind)
    names = gpus(topo)
    rng = random.Random(1)
    view = protocol_view(topo, PROTOCOLS["Simple"], "ring")
    for _ in range(40):
        a, b = rng.sample(names, 2)
        fresh = topology(kind)  # first_route before routes: built alone
        assert fresh.first_route(a, b) == topo.routes(a, b)[0]
        assert view.first_route(a, b) == view.routes(a, b)[0]


@pytest.mark.parametrize("kind", sorted(CLUSTERS))
@pytest.mark.parametrize("op", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("split", [False, True])
def test_alike_groups_cost_the_same(kind: str, op: str, split: bool) -> None:
    """A ring's cost on a group, priced on the first group of its orbit (what the ring's hop
    costs are remembered by), equals its cost priced on the group itself (a restricted view
    has no orbits), for every protocol, with ECMP or split spine routing."""
    topo = topology(kind, split=split)
    alone = topo.restricted(topo.devices)
    rng = random.Random(7)
    ring = algorithm("ring")
    for _ in range(6):
        group = random_group(topo, rng, rng.randint(2, 10))
        call = CollectiveCall(op, group, 64e6, "ring")
        for protocol in PROTOCOLS.values():
            by_orbit = ring.cost(call, protocol_view(topo, protocol, "ring"))
            assert by_orbit == ring.cost(call, protocol_view(alone, protocol, "ring"))


@pytest.mark.parametrize("kind", sorted(CLUSTERS))
def test_an_ecmp_route_built_alone_is_the_hashed_one_of_all(kind: str) -> None:
    """``Topology.route`` builds only the route ECMP picks; it is the one the CRC-32 of the
    pair and key picks among all of :meth:`routes` (built first on another copy)."""
    built_alone, every = topology(kind), topology(kind)
    names = gpus(every)
    rng = random.Random(3)
    choices = 0
    for _ in range(60):
        a, b = rng.sample(names, 2)
        key = f"connection{rng.randint(0, 7)}"
        routes = every.routes(a, b)
        want = routes[zlib.crc32(f"{a}|{b}|{key}".encode()) % len(routes)]
        assert built_alone.route(a, b, key) == want
        assert built_alone.route(a, b, key) is built_alone.route(a, b, key)  # one object
        choices += len(routes) > 1
    assert choices >= 20  # the sample crossed racks (and pods): routes to choose among


@pytest.mark.parametrize("size", [1e3, 1e6, 1e9])
def test_auto_choice_is_the_canonical_groups_own(size: float) -> None:
    """``auto`` priced per orbit chooses what pricing each group alone chooses."""
    topo = topology("three_tier", split=True)
    rng = random.Random(int(size))
    for _ in range(5):
        group = random_group(topo, rng, 6)
        call = CollectiveCall("allreduce", group, size, "auto", protocol="auto")
        auto_module._choices.clear()
        by_orbit = auto_module.choose(call, topo)
        auto_module._choices.clear()
        alone = auto_module.choose(call, topo.restricted(topo.devices))  # no orbits
        assert by_orbit == alone
