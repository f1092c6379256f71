"""Checkpoint cost, simulated on the network: hand-derived times of sync and async writes,
the storage attached to the topology without changing anything else."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from clustersim.errors import ScenarioError
from clustersim.resilience import checkpoint_bytes, checkpoint_cost, drain_slowdown
from clustersim.resilience.checkpoint import checkpoint_topology
from clustersim.scenario import parse_scenario
from clustersim.topology import STORAGE, build_topology
from clustersim.topology.storage import top_tier

GB = 1e9


def _scenario(cluster: dict[str, Any], checkpoint: dict[str, Any], **extra: Any) -> Any:
    doc = {
        "name": "ckpt",
        "cluster": copy.deepcopy(cluster),
        "model": {"layers": [{"name": "l", "params": 1e6, "flops": 1e9}]},
        "training": {"global_batch": 8, "iterations": 2},
        "checkpoint": checkpoint,
        **extra,
    }
    return parse_scenario(doc)


def _switch(devices: int = 8, bandwidth: str = "100GB/s") -> dict[str, Any]:
    return {"kind": "switch", "devices": devices, "link": {"bandwidth": bandwidth, "latency": 0}}


def _two_tier(racks: int, nodes: int, gpus: int, **uplink: Any) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "racks": racks,
        "nodes_per_rack": nodes,
        "node": {
            "gpus": gpus,
            "pcie": {"bandwidth": "32GB/s", "latency": 0},
            "nic": {"bandwidth": "100GB/s", "latency": 0},
        },
    }
    if racks > 1:
        cluster["spines"] = 1
        cluster["rack_uplink"] = {"latency": 0, "oversubscription": 1, **uplink}
    return cluster


def _storage(bandwidth: str, **more: Any) -> dict[str, Any]:
    return {"bandwidth": bandwidth, "latency": 0, **more}


@pytest.mark.parametrize("size_gb", [0.5, 1, 4])
@pytest.mark.parametrize("storage_gbps", [5, 10, 40])
def test_sync_write_is_bound_by_the_storage_link(size_gb: float, storage_gbps: int) -> None:
    """8 ranks x S bytes into a storage link of B (NICs of 100 GB/s, faster): 8 S / B."""
    s = _scenario(_switch(), {"every": 10, "storage": _storage(f"{storage_gbps}GB/s")})
    ranks = {f"gpu{i}": size_gb * GB for i in range(8)}
    cost = checkpoint_cost(s, bytes_per_rank=ranks)
    assert cost.blocking_s == pytest.approx(8 * size_gb / storage_gbps, rel=1e-9)
    assert cost.drain_s == 0 and cost.to_storage and not cost.is_async


def test_eight_ranks_of_1GB_over_10GBps_take_0_8_s() -> None:
    """The issue's example: 8 ranks x 1 GB to storage over a 10 GB/s storage link: 0.8 s."""
    s = _scenario(_switch(), {"every": 10, "storage": _storage("10GB/s")})
    cost = checkpoint_cost(s, bytes_per_rank={f"gpu{i}": GB for i in range(8)})
    assert cost.blocking_s == pytest.approx(0.8)
    assert cost.total_bytes == 8 * GB


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_oversubscribed_uplink_bounds_the_write(ratio: int) -> None:
    """2 racks of 4 one-GPU nodes, NICs of 100 GB/s, rack uplink 4 x 100 / ratio GB/s, storage
    (1 TB/s) on the spine: each rack's 4 GB cross its uplink at 400 / ratio GB/s, the NICs
    give 100 GB/s per rank: time = 4 GB / min(400 / ratio, 4 x 100) GB/s = ratio / 100 s."""
    cluster = _two_tier(2, 4, 1, oversubscription=ratio)
    cluster["node"]["pcie"]["bandwidth"] = "1000GB/s"
    s = _scenario(cluster, {"every": 10, "storage": _storage("1TB/s")})
    topology = checkpoint_topology(s)
    ranks = {d: GB for d in topology.devices if d.endswith("gpu0")}
    assert len(ranks) == 8
    assert checkpoint_cost(s, topology, ranks).blocking_s == pytest.approx(ratio / 100)


def test_async_blocks_for_the_pcie_copy_and_drains_from_the_hosts() -> None:
    """Async: each rank's 1 GB over its 32 GB/s PCIe link blocks 1/32 s; then the 2 nodes'
    hosts send 4 GB each to storage on the top-of-rack switch at 10 GB/s: 0.8 s of drain."""
    s = _scenario(_two_tier(1, 2, 4), {"every": 10, "async": True, "storage": _storage("10GB/s")})
    topology = checkpoint_topology(s)
    ranks = {d: GB for d in topology.devices if "/gpu" in d}
    cost = checkpoint_cost(s, topology, ranks)
    assert cost.blocking_s == pytest.approx(1 / 32)
    assert cost.drain_s == pytest.approx(0.8)
    assert cost.is_async


def test_without_storage_each_rank_copies_over_pcie() -> None:
    """No storage: the copy to the node's host over PCIe, the same sync or async; no drain."""
    for is_async in (False, True):
        s = _scenario(_two_tier(1, 2, 4), {"every": 10, "async": is_async})
        topology = checkpoint_topology(s)
        assert STORAGE not in topology.devices
        ranks = {d: 2 * GB for d in topology.devices if "/gpu" in d}
        cost = checkpoint_cost(s, topology, ranks)
        assert cost.blocking_s == pytest.approx(2 / 32) and cost.drain_s == 0
        assert not cost.to_storage


