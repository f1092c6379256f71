"""``channels: auto`` (NCCL's channel search, clustersim/collectives/channels.py) and the slices
clustersim plays: copies of one rotation merged when that provably changes nothing.

NCCL's counts: 24 channels on one DGX A100 or DGX H100 node (NCCL logs: "only got 12
one-direction channel ... after duplicate, there are 24", nccl#1367), 16 across DGX H100
nodes with 8 NICs ("Channel 00/16", nccl#1453)."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, channel_call, run_collective, slices
from clustersim.collectives.channels import nccl_channels, nccl_graph, simulated_slices
from clustersim.collectives.work import call_work
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

from .conftest import flat_topology
from .test_nccl_links import gpus, node_cluster

A100 = {"nvlink": "300GB/s", "pcie": "32GB/s", "nic": "200Gb/s"}
H100 = {"nvlink": "450GB/s", "pcie": "64GB/s", "nic": "400Gb/s"}
B200 = {"nvlink": "900GB/s", "pcie": "64GB/s", "nic": "400Gb/s"}


@pytest.mark.parametrize(
    ("hardware", "nodes", "channels", "speed"),
    [
        (A100, 1, 24, 20.0),  # 6 x 40 GB/s on 240, doubled: 12 x 20, run twice
        (H100, 1, 24, 30.0),  # 6 x 60 on 370.8, doubled: 12 x 30 (nccl#1367)
        (B200, 1, 32, 45.0),  # 8 x 90 on 721.8, doubled: 16 x 45
        (A100, 4, 16, 24.0),  # one 24 GB/s channel per HDR NIC, 8 NICs, run twice
        (H100, 4, 16, 48.0),  # one 48 GB/s channel per NDR NIC ("Channel 00/16", nccl#1453)
    ],
)
def test_channel_count_is_nccls(hardware: dict, nodes: int, channels: int, speed: float) -> None:
    """What NCCL's search gives DGX-class nodes (8 GPUs, NVSwitch, 8 NICs)."""
    topo = node_cluster(nodes=nodes, **hardware)
    graph = nccl_graph(gpus(topo), topo)
    assert graph is not None
    assert (graph.channels, graph.speed_GBps) == (channels, speed)


@pytest.mark.parametrize(("hardware", "channels"), [(A100, 2), (H100, 4)])
def test_one_gpu_per_node_uses_its_own_nic(hardware: dict, channels: int) -> None:
    """A data-parallel group of one GPU per node crosses nodes through that GPU's NIC: one
    searched channel (A100), doubled on Hopper (48 GB/s, few channels), run twice."""
    topo = node_cluster(nodes=4, **hardware)
    group = tuple(d for d in gpus(topo) if d.endswith("gpu3"))
    assert nccl_channels(group, topo) == channels


def test_flat_clusters_get_one_channel() -> None:
    """Without nodes, NICs or link kinds there is nothing to search: 1."""
    topo = flat_topology("switch", 8)
    assert nccl_channels(tuple(topo.devices), topo) == 1


def _time(topo, call: CollectiveCall, model: str, channels: int, unmerged: bool) -> float:
    """Seconds of ``call`` on ``channels`` channels; ``unmerged`` plays every channel as its
    own slice (each on a communicator of its own, all at once)."""
    sim = Simulation(topo)
    if unmerged:
        for c in range(channels):
            part = channel_call(call, topo, c, channels)
            run_collective(sim, part, model=model, group=("slice", c))
    else:
        run_collective(sim, call, model=model, channels=channels)
    sim.run()
    return sim.now


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize(
    ("nodes", "channels", "played"), [(1, 24, 1), (2, 16, 8), (4, 16, 8), (4, 32, 8)]
)
def test_copies_of_a_rotation_merge_without_changing_the_time(
    model: str, nodes: int, channels: int, played: int
) -> None:
    """k equal flows on the same links each get 1/k of what one flow gets: playing the k
    copies of each rotation as one slice of k times the bytes gives the time of all
    channels played apart as flows (rel 1e-9), with ``played`` slices instead of
    ``channels``, in both models.  (The analytical model playing every channel apart would
    hide part of each one's latency behind the others' transfers: 5-12% faster here.)"""
    topo = node_cluster(nodes=nodes, **A100)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**28, "ring", protocol="Simple")
    assert simulated_slices(call, topo, channels) == played
    merged = _time(topo, call, model, channels, unmerged=False)
    apart = _time(topo, call, "flow", channels, unmerged=True)
    assert merged == pytest.approx(apart, rel=1e-9)


