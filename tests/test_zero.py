"""ZeRO stages 1-3 / FSDP, held to the ZeRO paper's memory formulas and alpha-beta times.

The reference setup (as in test_data_parallel): GPUs on one switch (links
100 GB/s, no latency), 100 TFLOP/s and 1 TB/s memory each, layers given by
hand, a global batch of 400, sgd in fp32 unless a test says otherwise.
Collective times come from :func:`clustersim.collectives.analytical_time`
(the ring's alpha-beta formula, itself held to R2 in test_collectives_ring);
compute times from FLOPs / FLOP/s and optimizer bytes / memory bandwidth.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import simulate
from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.errors import ScenarioError
from clustersim.model.memory import model_states
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

from .conftest import TEXTBOOK

RATE = 100e12
MEMORY_BPS = 1e12
BATCH = 400
GB = 1e9

UNIFORM = [{"name": "block", "params": 25e6, "flops": 1e9, "repeat": 4}]
"""Four layers of 25e6 parameters (100 MB of fp32 gradients), 1 GFLOP per sample forward."""
MIXED = [
    {"name": "embed", "params": 10e6, "flops": 0.2e9},
    {"name": "relu", "params": 0, "flops": 0.1e9},
    {"name": "wide", "params": 40e6, "flops": 1.5e9},
    {"name": "narrow", "params": 5e6, "flops": 0.5e9},
    {"name": "head", "params": 20e6, "flops": 0.8e9},
]
"""Layers of different sizes, one without parameters (it needs no gather)."""


def doc(
    devices: int = 4,
    *,
    stage: int | str = 3,
    prefetch: bool = True,
    layers: list[dict[str, Any]] | None = None,
    bucket: str = "100MB",
    overlap: bool = True,
    network: str = "flow",
    iterations: int = 2,
    algorithm: str = "ring",
    stragglers: list[dict[str, Any]] | None = None,
    training: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ZeRO training scenario document on a switch of ``devices`` GPUs."""
    return {
        "name": "zero-test",
        "cluster": {
            "kind": "switch",
            "devices": devices,
            "device": {"flops": "100TFLOPS", "memory_bandwidth": "1TB/s"},
            "link": {"bandwidth": "100GB/s"},
        },
        "network": {"model": network, **TEXTBOOK},
        "stragglers": stragglers or [],
        "model": {"layers": layers or UNIFORM},
        "training": {"global_batch": BATCH, "iterations": iterations, **(training or {})},
        "data_parallel": {
            "allreduce": {"algorithm": algorithm, "bucket": bucket, "overlap": overlap}
        },
        "zero": {"stage": stage, "prefetch": prefetch},
    }


def run(document: dict[str, Any]) -> Any:
    return simulate(parse_scenario(document))


def ring_s(document: dict[str, Any], op: str, nbytes: float, n: int) -> float:
    """Alpha-beta time of a ring ``op`` of ``nbytes`` (nccl-tests size) over gpu0..gpu{n-1}."""
    topology = build_topology(parse_scenario(document).cluster)
    devices = tuple(f"gpu{i}" for i in range(n))
    return analytical_time(CollectiveCall(op, devices, nbytes), topology)