@pytest.mark.parametrize(
    "training, zero, per_param",
    [
        ({"precision": "fp16", "optimizer": "adam"}, None, 2 + 12),
        ({"precision": "fp32", "optimizer": "sgd"}, None, 4),
        ({"precision": "bf16", "optimizer": "adam"}, {"stage": 1}, 2 + 12 / 4),
        ({"precision": "bf16", "optimizer": "adam"}, {"stage": 3}, (2 + 12) / 4),
    ],
)
def test_each_rank_writes_its_weights_and_optimizer_states(
    training: dict[str, Any], zero: dict[str, Any] | None, per_param: float
) -> None:
    """Bytes per rank from the memory plan: weights + optimizer states (ZeRO shards them over
    the 4 ranks), no gradients: 1e6 parameters x bytes per parameter."""
    extra = {"zero": zero} if zero else {}
    s = _scenario(_switch(4), {"every": 10, "storage": _storage("10GB/s")}, **extra)
    s = s.model_copy(update={"training": s.training.model_copy(update=training)})
    sizes = checkpoint_bytes(s, checkpoint_topology(s))
    assert sorted(sizes) == [f"gpu{i}" for i in range(4)]
    assert all(v == pytest.approx(1e6 * per_param) for v in sizes.values())


def test_storage_is_appended_and_changes_nothing_else() -> None:
    """Every device, link name and index of the cluster is kept; the storage and its cables
    come after them, and routes between the cluster's devices are unchanged."""
    s = _scenario(_two_tier(2, 2, 2), {"every": 10, "storage": _storage("10GB/s")})
    plain = build_topology(s.cluster)
    with_storage = checkpoint_topology(s)
    n = len(plain.links)
    assert [link.name for link in with_storage.links[:n]] == [link.name for link in plain.links]
    assert [link.name for link in with_storage.links[n:]] == ["storage->spine0", "spine0->storage"]
    assert list(with_storage.devices)[:-1] == list(plain.devices)
    assert with_storage.devices[STORAGE].index == len(plain.devices)
    a, b = "rack0/node0/gpu0", "rack1/node1/gpu1"
    assert with_storage.routes(a, b) == plain.routes(a, b)
    (route,) = with_storage.routes(a, STORAGE)
    assert [link.dst for link in route.links][-2:] == ["spine0", STORAGE]
    (back,) = with_storage.routes(STORAGE, a)
    assert back.links[0].name == "storage->spine0" and back.links[-1].dst == a


def test_default_attachment_is_the_top_tier() -> None:
    """Spines of a two-tier cluster, cores of a three-tier one, the ToR of one rack, the
    switch of a flat cluster; the bandwidth is split over the cables."""
    assert top_tier(build_topology(parse_scenario(_doc(_two_tier(2, 1, 1))).cluster)) == ["spine0"]
    assert top_tier(build_topology(parse_scenario(_doc(_two_tier(1, 2, 1))).cluster)) == [
        "rack0/tor"
    ]
    three = {
        "kind": "three_tier",
        "pods": 2,
        "racks_per_pod": 1,
        "nodes_per_rack": 1,
        "spines": 1,
        "cores": 2,
        "node": {"gpus": 1, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
    }
    s = _scenario(three, {"every": 1, "storage": _storage("8GB/s")})
    topology = checkpoint_topology(s)
    cables = [link for link in topology.links if link.src == STORAGE]
    assert [link.dst for link in cables] == ["core0", "core1"]
    assert all(link.bandwidth_Bps == 4e9 for link in cables)
    assert top_tier(build_topology(parse_scenario(_doc(_switch(2))).cluster)) == ["switch"]


def _doc(cluster: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "t",
        "cluster": cluster,
        "workload": {"collective": "allreduce", "bytes": "1MB"},
    }


def test_attach_glob_matching_no_switch_names_the_key() -> None:
    s = _scenario(_switch(), {"every": 10, "storage": _storage("10GB/s", attach="spine*")})
    with pytest.raises(ScenarioError, match=r"checkpoint\.storage\.attach: no switch matches"):
        checkpoint_topology(s)


def test_a_cluster_without_switches_cannot_take_storage() -> None:
    ring = {"kind": "ring", "devices": 4, "link": {"bandwidth": "10GB/s"}}
    s = _scenario(ring, {"every": 10, "storage": _storage("10GB/s")})
    with pytest.raises(ScenarioError, match=r"checkpoint\.storage: a ring cluster has no switch"):
        checkpoint_topology(s)


def test_background_drain_slows_training_sharing_the_storage_path() -> None:
    """A drain over the same NICs as the gradient all-reduce: iterations are not faster with
    it, and the drain ends later than alone (it shares links with training)."""
    cluster = _two_tier(1, 2, 1)
    s = _scenario(
        cluster,
        {"every": 10, "async": True, "storage": _storage("10GB/s")},
        model={"layers": [{"name": "l", "params": 2e8, "flops": 1e11, "repeat": 2}]},
    )
    found = drain_slowdown(s)
    assert found.slowdown >= 1.0
    assert found.drain_s > 0
