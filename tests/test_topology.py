"""Tests of clustersim.topology: devices, directed links, routes, selection."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Link, Route, Topology, build_topology

PCIE_BPS = 32e9  # 32GB/s
NIC_BPS = 12.5e9  # 100Gb/s
NVLINK_BPS = 300e9  # 300GB/s


def cluster_spec(**cluster: Any) -> Any:
    """A validated cluster spec from YAML-style keys."""
    doc = {"name": "t", "cluster": cluster, "workload": {"program": []}}
    return parse_scenario(doc).cluster


def two_tier(
    racks: int = 1,
    nodes: int = 1,
    gpus: int = 8,
    spines: int = 1,
    nvlink: str | list[list[int]] | None = "nvswitch",
    uplink: dict[str, Any] | None = None,
) -> Topology:
    """A two-tier topology; ``nvlink`` is "nvswitch", a list of GPU pairs, or None."""
    node: dict[str, Any] = {
        "gpus": gpus,
        "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
        "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
    }
    if nvlink == "nvswitch":
        node["nvlink"] = {"bandwidth": "300GB/s", "latency": "500ns"}
    elif nvlink is not None:
        node["nvlink"] = {"bandwidth": "300GB/s", "latency": "500ns", "pairs": nvlink}
    spec: dict[str, Any] = {"racks": racks, "nodes_per_rack": nodes, "node": node, "spines": spines}
    if uplink is not None:
        spec["rack_uplink"] = uplink
    return build_topology(cluster_spec(**spec))


def flat(kind: str, devices: int, **extra: Any) -> Topology:
    """A switch / ring / fully_connected topology with 10GB/s, 1us links."""
    return build_topology(
        cluster_spec(
            kind=kind, devices=devices, link={"bandwidth": "10GB/s", "latency": "1us"}, **extra
        )
    )


def custom(
    devices: list[str],
    links: list[tuple[str, str]],
    switches: Sequence[str] = (),
    **link_keys: Any,
) -> Topology:
    """A custom topology of GPUs and switches joined by 10GB/s links (plus ``link_keys``)."""
    return build_topology(
        cluster_spec(
            kind="custom",
            devices=[{"name": d} for d in devices],
            switches=list(switches),
            links=[{"src": a, "dst": b, "bandwidth": "10GB/s", **link_keys} for a, b in links],
        )
    )


def names(route: Route) -> list[str]:
    """The link names along a route."""
    return [link.name for link in route.links]


def hops(route: Route) -> list[str]:
    """The nodes a route visits, source first."""
    return [route.links[0].src] + [link.dst for link in route.links] if route.links else []


def assert_contiguous(route: Route, src: str, dst: str) -> None:
    """A route leaves src, ends at dst, and each link starts where the last ended."""
    if src == dst:
        assert route.links == ()
        return
    assert route.links[0].src == src
    assert route.links[-1].dst == dst
    for before, after in zip(route.links, route.links[1:], strict=False):
        assert before.dst == after.src


# -- construction --------------------------------------------------------------


@pytest.mark.parametrize("racks", [1, 2, 3])
@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize("gpus", [1, 8])
@pytest.mark.parametrize("spines", [1, 4])
@pytest.mark.parametrize("nvswitch", [True, False])
def test_two_tier_counts(racks: int, nodes: int, gpus: int, spines: int, nvswitch: bool) -> None:
    """Device, switch and link counts follow from racks, nodes, GPUs, spines and NVSwitch."""
    topo = two_tier(racks, nodes, gpus, spines, "nvswitch" if nvswitch else None)
    n_nodes = racks * nodes
    spine_count = spines if racks > 1 else 0
    cables_per_node = gpus + 1 + 1 + 1 + (gpus if nvswitch else 0)  # pcie x (gpus, cpu, nic), tor
    assert len(topo.devices) == n_nodes * (gpus + 1)
    assert len(topo.switches) == racks + n_nodes * (3 if nvswitch else 2) + spine_count
    assert len(topo.links) == 2 * (n_nodes * cables_per_node + racks * spine_count)
    assert topo.describe() == {
        "kind": "two_tier",
        "racks": racks,
        "nodes": n_nodes,
        "gpus": n_nodes * gpus,
        "cpus": n_nodes,
        "devices": n_nodes * (gpus + 1),
        "switches": len(topo.switches),
        "links": len(topo.links),
    }


def test_two_tier_names() -> None:
    """Devices and switches are named by full paths in build order."""
    topo = two_tier(racks=2, nodes=2, gpus=2, spines=2)
    assert list(topo.devices)[:4] == [
        "rack0/node0/gpu0",
        "rack0/node0/gpu1",
        "rack0/node0/cpu",
        "rack0/node1/gpu0",
    ]
    assert list(topo.devices)[-1] == "rack1/node1/cpu"
    assert {"rack0/tor", "rack1/tor", "spine0", "spine1"} <= set(topo.switches)
    assert {"rack1/node0/pcie", "rack1/node0/nic", "rack1/node0/nvswitch"} <= set(topo.switches)


def test_device_fields_come_from_spec() -> None:
    """GPU and CPU fields are copied from the node spec; node and rack are set."""
    spec = cluster_spec(
        racks=1,
        nodes_per_rack=2,
        node={
            "gpus": 1,
            "gpu": {"flops": "100TFLOPS", "efficiency": 0.5, "memory": "40GB"},
            "cpu": {"flops": "1TFLOPS", "memory_bandwidth": "100GB/s"},
            "pcie": {"bandwidth": "32GB/s"},
            "nic": {"bandwidth": "100Gb/s"},
        },
    )
    topo = build_topology(spec)
    gpu = topo.device("rack0/node1/gpu0")
    assert (gpu.kind, gpu.flops_per_s, gpu.efficiency, gpu.memory_bytes) == (
        "gpu",
        100e12,
        0.5,
        40e9,
    )
    assert (gpu.node, gpu.rack) == ("rack0/node1", "rack0")
    cpu = topo.device("rack0/node1/cpu")
    assert (cpu.kind, cpu.flops_per_s, cpu.memory_bandwidth_Bps) == ("cpu", 1e12, 100e9)


def test_indices_are_positions() -> None:
    """Device.index is the position in devices; links[i].index == i."""
    topo = two_tier(racks=2, nodes=2, gpus=2)
    assert [d.index for d in topo.devices.values()] == list(range(len(topo.devices)))
    assert [link.index for link in topo.links] == list(range(len(topo.links)))


def test_build_is_deterministic() -> None:
    """Building the same spec twice gives the same links in the same order."""
    first = two_tier(racks=3, nodes=2, gpus=2, spines=2)
    second = two_tier(racks=3, nodes=2, gpus=2, spines=2)
    assert first.links == second.links
    assert list(first.devices) == list(second.devices)


@pytest.mark.parametrize(
    "make",
    [
        lambda: two_tier(racks=2, nodes=2, gpus=4, spines=2),
        lambda: two_tier(nodes=1, gpus=4, nvlink=[[0, 1], [2, 3]]),
        lambda: flat("switch", 4),
        lambda: flat("ring", 5),
        lambda: flat("fully_connected", 4),
    ],
    ids=["two_tier", "nvlink_pairs", "switch", "ring", "fully_connected"],
)
def test_cables_are_two_directed_links(make: Any) -> None:
    """Every link has a reverse twin with the same bandwidth and latency, named src->dst."""
    topo = make()
    by_name = {link.name: link for link in topo.links}
    assert len(by_name) == len(topo.links)
    for link in topo.links:
        assert link.name == f"{link.src}->{link.dst}"
        back = by_name[f"{link.dst}->{link.src}"]
        assert (back.bandwidth_Bps, back.latency_s) == (link.bandwidth_Bps, link.latency_s)


def test_link_specs_applied() -> None:
    """PCIe, NIC and NVLink cables carry their spec's bandwidth (bytes/s) and latency (s)."""
    topo = two_tier()
    by_name = {link.name: link for link in topo.links}
    pcie = by_name["rack0/node0/gpu3->rack0/node0/pcie"]
    nic = by_name["rack0/node0/nic->rack0/tor"]
    nvl = by_name["rack0/node0/nvswitch->rack0/node0/gpu3"]
    assert (pcie.bandwidth_Bps, pcie.latency_s) == (PCIE_BPS, pytest.approx(1e-6))
    assert (nic.bandwidth_Bps, nic.latency_s) == (NIC_BPS, pytest.approx(2e-6))
    assert (nvl.bandwidth_Bps, nvl.latency_s) == (NVLINK_BPS, pytest.approx(5e-7))
    assert by_name["rack0/node0/nic->rack0/node0/pcie"].bandwidth_Bps == PCIE_BPS


