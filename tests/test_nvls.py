"""NVLink SHARP (NCCL's NVLS): an NVSwitch that reduces (``cluster.node.nvlink.sharp``)
caps ``in_network`` at its reduction throughput, and ``algorithm: auto`` weighs it.

Published figures: 8 x H100 reach a bus bandwidth of about 480 GB/s with NVLS, algbw ~275
(NVIDIA's maintainer, NVIDIA/nccl-tests#212; 476-483 measured on AWS p5 and Azure ND H100 v5);
8 x H800 (8 NVLinks, 200 GB/s) 215 GB/s (nccl#1374); 8 x B300 845 GB/s (nccl#2140)."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, slices
from clustersim.collectives.in_network import IN_NETWORK_CHUNK_BYTES, aggregation_tree
from clustersim.errors import ScenarioError

from .test_nccl_links import busbw_GBps, gpus, node_cluster


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize(
    ("nvlink", "keys", "published"),
    [
        ("450GB/s", {}, 480.0),  # 8 x H100 (nccl-tests#212)
        ("200GB/s", {"generation": 4}, 215.0),  # 8 x H800 (nccl#1374)
        ("900GB/s", {}, 845.0),  # 8 x B300 (nccl#2140)
    ],
)
def test_nvls_all_reduce_reaches_the_published_bus_bandwidth(
    model: str, nvlink: str, keys: dict, published: float
) -> None:
    """``in_network`` on an NVSwitch with ``sharp: true`` at 8 GiB: within 5% of the
    published NVLS bus bandwidths (the generation's share was fitted on H100 and B300; H800
    is held out)."""
    topo = node_cluster(nvlink=nvlink, sharp=True, **keys)
    bus = busbw_GBps(topo, "in_network", 2.0**33, "Simple", model)
    assert bus == pytest.approx(published, rel=0.05)


def test_the_cap_is_the_switchs_throughput_also_without_a_protocol() -> None:
    """The reduction throughput is the hardware's: with ``protocol: none`` the all-reduce
    takes 2 l + S / C + p / B (the in-network formula: the segments into the switch at its
    throughput C, the last piece down at the link's B)."""
    topo = node_cluster(nvlink="450GB/s", sharp="274GB/s")
    call = CollectiveCall("allreduce", gpus(topo), 2.0**30, "in_network")
    expected = 2.0**30 / 274e9 + IN_NETWORK_CHUNK_BYTES / 450e9
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("sharp", "chosen"), [(True, "in_network"), (False, "ring")])
def test_auto_takes_nvls_where_the_switch_reduces(sharp: bool, chosen: str) -> None:
    """8 x H100, 1 GiB: NCCL runs NVLS when the NVSwitch reduces (its default on H100 and
    later), a ring otherwise; NVLS runs Simple only."""
    topo = node_cluster(nvlink="450GB/s", sharp=sharp)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**30, "auto", protocol="auto")
    ran = slices(call, topo, "auto")[0]
    assert ran.algorithm == chosen
    assert ran.protocol == "Simple"


def test_small_all_reduces_stay_on_rings() -> None:
    """NVLS's 25 us latency loses at small sizes (NCCL: ring LL up to 1 MiB, NVLS from 2 MiB
    on 8 x H200, ml-engineering's measurement): auto picks a ring at 64 kB."""
    topo = node_cluster(nvlink="450GB/s", sharp=True)
    call = CollectiveCall("allreduce", gpus(topo), 65536.0, "auto", protocol="auto")
    assert slices(call, topo, "auto")[0].algorithm == "ring"


def test_a_tor_switch_is_not_an_nvls_candidate() -> None:
    """One GPU per node meets in the ToR, which does not say it reduces: auto leaves
    in_network out even on nodes whose NVSwitch reduces."""
    topo = node_cluster(nodes=4, nvlink="450GB/s", sharp=True)
    group = tuple(d for d in gpus(topo) if d.endswith("gpu0"))
    tree = aggregation_tree(group, topo)
    assert not isinstance(tree, str) and tree.top.endswith("tor")
    call = CollectiveCall("allreduce", group, 2.0**30, "auto", protocol="auto")
    assert slices(call, topo, "auto")[0].algorithm != "in_network"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"bandwidth": "300GB/s", "sharp": True}, "NVSwitch 3"),
        ({"bandwidth": "450GB/s", "sharp": True, "pairs": [[0, 1]]}, "pairs"),
    ],
)
def test_sharp_needs_a_reducing_nvswitch(keys: dict, message: str) -> None:
    """NVLink SHARP came with NVSwitch 3: refused on NVLink 3 (unless given a throughput)
    and on GPU pairs (no switch)."""
    nvlink = keys.pop("bandwidth")
    with pytest.raises(ScenarioError, match=message):
        node_cluster(nvlink=nvlink, **keys)
