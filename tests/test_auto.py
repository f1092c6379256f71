"""``algorithm: auto`` decides once per collective, for all of its channels, as NCCL's tuner
does (clustersim/collectives/auto.py).

NCCL's ``topoGetAlgoInfo`` (NVIDIA/nccl ``src/enqueue.cc``) runs once per collective and
gives one algorithm and one protocol, which every channel of the collective runs; its time
is the collective's, ``latency + size / bandwidth`` over all channels
(``src/graph/tuning.cc``).  The clusters are DGX A100 nodes with one NIC per GPU and with
two or four GPUs per NIC, where the channels of one collective sit differently on the NICs.
"""

from __future__ import annotations

import pytest

from clustersim.collectives import (
    CollectiveCall,
    algorithm,
    channel_call,
    run_collective,
    slices,
)
from clustersim.collectives.auto import candidate_prices, choose
from clustersim.collectives.channels import shared_divisors, slice_flows
from clustersim.engine import Simulation

from .conftest import a100_cluster


def gpus(topo) -> tuple[str, ...]:
    return tuple(d for d in topo.devices if topo.device(d).kind == "gpu")


def run_time(topo, size: float, algo: str, protocol: str = "auto", model: str = "flow") -> float:
    """Seconds of an all-reduce of ``size`` over every GPU, NCCL's channels."""
    call = CollectiveCall("allreduce", gpus(topo), size, algo, protocol=protocol)
    sim = Simulation(topo)
    run_collective(sim, call, model=model, channels="auto")
    sim.run()
    return sim.now


@pytest.mark.parametrize("nics", [8, 4, 2])
@pytest.mark.parametrize("nodes", [2, 3, 4, 8])
def test_every_channel_runs_the_one_choice(nics: int, nodes: int) -> None:
    """From 16 KiB to 1 GiB, every slice of an ``auto`` all-reduce runs the same algorithm
    and protocol (before, the channels of one all-reduce could alternate between
    double_tree/LL128 and ring/Simple on 2 or 4 NICs per node)."""
    topo = a100_cluster(nodes, 8, nics=nics)
    for exp in range(14, 32, 2):
        call = CollectiveCall("allreduce", gpus(topo), float(2**exp), "auto", protocol="auto")
        parts = slices(call, topo, "auto")
        assert len({(p.algorithm, p.protocol) for p in parts}) == 1, (nics, nodes, 2**exp)


@pytest.mark.parametrize(("nodes", "nics"), [(3, 4), (4, 8), (2, 2)])
def test_auto_is_the_fastest_whole_collective(nodes: int, nics: int) -> None:
    """NCCL's tuner keeps the algorithm whose collective is the fastest: at every size of
    the sweep, auto's time (flow level) is within 5% of the faster of the ring and the
    double tree, each forced on all channels with its best protocol."""
    topo = a100_cluster(nodes, 8, nics=nics)
    for exp in (16, 19, 22, 26):
        size = float(2**exp)
        best = min(run_time(topo, size, a) for a in ("ring", "double_tree"))
        assert run_time(topo, size, "auto") <= best * 1.05, 2**exp


def test_three_a100_nodes_of_four_nics_at_128_mib() -> None:
    """The case of issue 41 (3 DGX A100 nodes, 4 NICs each, 128 MiB, flow level): auto
    runs one choice on all 8 channels and takes exactly the time of that choice forced, no
    more than the faster of ring and double tree (it took 3.58 ms, a mixture, where all
    double_tree took 3.16 and all ring 3.70)."""
    topo = a100_cluster(3, 8, nics=4)
    size = 2.0**27
    call = CollectiveCall("allreduce", gpus(topo), size, "auto", protocol="auto")
    (chosen,) = {(p.algorithm, p.protocol) for p in slices(call, topo, "auto")}
    auto = run_time(topo, size, "auto")
    assert auto == pytest.approx(run_time(topo, size, *chosen), rel=1e-12)
    assert auto <= min(run_time(topo, size, a) for a in ("ring", "double_tree")) * (1 + 1e-9)


def test_a_slice_beside_its_siblings_gets_its_max_min_share() -> None:
    """Priced beside the other channels, each flow of a slice gets 1 / (all flows on the
    link) of it, max-min fairness among equal flows, whether the slice puts one flow on the
    link or several (an odd channel's two trees on one of 4 NICs: its own flows were
    counted twice, once as a slice and again by its own cost)."""
    topo = a100_cluster(3, 8, nics=4)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**27, "double_tree")
    parts = [channel_call(call, topo, c, 8) for c in range(8)]
    algo = algorithm("double_tree")
    flows = slice_flows(algo, parts, topo)
    several = 0
    for part in parts:
        own = algo.link_flows(part, topo)
        divisors = shared_divisors(algo, part, flows, topo)
        for link, k in own.items():
            per_flow = 1.0 / divisors.get(link, 1.0) / k
            assert per_flow == pytest.approx(1.0 / flows[link], rel=1e-12)
            several += k > 1 and flows[link] > k
    assert several > 0  # the case that was priced wrong is among them


def test_double_tree_slices_alike_are_priced_alike() -> None:
    """The 8 channels of a double tree on 4-NIC nodes load the NICs alike (each NIC carries
    the same flows), so ``auto`` prices every slice within 1% of the others (the odd ones
    were priced 47% slower)."""
    topo = a100_cluster(3, 8, nics=4)
    call = CollectiveCall("allreduce", gpus(topo), 2.0**27, "double_tree", protocol="LL128")
    parts = [channel_call(call, topo, c, 8) for c in range(8)]
    assert choose(parts[0], topo, parts) == ("double_tree", "LL128")
    prices = [candidate_prices(part, topo, parts)["double_tree", "LL128"] for part in parts]
    assert max(prices) <= min(prices) * 1.01
