"""3D hybrid parallelism: placement, Megatron-LM tensor parallelism, memory, FLOPs.

Reference setup: nodes of 8 GPUs at 100 TFLOP/s on an NVSwitch (each GPU
100 GB/s to the switch, 1 us per link) and a small GPT-like transformer
(f = 4h, tied head, learned positions).  Expected values come from the
formulas of the papers: Megatron-LM's 72/96 B s l h^2 (1 + s/6h + V/16lh)
FLOPs, two all-reduces of b s h per block per pass, the ring all-reduce cost
2 (t-1) (alpha + S / (t B)), Korthikanti et al.'s activation bytes and the
ZeRO model states.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import simulate
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario

from .conftest import TEXTBOOK

RATE = 100e12
NVLINK_BPS = 100e9
LINK_LATENCY = 1e-6
SHAPE = {"layers": 4, "hidden": 512, "heads": 8, "seq": 256, "vocab": 1024}


def doc(
    *,
    tp: int = 1,
    pp: int = 1,
    dp: int | None = None,
    nodes: int = 1,
    gpus: int = 8,
    batch: int = 8,
    micro_batch: int = 1,
    shape: dict[str, Any] | None = None,
    zero: int | None = None,
    recompute: str | None = None,
    memory: str = "80GB",
    nvlink: str = "100GB/s",
    nic: str = "1000GB/s",
    **parallelism: Any,
) -> dict[str, Any]:
    """A hybrid training scenario on ``nodes`` nodes of ``gpus`` GPUs (one rack)."""
    par: dict[str, Any] = {"tp": tp, "pp": pp, "tp_algorithm": "ring", **parallelism}
    if dp is not None:
        par["dp"] = dp
    training: dict[str, Any] = {
        "global_batch": batch,
        "micro_batch": micro_batch,
        "iterations": 1,
        "precision": "bf16",
        "optimizer": "adam",
    }
    if recompute is not None:
        training["recompute"] = recompute
    document: dict[str, Any] = {
        "name": "hybrid-test",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": gpus,
                # flat compute: these tests hold the tensor-parallel collectives, with the
                # compute priced as FLOPs / RATE (the roofline is tests/test_compute.py's)
                "gpu": {
                    "flops": "100TFLOPS",
                    "memory": memory,
                    "memory_bandwidth": "1000TB/s",
                    "compute": {"model": "flat"},
                },
                "pcie": {"bandwidth": "1000GB/s", "latency": "0s"},
                "nvlink": {"bandwidth": nvlink, "latency": "1us"},
                "nic": {"bandwidth": nic, "latency": "0s"},
            },
        },
        "model": {"transformer": dict(shape or SHAPE)},
        "training": training,
        "parallelism": par,
        "pipeline": {"schedule": "1f1b"},
        # the textbook's collectives: the formulas these tests hold
        "data_parallel": {"allreduce": {"algorithm": "ring"}},
        "network": dict(TEXTBOOK),
    }
    if zero is not None:
        document["zero"] = {"stage": zero}
    return document


def run(document: dict[str, Any]) -> Any:
    return simulate(parse_scenario(document))


def megatron_flops(batch: int, s: int, layers: int, h: int, v: int, factor: int) -> float:
    """Narayanan et al. 2021: factor B s l h^2 (1 + s/6h + V/16lh); 96 with recomputation, 72 without."""
    return factor * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def training_flops(batch: int, s: int, layers: int, h: int, v: int, recompute: bool) -> float:
    """What the layers compute: blocks 72 (96 with recomputation) B s l h^2 (1 + s/6h) and the
    LM head 6 B s h V (2 forward + 4 backward, never recomputed).

    With recomputation this is exactly Megatron-LM's 96 formula.  Without it, Megatron's 72
    formula scales the head term by 3/4 too (4.5 B s h V), so it is low by 1.5 B s h V.
    """
    blocks = (96 if recompute else 72) * batch * s * layers * h * h * (1 + s / (6 * h))
    return blocks + 6 * batch * s * h * v


def ring_allreduce_s(t: int, nbytes: float) -> float:
    """Ring all-reduce over an NVSwitch: 2 (t-1) steps of alpha + S/t bytes, alpha = 2 links."""
    return 2 * (t - 1) * (2 * LINK_LATENCY + nbytes / t / NVLINK_BPS)


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize(
    "order, expected",
    [
        (
            ["tp", "pp", "dp"],
            [[["gpu0", "gpu1"], ["gpu2", "gpu3"]], [["gpu4", "gpu5"], ["gpu6", "gpu7"]]],
        ),
        (
            ["tp", "dp", "pp"],
            [[["gpu0", "gpu1"], ["gpu4", "gpu5"]], [["gpu2", "gpu3"], ["gpu6", "gpu7"]]],
        ),
        (
            ["pp", "tp", "dp"],
            [[["gpu0", "gpu2"], ["gpu1", "gpu3"]], [["gpu4", "gpu6"], ["gpu5", "gpu7"]]],
        ),
    ],
)
def test_order_maps_ranks_innermost_first(order: list[str], expected: list[Any]) -> None:
    summary = run(doc(tp=2, pp=2, dp=2, order=order, batch=4)).summary
    groups = [[[d.rsplit("/", 1)[1] for d in g] for g in r] for r in summary["tensor_groups"]]
    assert groups == expected
    assert (summary["dp"], summary["tp"], summary["pp"]) == (2, 2, 2)


@pytest.mark.parametrize(
    "changes, path, words",
    [
        ({"tp": 2, "pp": 2, "dp": 3}, "parallelism.dp", "= 12, but there are 8 workers"),
        ({"tp": 4, "gpus": 6}, "parallelism.tp", "does not divide the 6 workers"),
        (
            {"tp": 16, "nodes": 2, "shape": {**SHAPE, "heads": 16}},
            "parallelism.tp",
            "larger than a node's 8 GPUs",
        ),
        (
            {"tp": 4, "pp": 2, "order": ["pp", "tp", "dp"], "nodes": 2, "gpus": 4},
            "parallelism.tp",
            "spans nodes",
        ),
        ({"pp": 5, "dp": 1, "gpus": 5}, "parallelism.pp", "4 transformer layers, fewer than the 5"),
        ({"pp": 8, "batch": 4}, "training.micro_batch", "4 micro-batches are fewer than the 8"),
        ({"tp": 16, "gpus": 16}, "parallelism.tp", "does not divide the model's 8 attention heads"),
        ({"pp": 2, "zero": 2}, "zero.stage", "pipeline parallelism"),
        ({"micro_batch": 3}, "training.micro_batch", "do not divide"),
    ],
)
def test_impossible_combinations_are_errors(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(**changes))
    assert info.value.problems[0].path == path
    assert words in str(info.value)


def test_cross_node_tp_allowed_when_asked() -> None:
    shape = {**SHAPE, "heads": 16}
    summary = run(doc(tp=16, nodes=2, batch=4, shape=shape, allow_cross_node_tp=True)).summary
    assert summary["tp"] == 16 and len(summary["tensor_groups"][0][0]) == 16


def test_tp_needs_a_transformer() -> None:
    document = doc(tp=2)
    document["model"] = {"layers": [{"name": "fc", "params": 1e6, "flops": 1e9}]}
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == "parallelism.tp"


def test_megatron_stage_split_puts_embedding_first_and_head_last() -> None:
    summary = run(doc(pp=4, dp=2, shape={**SHAPE, "layers": 8})).summary
    names = summary["stage_layer_names"]
    assert names[0] == ["embedding", "layer1.mlp"]
    assert names[-1] == ["layer6.attention", "head"]
    assert summary["stage_layers"] == [5, 4, 4, 5]


# --------------------------------------------------------------------------- tensor parallel


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_tp_iteration_is_split_compute_plus_ring_allreduces(t: int, b: int) -> None:
    """pp 1, one replica: m micro-batches of compute / t, 4 all-reduces of b s h per block each."""
    m = 2
    document = doc(tp=t, dp=1, gpus=t, batch=m * b, micro_batch=b, sequence_parallel=False)
    summary = run(document).summary
    layers, h, s, v = SHAPE["layers"], SHAPE["hidden"], SHAPE["seq"], SHAPE["vocab"]
    compute = training_flops(m * b, s, layers, h, v, recompute=False) / t / RATE
    per_allreduce = ring_allreduce_s(t, b * s * h * 2)
    comm = m * layers * 4 * per_allreduce
    params = summary["model"]["params"]
    optimizer = params / t * 28 / 1000e12
    assert summary["iteration_time_s"] == pytest.approx(compute + comm + optimizer, rel=1e-9)
    tensor = summary["communication"]["tensor_parallel"]
    assert tensor["bytes_per_block_per_pass"] == 2 * b * s * h * 2
    assert tensor["ops"] == ["allreduce"]


@pytest.mark.parametrize("t", [2, 4, 8])
def test_sequence_parallel_moves_the_same_bytes(t: int) -> None:
    """Reduce-scatter + all-gather of b s h each cost one ring all-reduce of b s h."""
    plain = run(doc(tp=t, dp=1, gpus=t, batch=2, sequence_parallel=False)).summary
    sp = run(doc(tp=t, dp=1, gpus=t, batch=2)).summary  # on by default with tp > 1
    assert sp["communication"]["tensor_parallel"]["ops"] == ["reducescatter", "allgather"]
    assert (
        sp["communication"]["tensor_parallel"]["bytes_per_layer_per_pass"]
        == 2 * plain["communication"]["tensor_parallel"]["bytes_per_layer_per_pass"]
    )
    assert sp["iteration_time_s"] == pytest.approx(plain["iteration_time_s"], rel=1e-9)


def test_full_recompute_repeats_the_forward_allreduces() -> None:
    t, b, m = 4, 1, 2
    plain = run(doc(tp=t, dp=1, gpus=t, batch=m)).summary
    full = run(doc(tp=t, dp=1, gpus=t, batch=m, recompute="full")).summary
    layers, h, s, v = SHAPE["layers"], SHAPE["hidden"], SHAPE["seq"], SHAPE["vocab"]
    extra_compute = (
        (
            training_flops(m, s, layers, h, v, recompute=True)
            - training_flops(m, s, layers, h, v, recompute=False)
        )
        / t
        / RATE
    )
    extra_comm = m * layers * 2 * ring_allreduce_s(t, b * s * h * 2)
    assert full["iteration_time_s"] - plain["iteration_time_s"] == pytest.approx(
        extra_compute + extra_comm, rel=1e-9
    )


@pytest.mark.parametrize("recompute, factor", [("none", 72), ("full", 96)])
@pytest.mark.parametrize("shape", [SHAPE, {**SHAPE, "layers": 8, "hidden": 1024, "seq": 512}])
def test_flops_per_iteration_is_megatrons_formula(recompute: str, factor: int, shape: dict) -> None:
    summary = run(doc(pp=2, tp=2, dp=2, batch=8, shape=shape, recompute=recompute)).summary
    layers, h, s, v = shape["layers"], shape["hidden"], shape["seq"], shape["vocab"]
    assert summary["hardware_flops_per_iteration"] == pytest.approx(
        training_flops(8, s, layers, h, v, recompute=recompute == "full"), rel=1e-12
    )
    if factor == 96:  # exactly Megatron-LM's formula with recomputation
        assert summary["hardware_flops_per_iteration"] == pytest.approx(
            megatron_flops(8, s, layers, h, v, 96), rel=1e-12
        )
    assert summary["model_flops_per_iteration"] == pytest.approx(
        training_flops(8, s, layers, h, v, recompute=False), rel=1e-12
    )
    # Megatron's 72 formula counts the head at 3/4: within 1.5 B s h V of ours.
    gap = summary["model_flops_per_iteration"] - megatron_flops(8, s, layers, h, v, 72)
    assert gap == pytest.approx(1.5 * 8 * s * h * v, rel=1e-9)
    expected = summary["hardware_flops_per_iteration"] / summary["iteration_time_s"] / 8 / 1e12
    assert summary["tflops_per_gpu"] == pytest.approx(expected, rel=1e-12)


def test_pipeline_transfers_split_over_the_tensor_group() -> None:
    """Each of the t ranks sends 1/t of the b s h boundary tensor to its peer."""
    t, b = 4, 2
    result = run(doc(tp=t, pp=2, dp=1, batch=4, micro_batch=b))
    sends = [r for r in result.records if r.kind == "transfer" and r.label == "activation"]
    s, h = SHAPE["seq"], SHAPE["hidden"]
    assert {r.bytes for r in sends} == {b * s * h * 2 / t}
    assert len(sends) == t * 2  # two micro-batches
    pairs = {(r.src.rsplit("/", 1)[1], r.dst.rsplit("/", 1)[1]) for r in sends}
    assert pairs == {(f"gpu{i}", f"gpu{i + t}") for i in range(t)}


# --------------------------------------------------------------------------- memory


def korthikanti_layer(s: int, b: int, h: int, a: int, t: int, sp: bool = False) -> float:
    """Bytes of one block on one GPU: sbh(10 + 24/t + 5as/ht), or sbh(34/t + 5as/ht) with SP."""
    if sp:
        return s * b * h * (34 / t + 5 * a * s / (h * t))
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("sp", [False, True])
def test_first_stage_holds_p_microbatches_of_its_layers(p: int, t: int, sp: bool) -> None:
    """Korthikanti et al.: with 1F1B the first stage stores p micro-batches of l/p layers,
    so its block activations are those of all l layers of one micro-batch, whatever p."""
    shape = {**SHAPE, "layers": 8}
    summary = run(
        doc(pp=p, tp=t, dp=1, gpus=p * t, batch=8, shape=shape, sequence_parallel=sp)
    ).summary
    s, h, a = SHAPE["seq"], SHAPE["hidden"], SHAPE["heads"]
    blocks = 8 * korthikanti_layer(s, 1, h, a, t, sp)
    embedding = s * h / (t if sp else 1)  # dropout mask of the embedding output
    expected = blocks + p * embedding
    if p == 1:
        expected += 2 * s * h / (t if sp else 1) + 4 * s * SHAPE["vocab"] / t  # the head
    assert summary["activation_memory"]["0"]["peak_bytes"] == pytest.approx(expected, rel=1e-12)
    assert summary["activation_memory"]["0"]["peak_microbatches"] == p
    first = summary["tensor_groups"][0][0][0]
    assert summary["memory"]["per_device"][first]["activations_bytes"] == pytest.approx(
        expected, rel=1e-12
    )


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("t, p, d", [(2, 2, 2), (4, 1, 2), (1, 2, 4)])
def test_model_states_divide_by_tp_and_zero_shards_over_dp(
    zero: int, t: int, p: int, d: int
) -> None:
    """bf16 weights and Megatron-LM's fp32 main gradients (2 and 4 bytes) divide by t with
    the stage's parameters; ZeRO-1 (the distributed optimizer) shards K = 12 over dp."""
    summary = run(doc(tp=t, pp=p, dp=d, batch=8, zero=zero)).summary
    for s in range(p):
        device = summary["tensor_groups"][0][s][0]
        row = summary["memory"]["per_device"][device]
        params = row["weights_bytes"] / 2  # bf16
        assert row["gradients_bytes"] == params * 4  # fp32 main gradients, never sharded
        assert row["optimizer_states_bytes"] == pytest.approx(params * 12 / (d if zero else 1))
    total = sum(
        summary["memory"]["per_device"][summary["tensor_groups"][0][s][0]]["weights_bytes"] / 2
        for s in range(p)
    )
    assert total * t == pytest.approx(summary["model"]["params"], rel=1e-12)