def test_single_rack_has_no_spines() -> None:
    """With one rack there is nothing to connect: no spine switches or uplinks."""
    topo = two_tier(racks=1, nodes=2, spines=4)
    assert not [s for s in topo.switches if s.startswith("spine")]
    assert not [link for link in topo.links if "spine" in link.name]


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("spines", [1, 2])
def test_oversubscription_sets_uplink(ratio: int, spines: int) -> None:
    """Rack uplink = nodes_per_rack x NIC / ratio, shared equally by the spines."""
    nodes = 4
    topo = two_tier(racks=2, nodes=nodes, gpus=1, spines=spines, uplink={"oversubscription": ratio})
    uplink = nodes * NIC_BPS / ratio
    for r in range(2):
        for k in range(spines):
            for name in (f"rack{r}/tor->spine{k}", f"spine{k}->rack{r}/tor"):
                assert topo.select_links(name)[0].bandwidth_Bps == pytest.approx(uplink / spines)


def test_uplink_bandwidth_form() -> None:
    """A rack uplink given as a bandwidth is split over the spines, with its latency."""
    topo = two_tier(
        racks=2, nodes=4, gpus=1, spines=4, uplink={"bandwidth": "400Gb/s", "latency": "3us"}
    )
    links = topo.select_links("*tor->spine*")
    assert len(links) == 8
    for link in links:
        assert link.bandwidth_Bps == pytest.approx(50e9 / 4)
        assert link.latency_s == pytest.approx(3e-6)