def test_uneven_copies_are_not_merged() -> None:
    """12 channels over 8 rotations repeat some rotations twice and others once: played
    apart."""
    topo = node_cluster(nodes=2, **A100)
    call = CollectiveCall("allreduce", gpus(topo), 1e6, "ring")
    assert simulated_slices(call, topo, 12) == 12


def test_ecmp_routes_are_not_merged() -> None:
    """With several spines and ECMP a channel's connection picks its spine: copies may take
    other routes, so every channel is played."""
    doc = {
        "name": "spines",
        "cluster": {
            "kind": "two_tier",
            "racks": 2,
            "nodes_per_rack": 1,
            "spines": 2,
            "node": {"gpus": 8, "nics": 8, "nvlink": {"bandwidth": "300GB/s"},
                     "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "200Gb/s"}},
        },
        "workload": {"program": []},
    }  # fmt: skip
    topo = build_topology(parse_scenario(doc).cluster)
    call = CollectiveCall("allreduce", gpus(topo), 1e6, "ring")
    assert simulated_slices(call, topo, 16) == 16


@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_work_counts_the_slices_played(model: str) -> None:
    """The work estimate of ``channels: auto`` counts the slices played (8 for NCCL's 16
    across DGX nodes), not NCCL's count."""
    topo = node_cluster(nodes=4, **A100)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**26, "ring", protocol="Simple")
    one = call_work(call, topo, model=model, channels=1)
    auto = call_work(call, topo, model=model, channels="auto")
    assert len(slices(call, topo, "auto")) == 8
    assert auto.transfers == pytest.approx(8 * one.transfers)


def _node_ends(topo, part: CollectiveCall) -> list[tuple[int | None, int | None]]:
    """(NIC it enters through, NIC it leaves through) of ``part`` at each node."""
    nodes: dict[str, list[str]] = {}
    for name in part.devices:
        nodes.setdefault(topo.device(name).node, []).append(name)
    return [(topo.nic_of(names[0]), topo.nic_of(names[-1])) for names in nodes.values()]


@pytest.mark.parametrize("nics", [1, 2, 4, 8])
@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_channels_take_the_nodes_nics_in_turn(nics: int, nodes: int) -> None:
    """NCCL starts its channels on a node's NICs in turn (search.cc: channel i tries NIC
    i mod count) and, where a NIC sits beside two or more GPUs, enters and leaves the node
    through two of them ("NET n -> GPU a -> .. -> GPU x -> NET n"; nccl#1933: the same NIC
    in and out keeps a channel on its rail): with 1, 2, 4 or 8 NICs for 8 GPUs every NIC
    is entered and left by as many channels as every other, at every node."""
    topo = node_cluster(nodes=nodes, nics=nics, **A100)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**28, "ring")
    channels = nccl_channels(call.devices, topo)
    ins: dict[int | None, int] = {}
    outs: dict[int | None, int] = {}
    for c in range(channels):
        ends = _node_ends(topo, channel_call(call, topo, c, channels))
        assert len(set(ends)) == 1  # every node alike: channels stay on their rail
        enter, leave = ends[0]
        if 1 < nics < 8:
            assert enter == leave
        ins[enter] = ins.get(enter, 0) + 1
        outs[leave] = outs.get(leave, 0) + 1
    assert sorted(ins) == sorted(outs) == list(range(nics))
    assert len(set(ins.values())) == len(set(outs.values())) == 1


@pytest.mark.parametrize(("nics", "played"), [(1, 2), (2, 2), (4, 4), (8, 8)])
def test_shared_nic_channels_merge_per_nic(nics: int, played: int) -> None:
    """Where 2 or 4 GPUs share a NIC, a channel's copies are the channels on the same NIC
    (same GPUs in and out): one slice per NIC is played, in the time of all channels played
    apart (rel 1e-9)."""
    topo = node_cluster(nodes=2, nics=nics, **A100)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**27, "ring", protocol="Simple")
    channels = nccl_channels(call.devices, topo)
    assert simulated_slices(call, topo, channels) == played
    merged = _time(topo, call, "flow", channels, unmerged=False)
    apart = _time(topo, call, "flow", channels, unmerged=True)
    assert merged == pytest.approx(apart, rel=1e-9)
