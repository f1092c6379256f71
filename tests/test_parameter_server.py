"""Parameter-server training: validation cases P1-P5 and the semantics of each mode.

Clusters are two-tier with one GPU per node, zero latency and a PCIe far
faster than the NIC, so a NIC of B bytes/s is the bottleneck of every
transfer and times are exact: a push or pull of S bytes takes S / B alone,
m concurrent ones into (or out of) one server take m x S / B.  Server work is
memory-bound on its CPU (memory bandwidth M): aggregating a push costs S / M,
an sgd update 12 x params / M.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from clustersim import simulate
from clustersim.api import prepare
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.model import Layer, Model
from clustersim.scenario import parse_scenario
from clustersim.strategies.parameter_server.layout import assign_keys, key_blocks

from . import shared_runs

NIC = 10e9  # bytes/s
MEM = 200e9  # CPU memory bandwidth, bytes/s
GPU = 100e12  # FLOP/s
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios" / "parameter_server"


def ps_doc(
    nodes: int,
    layers: list[dict[str, Any]],
    *,
    batch: int | None = None,
    iterations: int = 3,
    stragglers: list[dict[str, Any]] | None = None,
    **ps: Any,
) -> dict[str, Any]:
    """A training scenario: ``nodes`` nodes of one GPU each, parameter servers ``ps``."""
    return {
        "name": "ps",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": 1,
                "gpu": {"flops": f"{GPU / 1e12:g}TFLOPS"},
                "cpu": {"memory_bandwidth": f"{MEM / 1e9:g}GB/s"},
                "pcie": {"bandwidth": "10TB/s"},
                "nic": {"bandwidth": f"{NIC / 1e9:g}GB/s"},
            },
        },
        "model": {"layers": layers},
        "training": {"global_batch": batch or nodes, "iterations": iterations},
        "data_parallel": {"sync": "ps", "ps": ps},
        "stragglers": stragglers or [],
    }


def layer(name: str, params: float, flops: float = 0) -> dict[str, Any]:
    return {"name": name, "params": params, "flops": flops}


def run(doc: dict[str, Any]) -> dict[str, Any]:
    return simulate(parse_scenario(doc)).summary


def run_strategy(doc: dict[str, Any]) -> Any:
    """Run and return the strategy object (to read its iteration clock)."""
    prepared = prepare(parse_scenario(doc))
    sim = Simulation.from_scenario(prepared.scenario, prepared.topology)
    prepared.strategy.start(sim)
    sim.run()
    return prepared.strategy, sim


# --------------------------------------------------------------------------- keys


def test_big_layer_is_split_and_keys_balanced() -> None:
    model = Model("m", (Layer("big", 10, 0, 0, 0), Layer("a", 1, 0, 0, 0), Layer("b", 1, 0, 0, 0)))
    blocks = key_blocks(model, 2)
    assert [(n, p) for n, _, p in blocks] == [("big[0]", 5), ("big[1]", 5), ("a", 1), ("b", 1)]
    owner = assign_keys([p for _, _, p in blocks], 2)
    assert owner == [0, 1, 0, 1]
    assert key_blocks(model, 1) == [("big", 0, 10), ("a", 1, 1), ("b", 2, 1)]


def test_assignment_largest_first_to_least_loaded() -> None:
    sizes = [3, 5, 3, 4, 3]
    owner = assign_keys(sizes, 2)
    assert owner == assign_keys(sizes, 2)  # deterministic
    loads = [sum(s for s, o in zip(sizes, owner, strict=True) if o == j) for j in range(2)]
    assert sorted(loads) == [8, 10]
    assert owner[1] == 0 and owner[3] == 1  # 5 first to server 0, then 4 to server 1


# --------------------------------------------------------------------------- P1, P2


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_p1_one_server_time_grows_with_workers(m: int) -> None:
    params = 25e6
    size = 4 * params
    s = run(ps_doc(m + 1, [layer("w", params)], placement="dedicated"))
    push = pull = m * size / NIC
    server = (m * size + 12 * params) / MEM
    # cases.md allows 0.5%; uncontended and latency-free, the flow model is exact
    assert s["iteration_time_s"] == pytest.approx(push + pull + server, rel=1e-9)
    assert s["servers"] == {f"rack0/node{m}/cpu": {"params": params, "bytes": size}}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_p2_n_servers_divide_the_load(n: int) -> None:
    m, params = 8, 24e6
    size = 4 * params
    s = run(ps_doc(m + n, [layer("w", params)], placement="dedicated", servers=n))
    assert len(s["keys"]) == n and len(s["workers"]) == m
    expected = 2 * m * size / (n * NIC) + (m * size / n + 12 * params / n) / MEM
    assert s["iteration_time_s"] == pytest.approx(expected, rel=5e-3)


# --------------------------------------------------------------------------- P3, P4


def test_p3_sync_runs_at_the_slowest_workers_pace() -> None:
    m, params, flops = 4, 1e6, 1e11
    size = 4 * params
    t = 3 * flops / GPU  # forward + backward of one sample
    base = ps_doc(m + 1, [layer("w", params, flops)], batch=m, placement="dedicated", iterations=4)
    even = run(base)
    slow = run({**base, "stragglers": [{"devices": "rack0/node0/gpu0", "slowdown": 2}]})
    pulls = m * size / NIC
    assert even["iteration_time_s"] == pytest.approx(
        t + m * size / NIC + (m * size + 12 * params) / MEM + pulls, rel=1e-9
    )
    # the slow worker pushes alone, after the others' pushes are aggregated
    expected = 2 * t + size / NIC + (size + 12 * params) / MEM + pulls
    assert slow["iteration_time_s"] == pytest.approx(expected, rel=5e-3)
    assert slow["staleness_histogram"] == {0: m * 4}


def test_p4_backup_workers_ignore_the_slowest_tenth() -> None:
    m, params, flops = 10, 1e5, 1e12
    size = 4 * params
    t = 3 * flops / GPU  # 30 ms
    base = ps_doc(
        m + 1,
        [layer("w", params, flops)],
        batch=m,
        placement="dedicated",
        mode="backup",
        iterations=12,
        stragglers=[{"devices": "rack0/node9/gpu0", "slowdown": 3}],
    )
    s = run(base)
    k = 9
    # the straggler is cancelled and pulls with the others: m pulls
    expected = t + (k + m) * size / NIC + (k * size + 12 * params) / MEM
    assert s["parameter_server"]["backup_k"] == k
    assert s["iteration_time_s"] == pytest.approx(expected, rel=5e-3)
    assert s["key_pushes_dropped"] == 0 and s["cancelled_compute_s"] > 0
    assert s["iterations_per_worker"]["rack0/node9/gpu0"] == 12
    # without cancelling, its late pushes are dropped and it pulls on its own
    old = run(
        {
            **base,
            "data_parallel": {
                "sync": "ps",
                "ps": {**base["data_parallel"]["ps"], "backup_cancel": False},
            },
        }
    )
    expected = t + 2 * k * size / NIC + (k * size + 12 * params) / MEM
    assert old["iteration_time_s"] == pytest.approx(expected, rel=5e-3)
    assert old["key_pushes_dropped"] > 0
    assert old["iterations_per_worker"]["rack0/node9/gpu0"] < 12
    assert old["iterations_per_worker"]["rack0/node0/gpu0"] == 12
    sync = run({**base, "data_parallel": {"sync": "ps", "ps": {"placement": "dedicated"}}})
    assert sync["iteration_time_s"] > 2.9 * t


# --------------------------------------------------------------------------- P5, staleness


def _async_doc(mode: str = "async", **ps: Any) -> dict[str, Any]:
    return ps_doc(
        5,
        [layer("w", 1e5, 1e12)],
        batch=4,
        placement="dedicated",
        mode=mode,
        iterations=20,
        stragglers=[
            {"devices": "rack0/node1/gpu0", "slowdown": 1.25},
            {"devices": "rack0/node2/gpu0", "slowdown": 1.5},
            {"devices": "rack0/node3/gpu0", "slowdown": 2},
        ],
        **ps,
    )


def test_p5_async_updates_per_second() -> None:
    params = 1e5
    size = 4 * params
    t = 3 * 1e12 / GPU
    own_comm = 2 * size / NIC + 12 * params / MEM
    s = run(_async_doc())
    expected = sum(1 / (f * t + own_comm) for f in (1, 1.25, 1.5, 2))
    assert s["updates_per_s"] == pytest.approx(expected, rel=1e-2)
    assert set(s["iterations_per_worker"].values()) == {20}
    stale = s["staleness_histogram"]
    assert sum(stale.values()) == 4 * 20
    assert any(k > 0 and v > 0 for k, v in stale.items())


def test_sync_staleness_is_zero() -> None:
    doc = _async_doc()
    doc["data_parallel"]["ps"]["mode"] = "sync"
    s = run(doc)
    assert s["staleness_histogram"] == {0: 4 * 20}


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_ssp_never_runs_more_than_s_ahead(bound: int) -> None:
    doc = _async_doc("ssp", staleness=bound)
    strategy, _ = run_strategy(doc)
    clock, iterations = strategy.clock, 20
    workers = strategy.workers
    for w in workers:
        for i in range(bound + 1, iterations):
            start = clock.starts[w, i]
            for other in workers:
                assert clock.ends[other, i - bound - 1] <= start + 1e-12
    free = run(_async_doc())
    gated = run(doc)
    # the fastest worker is held back: it finishes later than without the gate
    assert gated["makespan_s"] >= free["makespan_s"] - 1e-12
    assert gated["iteration_time_s"] > free["iteration_time_s"]


def test_geo_pushes_every_period() -> None:
    doc = _async_doc("geo", geo_period=5)
    result = simulate(parse_scenario(doc))
    s = result.summary
    assert set(s["pushes_per_worker"].values()) == {20 / 5}
    pushes = [r for r in result.records if r.kind == "transfer" and r.op == "push"]
    assert len(pushes) == 4 * 20 // 5
    assert s["updates_per_s"] > 0
    assert set(s["iterations_per_worker"].values()) == {20}


# --------------------------------------------------------------------------- placements


def test_sharded_sends_nothing_to_itself() -> None:
    m, params = 4, 1e6
    doc = ps_doc(m, [layer(f"l{i}", params) for i in range(m)], placement="sharded")
    result = simulate(parse_scenario(doc))
    servers = result.summary["servers"]
    assert len(servers) == m and {v["params"] for v in servers.values()} == {params}
    transfers = [r for r in result.records if r.kind == "transfer"]
    assert transfers and all(r.src != r.dst for r in transfers)
    assert sum(r.bytes for r in transfers) == pytest.approx(3 * 2 * m * (m - 1) * 4 * params)
    nic_out = {x["link"]: x["bytes"] for x in result.links if x["link"].endswith("nic->rack0/tor")}
    assert len(nic_out) == m
    assert list(nic_out.values()) == [pytest.approx(3 * 2 * (m - 1) * 4 * params)] * m


def test_cpu_and_gpu_placements() -> None:
    cpu = run(ps_doc(4, [layer("a", 1e6), layer("b", 1e6)], placement="cpu", servers=2))
    assert list(cpu["servers"]) == ["rack0/node0/cpu", "rack0/node1/cpu"]
    assert len(cpu["workers"]) == 4
    gpu = run(ps_doc(4, [layer("a", 1e6)], placement="gpu"))
    assert list(gpu["servers"]) == ["rack0/node0/gpu0"]
    custom = run(ps_doc(4, [layer("a", 1e6)], placement="dedicated", server_devices="*node1/cpu"))
    assert list(custom["servers"]) == ["rack0/node1/cpu"]
    assert "rack0/node1/gpu0" not in custom["workers"]


def test_cpu_placement_on_a_flat_cluster_is_an_error() -> None:
    doc = ps_doc(2, [layer("a", 1e6)], placement="cpu")
    doc["cluster"] = {"kind": "switch", "devices": 4, "link": {"bandwidth": "10GB/s"}}
    with pytest.raises(ScenarioError) as err:
        run(doc)
    assert err.value.problems[0].path == "data_parallel.ps.placement"


def test_too_many_servers_is_an_error() -> None:
    with pytest.raises(ScenarioError) as err:
        run(ps_doc(2, [layer("a", 1e6)], placement="dedicated", servers=2))
    assert err.value.problems[0].path == "data_parallel.ps.servers"


def test_deterministic() -> None:
    doc = _async_doc()
    doc["stragglers"].append(
        {"random": {"fraction": 0.5, "slowdown": {"dist": "lognormal", "sigma": 0.3}}}
    )
    a = simulate(parse_scenario(doc)).summary_json()
    b = simulate(parse_scenario(doc)).summary_json()
    assert a == b


# --------------------------------------------------------------------------- shipped scenarios


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_run(path: Path) -> None:
    assert path.read_text().startswith("#")
    summary = shared_runs.summary(path)
    assert summary["workload"] == "parameter_server"
    assert math.isfinite(summary["iteration_time_s"]) and summary["iteration_time_s"] > 0


def test_shipped_backup_beats_sync_under_a_straggler() -> None:
    sync = simulate(SCENARIOS / "sync_straggler.yaml").summary
    backup = simulate(SCENARIOS / "backup_straggler.yaml").summary
    assert backup["iteration_time_s"] < 0.5 * sync["iteration_time_s"]
    assert backup["cancelled_compute_s"] > 0 and backup["key_pushes_dropped"] == 0


@pytest.mark.parametrize("slowdown", [1.5, 2.0, 4.0])
def test_a_straggler_costs_sync_its_delay_and_async_its_share(slowdown: float) -> None:
    """One slow worker: sync runs at its pace, async loses only that worker's share of updates.

    4 workers, a dedicated server; each worker computes t = 3 x 1e12 FLOPs / GPU per
    iteration and spends c on its own push, update and pull. Async updates/s go from
    4 / (t + c) to 3 / (t + c) + 1 / (k t + c) (P5); sync's iteration grows by (k - 1) t.
    """
    params = 1e5
    t = 3 * 1e12 / GPU
    c = 2 * 4 * params / NIC + 12 * params / MEM
    straggler = [{"devices": "rack0/node3/gpu0", "slowdown": slowdown}]

    def doc(mode: str, stragglers: list) -> dict[str, Any]:
        return ps_doc(
            5,
            [layer("w", params, 1e12)],
            batch=4,
            placement="dedicated",
            mode=mode,
            iterations=20,
            stragglers=stragglers,
        )

    fast, slow = run(doc("async", [])), run(doc("async", straggler))
    assert fast["updates_per_s"] == pytest.approx(4 / (t + c), rel=1e-2)
    assert slow["updates_per_s"] == pytest.approx(3 / (t + c) + 1 / (slowdown * t + c), rel=1e-2)
    sync_fast, sync_slow = run(doc("sync", [])), run(doc("sync", straggler))
    assert sync_slow["iteration_time_s"] - sync_fast["iteration_time_s"] == pytest.approx(
        (slowdown - 1) * t, rel=2e-2
    )