def test_nvlink_pair_out_of_range_is_error() -> None:
    """An NVLink pair naming a GPU the node does not have is a ScenarioError with its key path."""
    with pytest.raises(ScenarioError, match=r"cluster\.node\.nvlink\.pairs\[1\]"):
        two_tier(gpus=4, nvlink=[[0, 1], [2, 4]])


# -- two-tier routes -----------------------------------------------------------


def test_route_to_self_is_empty() -> None:
    """A device reaches itself over no links, with zero latency and infinite bandwidth."""
    topo = two_tier()
    (route,) = topo.routes("rack0/node0/gpu0", "rack0/node0/gpu0")
    assert route.links == ()
    assert route.latency_s == 0.0
    assert route.bottleneck_Bps == math.inf


def test_intra_node_gpu_pair_uses_nvswitch() -> None:
    """GPU to GPU in a node with an NVSwitch goes through the NVSwitch."""
    topo = two_tier()
    (route,) = topo.routes("rack0/node0/gpu0", "rack0/node0/gpu5")
    assert names(route) == [
        "rack0/node0/gpu0->rack0/node0/nvswitch",
        "rack0/node0/nvswitch->rack0/node0/gpu5",
    ]
    assert route.bottleneck_Bps == NVLINK_BPS


def test_intra_node_without_nvlink_uses_pcie() -> None:
    """Without NVLink, GPU to GPU in a node goes through the PCIe switch."""
    topo = two_tier(nvlink=None)
    (route,) = topo.routes("rack0/node0/gpu0", "rack0/node0/gpu5")
    assert hops(route) == ["rack0/node0/gpu0", "rack0/node0/pcie", "rack0/node0/gpu5"]
    assert route.bottleneck_Bps == PCIE_BPS