def expand(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The layers with ``repeat`` unrolled."""
    return [layer for spec in layers for layer in [spec] * spec.get("repeat", 1)]


# --------------------------------------------------------------------------- memory (Z0-Z3)

PSI = 7.5e9
K = 12


@pytest.mark.parametrize(
    ("stage", "expected"), [(0, 120 * GB), (1, 31.4 * GB), (2, 16.6 * GB), (3, 1.875 * GB)]
)
def test_model_states_match_the_zero_paper_for_7_5b_on_64_gpus(stage: int, expected: float) -> None:
    """Z0-Z3: Psi = 7.5e9, mixed precision Adam, N_d = 64 (the paper's Figure 1), 0.5%."""
    states = model_states(PSI, zero_stage=stage, dp=64, precision="fp16", optimizer="adam")
    assert states.total == pytest.approx(expected, rel=0.005)


@pytest.mark.parametrize("nd", [8, 64, 1024])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_model_states_follow_the_formulas_for_any_data_parallel_degree(
    nd: int, precision: str
) -> None:
    """(2+2+K)Psi, 4Psi + K Psi/N_d, 2Psi + (2+K)Psi/N_d, (2+2+K)Psi/N_d."""
    formulas = {
        0: (2 + 2 + K) * PSI,
        1: 4 * PSI + K * PSI / nd,
        2: 2 * PSI + (2 + K) * PSI / nd,
        3: (2 + 2 + K) * PSI / nd,
    }
    for stage, expected in formulas.items():
        states = model_states(PSI, zero_stage=stage, dp=nd, precision=precision, optimizer="adam")
        assert states.total == pytest.approx(expected, rel=0.005), stage


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_simulated_memory_holds_the_sharded_model_states(n: int, stage: int) -> None:
    """summary.memory per device: ZeRO's model states of the model's parameters in bf16 Adam,
    activations = bytes per sample x samples, buffers as the strategy documents."""
    layers = [{**spec, "activations": "3MB"} for spec in MIXED]
    document = doc(n, stage=stage, layers=layers, bucket="50MB", network="analytical")
    document["training"].update(precision="bf16", optimizer="adam")
    summary = run(document).summary
    psi = sum(spec["params"] for spec in MIXED)
    shard = {0: (1, 1, 1), 1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}[stage]
    buckets = summary["buckets"]["bytes"]  # bf16, 50 MB: [head, narrow], [wide], [relu, embed]
    assert buckets == pytest.approx([2 * 25e6, 2 * 40e6, 2 * 10e6])
    gathered = {0: 0, 1: max(buckets), 2: max(buckets), 3: 2 * (40e6 + 10e6)}[stage]
    per_device = summary["memory"]["per_device"]
    assert list(per_device) == [f"gpu{i}" for i in range(n)]
    for row in per_device.values():
        assert row["weights_bytes"] == pytest.approx(2 * psi / shard[0], rel=1e-12)
        assert row["gradients_bytes"] == pytest.approx(2 * psi / shard[1], rel=1e-12)
        assert row["optimizer_states_bytes"] == pytest.approx(K * psi / shard[2], rel=1e-12)
        assert row["activations_bytes"] == pytest.approx(len(MIXED) * 3e6 * BATCH / n)
        assert row["communication_buffers_bytes"] == pytest.approx(max(buckets) + gathered)
        assert row["capacity_bytes"] == 80e9


def test_stage3_buffers_without_prefetch_hold_the_largest_layer() -> None:
    """prefetch: false gathers one layer at a time: its buffer is the largest layer + a bucket."""
    summary = run(doc(4, layers=MIXED, prefetch=False, bucket="1GB")).summary
    row = summary["memory"]["per_device"]["gpu0"]
    assert row["communication_buffers_bytes"] == pytest.approx(4 * 40e6 + 4 * 75e6)


def test_transformer_recompute_full_keeps_only_block_inputs() -> None:
    """Full recomputation keeps 2 s b h per block (Korthikanti et al. 2022, 16-bit
    activations: bf16) and makes each attention/MLP backward one forward longer; embedding
    and head are not recomputed."""
    s, h = 128, 256
    transformer = {"layers": 2, "hidden": h, "heads": 4, "seq": s, "vocab": 1000}
    base = doc(2, stage=3, network="analytical", iterations=1, training={"precision": "bf16"})
    base["model"] = {"transformer": transformer}
    runs = {}
    for mode in ("none", "full"):
        document = {**base, "training": {**base["training"], "recompute": mode}}
        runs[mode] = run(document)
    samples = BATCH / 2
    full = runs["full"].summary["memory"]["per_device"]["gpu0"]["activations_bytes"]
    none = runs["none"].summary["memory"]["per_device"]["gpu0"]["activations_bytes"]
    head_and_embedding = none - 2 * s * samples * h * (34 + 5 * 4 * s / h)
    assert full == pytest.approx(head_and_embedding + 2 * 2 * s * samples * h, rel=1e-9)
    forward = {
        r.label.split()[-1]: r.end_s - r.start_s
        for r in _computes(runs["none"])
        if r.label.startswith("fwd")
    }
    grown = 0
    for plain, again in zip(_computes(runs["none"]), _computes(runs["full"]), strict=True):
        assert plain.label == again.label
        phase, name = plain.label.split()[0], plain.label.split()[-1]
        recomputed = phase == "bwd" and name.endswith((".attention", ".mlp"))
        extra = forward[name] if recomputed else 0.0
        grown += recomputed
        assert again.end_s - again.start_s == pytest.approx(
            plain.end_s - plain.start_s + extra, rel=1e-9
        )
    assert grown == 4  # 2 blocks x (attention, mlp), one iteration


def _computes(result: Any) -> list[Any]:
    return [r for r in result.records if r.resource == "gpu0" and r.kind == "compute"]


# --------------------------------------------------------------------------- bytes on the wire


def _link_bytes(document: dict[str, Any]) -> float:
    return sum(row["bytes"] for row in run(document).links)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_stages_1_2_move_data_parallel_bytes_and_stage_3_one_and_a_half(n: int) -> None:
    """Ring reduce-scatter + all-gather = all-reduce; stage 3 gathers twice: 1.5 x."""
    plain = _link_bytes(doc(n, stage=0, layers=MIXED, bucket="30MB"))
    for stage, factor, rel in ((1, 1.0, 0.01), (2, 1.0, 0.01), (3, 1.5, 0.02)):
        for prefetch in (True, False):
            moved = _link_bytes(doc(n, stage=stage, prefetch=prefetch, layers=MIXED, bucket="30MB"))
            assert moved == pytest.approx(factor * plain, rel=rel), (stage, prefetch)


def test_summary_bytes_per_iteration_compares_with_data_parallel() -> None:
    """bytes_per_iteration counts an all-gather or reduce-scatter of S as S / 2 (half an
    all-reduce): stages 1-2 equal plain data parallel's, stage 3 is 1.5 x."""
    plain = run(doc(stage=0)).summary["communication"]["bytes_per_iteration"]
    assert plain == pytest.approx(4e8)
    for stage, factor in ((1, 1.0), (2, 1.0), (3, 1.5)):
        comm = run(doc(stage=stage)).summary["communication"]
        assert comm["bytes_per_iteration"] == pytest.approx(factor * plain)
        assert comm["reducescatter_bytes"] == pytest.approx(4e8)
        assert comm["allgather_bytes"] == pytest.approx((2 if stage == 3 else 1) * 4e8)


# --------------------------------------------------------------------------- timing


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("overlap", [True, False])
def test_stage3_without_prefetch_is_gathers_plus_compute(n: int, overlap: bool) -> None:
    """Analytical, no prefetch: sum over layers of (gather + compute), forward and backward,
    + the exposed reduce-scatter + the sgd step on params / N (1e-9)."""
    document = doc(n, layers=MIXED, prefetch=False, bucket="1GB", overlap=overlap)
    document["network"]["model"] = "analytical"
    summary = run(document).summary
    samples = BATCH / n
    total = 0.0
    for spec in expand(MIXED):
        gather = ring_s(document, "allgather", spec["params"] * 4, n) if spec["params"] else 0.0
        total += 2 * gather + 3 * spec["flops"] * samples / RATE  # forward + 2 x in backward
    psi = sum(spec["params"] for spec in MIXED)
    total += ring_s(document, "reducescatter", psi * 4, n)  # one bucket: after backward
    total += 12 * psi / n / MEMORY_BPS
    for t in summary["iteration_times_s"]:
        assert t == pytest.approx(total, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("stage", [1, 2])
def test_stages_1_2_time_backward_reduce_scatter_step_and_gather(n: int, stage: int) -> None:
    """Analytical, one bucket per layer: forward + backward + the last bucket's reduce-scatter
    (the others hide behind 2 ms backwards) + step on params / N + the 4 all-gathers, issued
    together on the workers' one communicator: they run one after another, 4 x one (1e-9)."""
    document = doc(n, stage=stage, network="analytical")
    summary = run(document).summary
    samples = BATCH / n
    expected = (
        4 * 3 * 1e9 * samples / RATE
        + ring_s(document, "reducescatter", 1e8, n)
        + 12 * 1e8 / n / MEMORY_BPS
        + 4 * ring_s(document, "allgather", 1e8, n)
    )
    for t in summary["iteration_times_s"]:
        assert t == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("flops", [1e8, 1e9, 1e10])
@pytest.mark.parametrize("network", ["flow", "analytical"])
def test_prefetch_is_never_slower(flops: float, network: str) -> None:
    """Gathering the next layer during the current one can only help, at any compute/gather ratio."""
    layers = [{**spec, "flops": spec["flops"] * flops / 1e9} for spec in MIXED]
    times = {}
    for prefetch in (True, False):
        document = doc(4, layers=layers, prefetch=prefetch, bucket="30MB", network=network)
        times[prefetch] = run(document).summary["iteration_time_s"]
    assert times[True] <= times[False] * (1 + 1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_prefetch_hides_every_gather_but_the_first_when_compute_dominates(n: int) -> None:
    """Compute >> gather: iteration = first gather + forward + backward + last bucket's
    reduce-scatter + step (analytical: concurrent collectives priced alone)."""
    layers = [{**spec, "flops": spec["flops"] * 100} for spec in MIXED]
    document = doc(n, layers=layers, network="analytical", bucket="1MB")
    summary = run(document).summary
    samples = BATCH / n
    psi = sum(spec["params"] for spec in MIXED)
    compute = sum(3 * spec["flops"] * samples / RATE for spec in layers)
    expected = (
        ring_s(document, "allgather", 10e6 * 4, n)  # embed: the first layer
        + compute
        + ring_s(document, "reducescatter", 10e6 * 4, n)  # embed's bucket ends backward
        + 12 * psi / n / MEMORY_BPS
    )
    for t in summary["iteration_times_s"]:
        assert t == pytest.approx(expected, rel=1e-9)


def test_fsdp_is_stage_3() -> None:
    """zero.stage: fsdp runs exactly as stage 3."""
    a = run(doc(stage="fsdp", layers=MIXED)).summary
    b = run(doc(stage=3, layers=MIXED)).summary
    assert a["iteration_times_s"] == b["iteration_times_s"]
    assert a["zero"] == {"stage": 3, "prefetch": True}


def test_records_name_collectives_by_layer_and_bucket() -> None:
    """Stage 3 gathers are labelled by phase and layer; reduce-scatters by bucket."""
    result = run(doc(2, layers=MIXED, bucket="1GB", iterations=1))
    labels = [r.label for r in result.records if r.resource == "gpu0" and r.kind != "compute"]
    gathers = [x for x in dict.fromkeys(labels) if x.startswith("allgather")]
    assert gathers == [
        "allgather fwd embed",
        "allgather fwd wide",
        "allgather fwd narrow",
        "allgather fwd head",
        "allgather bwd head",
        "allgather bwd narrow",
        "allgather bwd wide",
        "allgather bwd embed",
    ]
    assert "reducescatter bucket0" in labels
    computes = [r.label for r in _computes(result)]
    assert computes[-1] == "optimizer"


# --------------------------------------------------------------------------- stragglers


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_a_straggler_delays_every_collective(stage: int) -> None:
    """gpu1 computes 2x slower: no collective starts before gpu1 asked for it, and the
    iteration is the no-straggler formula with gpu1's doubled compute."""
    slow = [{"devices": "gpu1", "slowdown": 2}]
    document = doc(4, stage=stage, prefetch=False, layers=MIXED, bucket="1GB", stragglers=slow)
    document["network"]["model"] = "analytical"
    result = run(document)
    fast = run({**document, "stragglers": []}).summary["iteration_times_s"][0]
    compute = sum(3 * spec["flops"] * BATCH / 4 / RATE for spec in expand(MIXED))
    step = 12 * sum(spec["params"] for spec in MIXED) / 4 / MEMORY_BPS
    assert result.summary["iteration_times_s"][0] == pytest.approx(fast + compute + step, rel=1e-9)
    slow_computes = [r for r in result.records if r.resource == "gpu1" and r.kind == "compute"]
    collectives = [r for r in result.records if r.resource == "gpu0" and r.kind == "collective"]
    assert len(collectives) == (9 if stage == 3 else 2) * 2  # 8 gathers + 1 bucket; 1 + 1
    for record in collectives:
        before = [r.end_s for r in slow_computes if r.end_s <= record.start_s + 1e-15]
        if record.label != "allgather fwd embed":  # the first gather of an iteration
            # gpu1 asked at the end of its last compute before the collective: it started then
            assert record.start_s == pytest.approx(max(before), rel=1e-12)


# --------------------------------------------------------------------------- errors


def test_zero_with_parameter_servers_is_an_error() -> None:
    """ZeRO shards over all-reduce ranks; sync: ps with a zero stage is refused at its key."""
    document = doc()
    document["data_parallel"]["sync"] = "ps"
    with pytest.raises(ScenarioError) as info:
        run(document)
    problem = info.value.problems[0]
    assert problem.path == "data_parallel.sync"
    assert "allreduce" in problem.allowed


@pytest.mark.parametrize("algorithm", ["tree", "recursive_doubling"])
@pytest.mark.parametrize("stage", [1, 3])
def test_an_algorithm_without_reduce_scatter_or_all_gather_is_an_error(
    algorithm: str, stage: int
) -> None:
    """tree and recursive_doubling only all-reduce: the error names the key and what would do."""
    with pytest.raises(ScenarioError) as info:
        run(doc(stage=stage, algorithm=algorithm))
    problem = info.value.problems[0]
    assert problem.path == "data_parallel.allreduce.algorithm"
    assert problem.message == (
        f"zero stage {stage} runs reducescatter and allgather: "
        f"{algorithm} does not implement reducescatter"
    )
    usable = problem.allowed.removeprefix("for reducescatter here: ").split(", ")
    assert sorted(usable) == ["auto", "direct", "halving_doubling", "ring", "root"]


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("micro_batch", [25, 50, 100])
def test_gradient_accumulation_stores_one_micro_batch_of_activations(
    stage: int, micro_batch: int
) -> None:
    """With ``training.micro_batch`` a worker runs its samples m micro-batches at a time, one
    after another: it stores the activations of one micro-batch (micro_batch samples), not
    of its whole share; the model states do not change."""
    from clustersim import api
    from clustersim.scenario import parse_scenario

    def memory(training: dict[str, Any]) -> Any:
        document = doc(4, stage=stage, training=training)
        return api.memory_block(api.prepare(parse_scenario(document))).per_device["gpu0"]

    whole = memory({})  # BATCH / 4 = 100 samples per worker at once
    accumulated = memory({"micro_batch": micro_batch})
    assert accumulated.activations_bytes == pytest.approx(
        whole.activations_bytes * micro_batch / (BATCH / 4), rel=1e-12
    )
    assert accumulated.weights_bytes == whole.weights_bytes
    assert accumulated.optimizer_states_bytes == whole.optimizer_states_bytes