def test_zero1_syncs_by_reduce_scatter_and_all_gather() -> None:
    result = run(doc(tp=2, pp=2, dp=2, batch=8, zero=1))
    labels = {" ".join(r.label.split()[:2]) for r in result.records if r.kind != "compute"}
    assert {"reducescatter stage0", "allgather stage1"} <= labels
    assert "allreduce stage0" not in labels


def test_memory_over_capacity_is_marked_warned_and_refused_when_strict(
    tmp_path: Any, capsys: Any
) -> None:
    document = doc(tp=2, pp=2, dp=2, batch=8, memory="10MB")
    summary = run(document).summary
    assert summary["memory"]["fits"] is False
    assert summary["memory"]["devices_over_capacity"] == 8
    with pytest.raises(ScenarioError, match="does not fit in device memory"):
        simulate(parse_scenario(document), strict_memory=True)
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    assert "does not fit in device memory" in capsys.readouterr().err
    assert main(["run", str(path), "-o", str(tmp_path / "out2"), "--strict-memory"]) == 2
    assert not (tmp_path / "out2").exists()


def test_static_memory_plan_matches_the_simulated_activation_peaks() -> None:
    summary = run(doc(tp=2, pp=4, dp=1, batch=8, shape={**SHAPE, "layers": 8})).summary
    for s in range(4):
        device = summary["tensor_groups"][0][s][0]
        assert summary["memory"]["per_device"][device]["activations_bytes"] == pytest.approx(
            summary["activation_memory"][str(s)]["peak_bytes"], rel=1e-12
        )