def test_gpu_to_cpu_uses_pcie_even_with_nvswitch() -> None:
    """The CPU is not on NVLink: GPU <-> CPU in a node goes through PCIe."""
    topo = two_tier()
    (route,) = topo.routes("rack0/node0/gpu2", "rack0/node0/cpu")
    assert hops(route) == ["rack0/node0/gpu2", "rack0/node0/pcie", "rack0/node0/cpu"]


def test_nvlink_pairs_link_listed_gpus_directly() -> None:
    """Listed NVLink pairs get a direct link; unlisted pairs fall back to PCIe, no GPU transit."""
    topo = two_tier(gpus=4, nvlink=[[0, 1], [1, 2]])
    (direct,) = topo.routes("rack0/node0/gpu1", "rack0/node0/gpu0")
    assert names(direct) == ["rack0/node0/gpu1->rack0/node0/gpu0"]
    assert direct.bottleneck_Bps == NVLINK_BPS
    (fallback,) = topo.routes("rack0/node0/gpu0", "rack0/node0/gpu2")
    assert hops(fallback) == ["rack0/node0/gpu0", "rack0/node0/pcie", "rack0/node0/gpu2"]


def test_intra_rack_route() -> None:
    """Across nodes of a rack: device, PCIe, NIC, ToR, NIC, PCIe, device."""
    topo = two_tier(racks=2, nodes=2, spines=2)
    (route,) = topo.routes("rack1/node0/gpu3", "rack1/node1/cpu")
    assert hops(route) == [
        "rack1/node0/gpu3",
        "rack1/node0/pcie",
        "rack1/node0/nic",
        "rack1/tor",
        "rack1/node1/nic",
        "rack1/node1/pcie",
        "rack1/node1/cpu",
    ]


@pytest.mark.parametrize("spines", [1, 2, 4])
def test_inter_rack_routes_one_per_spine(spines: int) -> None:
    """Across racks there is one equal-cost route through each spine, in spine order."""
    topo = two_tier(racks=3, nodes=2, gpus=2, spines=spines)
    found = topo.routes("rack0/node1/gpu1", "rack2/node0/gpu0")
    assert len(found) == spines
    for k, route in enumerate(found):
        assert hops(route) == [
            "rack0/node1/gpu1",
            "rack0/node1/pcie",
            "rack0/node1/nic",
            "rack0/tor",
            f"spine{k}",
            "rack2/tor",
            "rack2/node0/nic",
            "rack2/node0/pcie",
            "rack2/node0/gpu0",
        ]


def test_route_latency_and_bottleneck() -> None:
    """Route latency is the sum of link latencies and its bandwidth the smallest link's."""
    topo = two_tier(
        racks=2, nodes=4, gpus=1, spines=2, uplink={"oversubscription": 4, "latency": "5us"}
    )
    route = topo.route("rack0/node0/gpu0", "rack1/node0/gpu0")
    # pcie 1us x4, nic 2us x2, uplink 5us x2
    assert route.latency_s == pytest.approx(4e-6 + 4e-6 + 10e-6)
    assert route.latency_s == pytest.approx(sum(link.latency_s for link in route.links))
    # uplink 4 x 12.5GB/s / 4 = 12.5GB/s per rack, 6.25GB/s per spine
    assert route.bottleneck_Bps == pytest.approx(6.25e9)


def test_route_of_computes_totals() -> None:
    """Route.of sums latencies and takes the minimum bandwidth; empty gives (0, inf)."""
    a = Link(0, "a->b", "a", "b", 5.0, 1.0)
    b = Link(1, "b->c", "b", "c", 2.0, 0.5)
    assert Route.of([a, b]) == Route((a, b), 1.5, 2.0)
    assert Route.of([]) == Route((), 0.0, math.inf)


def test_routes_are_cached() -> None:
    """Asking twice for the routes of a pair returns the same tuple object."""
    topo = two_tier(racks=2, spines=2)
    first = topo.routes("rack0/node0/gpu0", "rack1/node0/gpu0")
    assert topo.routes("rack0/node0/gpu0", "rack1/node0/gpu0") is first


