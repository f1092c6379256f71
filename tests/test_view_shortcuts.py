"""The shortcuts pricing takes through a topology's views (issue 43 item 5: plan at 16k).

A channel's :class:`~clustersim.collectives.channels.SharedView` divides bandwidths and keeps
routes and latencies, so what needs only a route's links or latency asks the view it wraps
(its routes are built once for every view over it); a protocol's view says a route's latency
without scaling the route to NCCL's bandwidths; links are copied through their slots.  Each
shortcut must give what the long way gives, on every pair of a cluster with NVLink, PCIe
and NIC hops, for every protocol.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from clustersim.collectives import in_network
from clustersim.collectives.bus import route_latency
from clustersim.collectives.call import CollectiveCall
from clustersim.collectives.channels import shared_view
from clustersim.collectives.protocol import PROTOCOLS, protocol_view
from clustersim.scenario import parse_scenario
from clustersim.topology import Link, build_topology, with_bandwidth


def cluster(racks: int = 2, nodes: int = 2, nvls: bool = False):  # noqa: ANN201
    node = {"preset": "dgx-h100"} if nvls else {"preset": "dgx-a100"}
    doc = {
        "name": "views",
        "cluster": {
            "kind": "two_tier",
            "racks": racks,
            "nodes_per_rack": nodes,
            "node": node,
            "rack_uplink": {"oversubscription": 2},
            "spines": 2,
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def pairs(topology, count: int = 120) -> list[tuple[str, str]]:  # noqa: ANN001
    gpus = [d.name for d in topology.devices.values() if d.kind == "gpu"]
    every = [(a, b) for a, b in itertools.permutations(gpus, 2)]
    step = max(1, len(every) // count)
    return every[::step]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("algorithm", ["ring", "double_tree"])
@pytest.mark.parametrize("send_latency_s", [None, 7e-6])
def test_route_latency_is_the_first_routes_latency_in_every_view(
    protocol: str, algorithm: str, send_latency_s: float | None
) -> None:
    """Through a protocol's view, and a channel's shared view over it, ``route_latency``
    gives each pair's ``first_route(...).latency_s`` exactly (NVLink, PCIe and NIC hops:
    each kind its own per-hop latency), and the shared view's links and latencies are the
    protocol view's."""
    topology = cluster()
    view = protocol_view(topology, PROTOCOLS[protocol], algorithm, send_latency_s)
    some = pairs(topology)
    shared = shared_view(view, {link.index: 2.0 for link in topology.links[::3]})
    assert shared.same_links is topology and shared.same_latencies is view
    kinds = set()
    for v in (view, shared):
        latency_s = route_latency(v)
        for a, b in some:
            route = v.first_route(a, b)
            assert latency_s(a, b) == route.latency_s
            kinds.add(len(route.links))
    assert len(kinds) >= 3  # inside a node, across a rack, across the spines


def test_a_shared_view_reroutes_nothing_and_divides_bandwidths() -> None:
    """The shared view's routes take its wrapped topology's links (what ``same_links``
    promises), at the divided bandwidths, with the wrapped latencies."""
    topology = cluster()
    counts = {link.index: 3.0 for link in topology.links[::2]}
    view = shared_view(topology, counts)
    for a, b in pairs(topology):
        mine, plain = view.first_route(a, b), view.same_links.first_route(a, b)
        assert [x.index for x in mine.links] == [x.index for x in plain.links]
        assert mine.latency_s == plain.latency_s
        for x, y in zip(mine.links, plain.links, strict=True):
            assert x.bandwidth_Bps == y.bandwidth_Bps / counts.get(y.index, 1.0)


def test_with_bandwidth_is_replace_of_the_bandwidth() -> None:
    """A wired link (its name made from its ends) and a plain one: the copy equals
    :func:`dataclasses.replace`'s, name, type and hash included, and the original is kept."""
    topology = cluster(racks=1, nodes=1)
    wired = topology.links[0]
    plain = Link(7, "a->b", "a", "b", 1e9, 1e-6)
    for link in (wired, plain):
        made, slow = with_bandwidth(link, 123.0), replace(link, bandwidth_Bps=123.0)
        assert made == slow and hash(made) == hash(slow) and type(made) is type(slow)
        assert made.name == link.name and made.bandwidth_Bps == 123.0
        assert link.bandwidth_Bps != 123.0


def test_in_network_is_no_candidate_without_reducing_switches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a cluster whose switches cannot sum (DGX A100: no NVLink SHARP), auto does not
    weigh in-network reduction and builds no aggregation tree to say so; on DGX H100 (NVLS)
    it still does."""
    call = CollectiveCall("allreduce", ("rack0/node0/gpu0", "rack0/node0/gpu1"), 1e6, "auto")
    algo = in_network.InNetwork()

    def no_tree(*args: object) -> object:
        raise AssertionError("built a tree")

    with monkeypatch.context() as patch:
        patch.setattr(in_network, "aggregation_tree", no_tree)
        assert algo.nccl_candidate(call, cluster()) is False
    assert algo.nccl_candidate(call, cluster(nvls=True)) is True