@pytest.mark.parametrize("t, p, d", [(2, 2, 2), (1, 2, 4), (4, 1, 2)])
@pytest.mark.parametrize("zero", [0, 1])
def test_one_replica_stands_for_all_when_priced_analytically(
    t: int, p: int, d: int, zero: int
) -> None:
    """Identical replicas, analytical network: simulating replica 0 gives the same iteration."""
    full = doc(tp=t, pp=p, dp=d, batch=8, zero=zero, nodes=2, gpus=4, nic="10GB/s")
    full["network"] = {**full["network"], "model": "analytical"}
    one = {**full, "parallelism": {**full["parallelism"], "simulate_replicas": "one"}}
    a, b = run(full).summary, run(one).summary
    assert b["simulated_replicas"] == 1 and a["simulated_replicas"] == d
    assert b["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=1e-12)
    assert b["tflops_per_gpu"] == pytest.approx(a["tflops_per_gpu"], rel=1e-12)
    assert b["memory"] == a["memory"]


def test_one_replica_per_class_of_stragglers() -> None:
    """Stragglers no longer refuse one replica: each class of alike replicas plays one
    (tests/test_replica_classes.py holds it to every replica)."""
    document = doc(tp=2, pp=2, dp=2, batch=8, simulate_replicas="one")
    plain = run(document).summary
    document["stragglers"] = [{"devices": "*/gpu0", "slowdown": 2}]
    slow = run(document).summary
    assert slow["iteration_time_s"] > plain["iteration_time_s"]
    document["stragglers"] = [{"links": "*", "bandwidth_factor": 0.5}]
    assert run(document).summary["iteration_time_s"] > plain["iteration_time_s"]


@pytest.mark.parametrize("zero", [None, 1, 3])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_data_parallel_and_zero_report_the_same_flops(zero: int | None, recompute: str) -> None:
    """Plain data parallel and ZeRO count FLOPs as the hybrid does (Megatron's formula)."""
    document = doc(batch=8, recompute=recompute, zero=zero)
    del document["pipeline"], document["parallelism"], document["training"]["micro_batch"]
    summary = run(document).summary
    assert summary["workload"] == ("zero" if zero else "data_parallel")
    layers, h, s, v = SHAPE["layers"], SHAPE["hidden"], SHAPE["seq"], SHAPE["vocab"]
    expected = training_flops(8, s, layers, h, v, recompute=recompute == "full")
    assert summary["hardware_flops_per_iteration"] == pytest.approx(expected, rel=1e-12)
    rate = expected / summary["iteration_time_s"] / 8 / 1e12
    assert summary["tflops_per_gpu"] == pytest.approx(rate, rel=1e-12)


@pytest.mark.parametrize("t, d", [(2, 2), (4, 2), (4, 4), (8, 2)])
def test_analytical_dp_sync_shares_the_nic_like_flows(t: int, d: int) -> None:
    """The t data-parallel rings of a stage (one per tensor rank) all cross each node's NIC:
    flows share it t ways, and the analytical price charges each ring t times its bytes."""
    shape = {**SHAPE, "layers": 8, "hidden": 1024, "heads": 8}
    flow = doc(tp=t, dp=d, nodes=d, gpus=t, batch=2 * d, shape=shape, nic="10GB/s")
    analytical = {**flow, "network": {**flow["network"], "model": "analytical"}}
    a, b = run(flow).summary, run(analytical).summary
    assert b["communication"]["dp_link_sharing"] == [t]
    assert b["iteration_time_s"] == pytest.approx(a["iteration_time_s"], rel=0.02)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_stage_link_sharing_routes_alike_stages_once(tp: int, monkeypatch) -> None:
    """The data-parallel link sharing of each stage is what routing its own rings gives;
    stages whose groups sit alike (node n of every rack) are routed once per orbit, and
    stages that do not (a stage spread over other nodes) are routed on their own."""
    from pathlib import Path

    from clustersim.collectives import CollectiveCall
    from clustersim.scenario import load_scenario
    from clustersim.strategies.hybrid import accounting
    from clustersim.topology import build_topology

    cluster = Path(__file__).parent.parent / "scenarios" / "clusters" / "three_tier_pods.yaml"
    topology = build_topology(load_scenario(cluster).cluster)
    racks = [f"pod{p}/rack{r}" for p in range(2) for r in range(2)]

    def stage(nodes: list[str]) -> list[CollectiveCall]:
        return [
            CollectiveCall("allreduce", tuple(f"{n}/gpu{g}" for n in nodes), 1e6) for g in range(tp)
        ]

    calls = {n: stage([f"{rack}/node{n}" for rack in racks]) for n in range(2)}
    calls[2] = stage(
        ["pod0/rack0/node0", "pod0/rack0/node1", "pod1/rack0/node0", "pod0/rack1/node1"]
    )
    want = {s: accounting.link_sharing(topology, c) for s, c in calls.items()}
    routed = []
    plain = accounting.link_sharing
    monkeypatch.setattr(accounting, "link_sharing", lambda t, c: routed.append(c) or plain(t, c))
    assert accounting.stage_link_sharing(topology, calls) == want
    assert want[0] == want[1] == tp
    assert len(routed) == (3 if tp == 1 else 2)  # one group: routed alone, no orbit asked