def test_ecmp_choice_is_deterministic() -> None:
    """route() picks by CRC-32 of 'src|dst|flow_key': the same on every call and machine."""
    topo = two_tier(racks=2, spines=4)
    src, dst = "rack0/node0/gpu0", "rack1/node0/gpu1"
    found = topo.routes(src, dst)
    for key in range(20):
        expected = found[zlib.crc32(f"{src}|{dst}|{key}".encode()) % 4]
        assert topo.route(src, dst, key) is expected
        assert topo.route(src, dst, key) is topo.route(src, dst, key)
    assert topo.route(src, dst) is topo.route(src, dst, 0)


def test_ecmp_spreads_flows_over_spines() -> None:
    """Many flow keys spread over the spines roughly evenly (within 15% of fair)."""
    topo = two_tier(racks=2, spines=4)
    src, dst = "rack0/node0/gpu0", "rack1/node0/gpu0"
    used = Counter(topo.route(src, dst, key).links[3].dst for key in range(4000))
    assert set(used) == {"spine0", "spine1", "spine2", "spine3"}
    for count in used.values():
        assert 850 <= count <= 1150


def test_spine_routing_from_spec() -> None:
    """spine_routing comes from the spec (default ecmp)."""
    assert two_tier().spine_routing == "ecmp"
    spec = cluster_spec(
        racks=2,
        spine_routing="split",
        node={"pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
    )
    assert build_topology(spec).spine_routing == "split"


@settings(max_examples=25, deadline=None)
@given(
    racks=st.integers(1, 3),
    nodes=st.integers(1, 3),
    gpus=st.integers(1, 3),
    spines=st.integers(1, 3),
    nvswitch=st.booleans(),
    data=st.data(),
)
def test_two_tier_routes_are_contiguous(
    racks: int, nodes: int, gpus: int, spines: int, nvswitch: bool, data: st.DataObject
) -> None:
    """Every route of every pair leaves src, ends at dst and never passes through a device."""
    topo = two_tier(racks, nodes, gpus, spines, "nvswitch" if nvswitch else None)
    device_names = list(topo.devices)
    src = data.draw(st.sampled_from(device_names))
    dst = data.draw(st.sampled_from(device_names))
    for route in topo.routes(src, dst):
        assert_contiguous(route, src, dst)
        assert not set(hops(route)[1:-1]) & set(device_names)


# -- flat kinds ----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_switch_kind(n: int) -> None:
    """A switch cluster: n devices, one switch, a cable each; routes go via the switch."""
    topo = flat("switch", n)
    assert list(topo.devices) == [f"gpu{i}" for i in range(n)]
    assert topo.switches == ["switch"]
    assert len(topo.links) == 2 * n
    if n > 1:
        (route,) = topo.routes(f"gpu{n - 1}", "gpu0")
        assert names(route) == [f"gpu{n - 1}->switch", "switch->gpu0"]


def test_flat_cpu_devices() -> None:
    """device_kind cpu names the devices cpu{i} and makes them CPUs."""
    topo = flat("switch", 2, device_kind="cpu")
    assert list(topo.devices) == ["cpu0", "cpu1"]
    assert {d.kind for d in topo.devices.values()} == {"cpu"}
    assert topo.describe()["cpus"] == 2


@pytest.mark.parametrize(
    ("n", "bidirectional", "links"), [(1, True, 0), (2, True, 2), (3, True, 6), (8, True, 16),
                                      (1, False, 0), (2, False, 2), (3, False, 3), (8, False, 8)]
)  # fmt: skip
def test_ring_counts(n: int, bidirectional: bool, links: int) -> None:
    """A ring has a cable per neighbour pair (one for n=2, none for n=1), or one link each way round."""
    topo = flat("ring", n, bidirectional=bidirectional)
    assert len(topo.devices) == n
    assert len(topo.links) == links
    assert topo.switches == []


def test_ring_goes_the_short_way() -> None:
    """Around a ring of 8, a route takes the shorter direction."""
    topo = flat("ring", 8)
    (forward,) = topo.routes("gpu1", "gpu3")
    assert hops(forward) == ["gpu1", "gpu2", "gpu3"]
    (backward,) = topo.routes("gpu1", "gpu6")
    assert hops(backward) == ["gpu1", "gpu0", "gpu7", "gpu6"]


def test_ring_tie_gives_both_ways() -> None:
    """Opposite devices on an even ring have two equal-cost routes, forward first."""
    topo = flat("ring", 6)
    found = topo.routes("gpu4", "gpu1")
    assert [hops(r) for r in found] == [
        ["gpu4", "gpu5", "gpu0", "gpu1"],
        ["gpu4", "gpu3", "gpu2", "gpu1"],
    ]


def test_ring_of_two_has_one_route() -> None:
    """With two devices both ways round are the same cable: one route, one link."""
    topo = flat("ring", 2)
    assert [names(r) for r in topo.routes("gpu1", "gpu0")] == [["gpu1->gpu0"]]


def test_unidirectional_ring_goes_forward() -> None:
    """A one-way ring only has links i -> i+1, so routes go forward even when long."""
    topo = flat("ring", 5, bidirectional=False)
    (route,) = topo.routes("gpu3", "gpu2")
    assert hops(route) == ["gpu3", "gpu4", "gpu0", "gpu1", "gpu2"]
    assert route.latency_s == pytest.approx(4e-6)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_fully_connected_routes_are_direct(n: int) -> None:
    """Fully connected: n(n-1) links and every pair routes over its own direct link."""
    topo = flat("fully_connected", n)
    assert len(topo.links) == n * (n - 1)
    for i in range(n):
        for j in range(n):
            if i != j:
                (route,) = topo.routes(f"gpu{i}", f"gpu{j}")
                assert names(route) == [f"gpu{i}->gpu{j}"]


# -- custom --------------------------------------------------------------------


def test_custom_builds_devices_switches_links() -> None:
    """Custom clusters keep the given names; duplex links become two, simplex one."""
    topo = build_topology(
        cluster_spec(
            kind="custom",
            devices=[{"name": "a"}, {"name": "b", "kind": "cpu"}],
            switches=["s"],
            links=[
                {"src": "a", "dst": "s", "bandwidth": "10GB/s", "latency": "1us"},
                {"src": "s", "dst": "b", "bandwidth": "5GB/s", "duplex": False},
            ],
        )
    )
    assert list(topo.devices) == ["a", "b"]
    assert topo.device("b").kind == "cpu"
    assert topo.switches == ["s"]
    assert [link.name for link in topo.links] == ["a->s", "s->a", "s->b"]
    (route,) = topo.routes("a", "b")
    assert (route.latency_s, route.bottleneck_Bps) == (pytest.approx(1e-6), 5e9)


def test_custom_bfs_takes_fewest_hops() -> None:
    """Custom routes have the fewest hops, even when a longer path exists earlier in the list."""
    topo = custom(
        ["a", "b"],
        [("a", "s1"), ("s1", "s2"), ("s2", "s3"), ("s3", "b"), ("a", "s4"), ("s4", "b")],
        switches=["s1", "s2", "s3", "s4"],
    )
    (route,) = topo.routes("a", "b")
    assert hops(route) == ["a", "s4", "b"]


def test_custom_equal_hop_alternatives_in_link_order() -> None:
    """All equal-hop shortest routes are returned, ordered by the links they take."""
    topo = custom(
        ["a", "b"],
        [("a", "x"), ("a", "y"), ("x", "b"), ("y", "b"), ("a", "z"), ("z", "w"), ("w", "b")],
        switches=["x", "y", "z", "w"],
    )
    assert [hops(r) for r in topo.routes("a", "b")] == [["a", "x", "b"], ["a", "y", "b"]]
    assert [hops(r) for r in topo.routes("b", "a")] == [["b", "x", "a"], ["b", "y", "a"]]


def test_custom_devices_carry_transit() -> None:
    """In a custom topology a device may sit on another pair's route."""
    topo = custom(["a", "b", "c"], [("a", "b"), ("b", "c")])
    (route,) = topo.routes("a", "c")
    assert hops(route) == ["a", "b", "c"]


def test_custom_follows_link_direction() -> None:
    """Simplex links are one-way: the way back is a different path, or none."""
    topo = custom(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")], duplex=False)
    (route,) = topo.routes("b", "a")
    assert hops(route) == ["b", "c", "a"]


def test_custom_alternatives_capped() -> None:
    """At most 64 alternatives are returned when more equal-hop routes exist (5^3 = 125)."""
    layers = [[f"l{k}s{i}" for i in range(5)] for k in range(3)]
    links = [("a", s) for s in layers[0]] + [(s, "b") for s in layers[2]]
    for upper, lower in zip(layers, layers[1:], strict=False):
        links += [(u, v) for u in upper for v in lower]
    topo = custom(["a", "b"], links, switches=[s for layer in layers for s in layer])
    found = topo.routes("a", "b")
    assert len(found) == 64
    assert len({r.links for r in found}) == 64
    assert hops(found[0]) == ["a", "l0s0", "l1s0", "l2s0", "b"]
    for route in found:
        assert_contiguous(route, "a", "b")
        assert len(route.links) == 4


def test_custom_unknown_link_end_is_error() -> None:
    """A link to an unknown name is an error at cluster.links[i].dst, with a suggestion."""
    with pytest.raises(ScenarioError) as info:
        custom(
            ["gpu0", "gpu1"],
            [("gpu0", "s"), ("gpu1", "s"), ("s", "gpu2"), ("gpu0", "gpux1")],
            switches=["s"],
        )
    text = str(info.value)
    assert "cluster.links[3].dst" in text
    assert "cluster.links[2].dst" in text  # every problem is reported, not just the first
    assert "gpux1" in text
    assert "did you mean 'gpu1'?" in text


def test_custom_duplicate_name_is_error() -> None:
    """A name used by a device and a switch is an error at the second use."""
    with pytest.raises(ScenarioError, match=r"cluster\.switches\[0\].*'a'"):
        custom(["a", "b"], [("a", "b")], switches=["a"])


def test_custom_self_loop_is_error() -> None:
    """A link from a name to itself is an error at its key path."""
    with pytest.raises(ScenarioError, match=r"cluster\.links\[1\]"):
        custom(["a", "b"], [("a", "b"), ("b", "b")])


def test_custom_parallel_link_is_error() -> None:
    """Two links in the same direction between the same ends are an error."""
    with pytest.raises(ScenarioError, match=r"cluster\.links\[1\].*a->b"):
        custom(["a", "b"], [("a", "b"), ("b", "a")])


def test_no_route_is_error() -> None:
    """Devices with no path between them raise 'no route from a to b'."""
    topo = custom(["a", "b", "c"], [("a", "b")], duplex=False)
    with pytest.raises(ScenarioError, match="no route from b to a"):
        topo.routes("b", "a")
    with pytest.raises(ScenarioError, match="no route from a to c"):
        topo.route("a", "c")


# -- lookup and selection ------------------------------------------------------


def test_unknown_device_suggests_a_name() -> None:
    """device() of an unknown name raises with the key path and a did-you-mean hint."""
    topo = two_tier(racks=2, nodes=2)
    with pytest.raises(ScenarioError) as info:
        topo.device("rack0/node1/gpu9", path="workload.src")
    problem = info.value.problems[0]
    assert problem.path == "workload.src"
    assert "unknown device 'rack0/node1/gpu9'" in problem.message
    assert "did you mean 'rack0/node1/gpu" in problem.message
    assert "rack0/node0/gpu0" in problem.allowed


def test_routes_with_unknown_device_is_error() -> None:
    """routes() names the unknown device."""
    with pytest.raises(ScenarioError, match="unknown device 'gpu7'"):
        flat("ring", 4).routes("gpu0", "gpu7")


def test_select_glob_crosses_slashes() -> None:
    """`*` matches across '/', results in build order."""
    topo = two_tier(racks=2, nodes=2, gpus=2)
    assert [d.name for d in topo.select("rack0/*/gpu*")] == [
        "rack0/node0/gpu0",
        "rack0/node0/gpu1",
        "rack0/node1/gpu0",
        "rack0/node1/gpu1",
    ]
    assert [d.name for d in topo.select("*/cpu")] == [
        f"rack{r}/node{n}/cpu" for r in range(2) for n in range(2)
    ]
    assert len(topo.select("*")) == len(topo.devices)
    assert [d.name for d in topo.select("rack1/node0/gpu1")] == ["rack1/node0/gpu1"]


def test_select_never_returns_switches() -> None:
    """Switches and NICs are not devices, even when a glob would match their names."""
    topo = two_tier()
    assert all(d.kind in ("gpu", "cpu") for d in topo.select("rack0/node0/*"))
    assert len(topo.select("rack0/node0/*")) == 9


def test_select_without_match_is_error() -> None:
    """A glob that matches no device is an error at the given key path."""
    topo = two_tier()
    with pytest.raises(ScenarioError) as info:
        topo.select("rack9/*", path="stragglers[0].devices")
    assert info.value.problems[0].path == "stragglers[0].devices"
    assert "no device matches 'rack9/*'" in str(info.value)


def test_select_links_by_glob() -> None:
    """select_links matches link names; no match is an error."""
    topo = two_tier(racks=2, spines=2)
    assert [link.name for link in topo.select_links("rack0/tor->spine*")] == [
        "rack0/tor->spine0",
        "rack0/tor->spine1",
    ]
    with pytest.raises(ScenarioError, match="no link matches"):
        topo.select_links("nowhere->*", path="stragglers[1].links")


@pytest.mark.parametrize(
    "cluster",
    [
        {
            "kind": "two_tier",
            "racks": 3,
            "nodes_per_rack": 2,
            "spines": 4,
            "node": {"preset": "dgx-a100", "nics": 4},
        },
        {
            "kind": "three_tier",
            "pods": 2,
            "racks_per_pod": 2,
            "nodes_per_rack": 2,
            "spines": 2,
            "cores": 3,
            "node": {"preset": "dgx-h100"},
        },
        {
            "kind": "rail_optimized",
            "groups": 2,
            "nodes_per_group": 2,
            "spines": 2,
            "node": {"preset": "dgx-h100"},
        },
    ],
    ids=["two_tier", "three_tier", "rails"],
)
def test_route_links_are_the_links_of_route_and_remember_nothing(cluster: dict) -> None:
    """``Topology.route_links`` gives the links of ``route`` for every pair and connection
    (same rack, across racks, across pods, rails), and leaves the route cache as it was;
    ``ecmp_spread`` splits each route into the links all keys take and its own."""
    doc = {"name": "t", "cluster": cluster, "workload": {"program": []}}
    topology = build_topology(parse_scenario(doc).cluster)
    gpus = [d.name for d in topology.select("*gpu*")]
    pairs = [(a, b) for a in gpus[::3] for b in gpus[1::2] if a != b]
    keys = ("connection0", "connection1", "connection5")
    links = {key: [topology.route_links(a, b, key) for a, b in pairs] for key in keys}
    assert not topology._ecmp, "route_links remembered a route"
    for key in keys:
        assert links[key] == [topology.route(a, b, key).links for a, b in pairs]
        assert links[key] == [topology.route_links(a, b, key) for a, b in pairs]  # from the cache
    spread = 0
    for a, b in pairs:  # the links all keys' routes take, then each key's own: its route
        found = topology.ecmp_spread(a, b, keys)
        if found is not None:
            spread += 1
            common, middles = found
            for key, middle in zip(keys, middles, strict=True):
                route = topology.route(a, b, key).links
                assert sorted(common + middle, key=id) == sorted(route, key=id)
    assert spread > 0 or cluster["kind"] == "rail_optimized"
