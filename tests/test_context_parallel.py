"""Context parallelism (``parallelism.cp``): ring attention in the 3D hybrid.

Held to Liu et al. 2023 ("Ring Attention with Blockwise Transformers", section 3):
each of the cp - 1 ring steps of a layer moves one K/V block, ``2 b (s/cp) h_kv``
values, and takes max(block compute, block transfer); Megatron-Core's context
parallelism splits the sequence (activations 1/cp) and reduces gradients over dp x cp.
The reference cluster is test_hybrid's: 100 TFLOP/s GPUs, an NVSwitch whose links
(1 us each) have the bandwidth given.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.errors import ScenarioError

from .test_hybrid import RATE, SHAPE, doc, run

BYTES = 2  # bf16


def step_bytes(b: int, s: int, cp: int, kv_hidden: int, tp: int = 1) -> float:
    """One ring step of one GPU: K and V of its s/cp tokens (split over tp by heads)."""
    return 2 * b * (s / cp) * kv_hidden * BYTES / tp


@pytest.mark.parametrize("cp", [2, 4, 8])
@pytest.mark.parametrize("seq, kv_heads", [(256, None), (1024, 2)])
def test_ring_bytes_per_layer_are_cp_minus_one_kv_blocks(
    cp: int, seq: int, kv_heads: int | None
) -> None:
    """Per attention layer and micro-batch a GPU sends (cp - 1) K/V blocks forward and twice
    that backward (K/V and dK/dV), as real flows on the ring."""
    shape = {**SHAPE, "seq": seq, "kv_heads": kv_heads}
    result = run(doc(cp=cp, gpus=cp, batch=2, micro_batch=1, shape=shape))
    kv_hidden = SHAPE["hidden"] // SHAPE["heads"] * (kv_heads or SHAPE["heads"])
    step = step_bytes(1, seq, cp, kv_hidden)
    ring = result.summary["context_parallel"]
    assert ring["step_bytes"] == pytest.approx(step, rel=1e-12)
    assert ring["bytes_per_layer_forward"] == pytest.approx((cp - 1) * step, rel=1e-12)
    assert ring["bytes_per_layer_backward"] == pytest.approx(2 * (cp - 1) * step, rel=1e-12)
    sent = sum(
        r.bytes
        for r in result.records
        if r.kind == "transfer" and r.label == "kv ring" and r.resource.endswith("gpu0")
    )
    layers, micro_batches = SHAPE["layers"], 2
    assert sent == pytest.approx(micro_batches * layers * 3 * (cp - 1) * step, rel=1e-12)


def _forward_window(result: Any) -> float:
    """Seconds of micro-batch 0's forward on gpu0 (ring phase, then the rest of the op)."""
    rows = [
        r
        for r in result.records
        if r.kind == "compute"
        and r.label == "fwd"
        and r.resource.endswith("gpu0")
        and r.microbatch == 0
        and r.iteration == 0
    ]
    return max(r.end_s for r in rows) - min(r.start_s for r in rows)


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("nvlink_Bps, bound", [(1000e9, "compute"), (5e9, "transfer")])
def test_ring_step_takes_the_longer_of_compute_and_transfer(
    cp: int, nvlink_Bps: float, bound: str
) -> None:
    """Liu et al. 2023: T_layer = (cp - 1) max(c_block, t_step) + c_block.  Fast links hide
    the ring (the forward takes its FLOPs / cp); slow links expose (cp - 1) steps."""
    s, h, v, layers = 8192, SHAPE["hidden"], SHAPE["vocab"], SHAPE["layers"]
    shape = {**SHAPE, "seq": s}
    nvlink = f"{nvlink_Bps / 1e9:g}GB/s"
    result = run(doc(cp=cp, gpus=cp, batch=1, micro_batch=1, shape=shape, nvlink=nvlink))
    # Megatron-LM: forward 24 s h^2 + 4 s^2 h per block, + 2 s h V for the logits
    forward = layers * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * v
    c_block = 4 * s * s * h / cp**2 / RATE
    t_step = step_bytes(1, s, cp, h) / nvlink_Bps
    latency = 2e-6  # GPU -> NVSwitch -> GPU
    steps = layers * (cp - 1)
    assert (t_step < c_block) == (bound == "compute")
    ring = max(steps * c_block, latency + steps * t_step)
    expected = ring + forward / cp / RATE - steps * c_block
    assert _forward_window(result) == pytest.approx(expected, rel=1e-9)
    if bound == "compute":
        assert _forward_window(result) == pytest.approx(forward / cp / RATE, rel=1e-9)
    summary = result.summary["context_parallel"]
    assert summary["compute_step_s"] == pytest.approx(c_block, rel=1e-12)
    assert summary["transfer_step_s"] == pytest.approx(t_step, rel=1e-12)


@pytest.mark.parametrize("zero", [0, 1])
def test_activation_memory_per_gpu_is_one_over_cp(zero: int) -> None:
    """Each GPU holds s/cp of every sample: activations 1/cp; ZeRO-1 shards the optimizer
    states over dp x cp (Megatron's distributed optimizer)."""
    rows = {}
    for cp in (1, 2, 4):
        summary = run(doc(cp=cp, dp=1, gpus=cp, batch=4, zero=zero, shape={**SHAPE, "seq": 1024}))
        rows[cp] = summary.summary["memory"]["per_device"]["rack0/node0/gpu0"]
        peak = summary.summary["activation_memory"]["0"]["peak_bytes"]
        assert rows[cp]["activations_bytes"] == pytest.approx(peak, rel=1e-12)
    for cp in (2, 4):
        assert rows[cp]["activations_bytes"] * cp == pytest.approx(
            rows[1]["activations_bytes"], rel=1e-12
        )
        ratio = rows[cp]["optimizer_states_bytes"] / rows[1]["optimizer_states_bytes"]
        assert ratio == pytest.approx(1 / cp if zero else 1.0, rel=1e-12)


def test_cp_gradients_are_reduced_over_dp_times_cp() -> None:
    """Megatron reduces gradients over the dp x cp group: with dp 2 and cp 2 one ring
    all-reduce over the four GPUs, 2 (n - 1) = 6 steps of S / 4 bytes each (ZeRO 0: the
    distributed optimizer would reduce-scatter them)."""
    result = run(doc(cp=2, dp=2, gpus=4, batch=4, zero=0))
    size = result.summary["communication"]["allreduce_bytes"][0]
    rows = result.records
    sends = [r for r in rows if r.label.startswith("allreduce stage0") and r.kind == "transfer"]
    assert {r.src for r in sends} == {f"rack0/node0/gpu{i}" for i in range(4)}
    assert sorted({r.op for r in sends}) == [f"step{i}" for i in range(6)]
    assert all(r.bytes == pytest.approx(size / 4, rel=1e-12) for r in sends)


def test_cp_one_keeps_the_placement_and_order() -> None:
    """cp left out of ``order`` comes after tp; with cp = 1 nothing moves."""
    a = run(doc(tp=2, pp=2, dp=2, batch=4)).summary
    b = run(doc(tp=2, pp=2, dp=2, batch=4, cp=1, order=["tp", "cp", "pp", "dp"])).summary
    assert a["tensor_groups"] == b["tensor_groups"]
    assert "cp" not in a and "context_parallel" not in a


def test_cp_after_tp_places_each_ring_across_tensor_groups() -> None:
    """Megatron's tp-cp-pp-dp: with tp 2, cp 2 the stage group is gpu0-1 (cp rank 0) and
    gpu2-3 (cp rank 1); tensor rank 0's ring is gpu0 <-> gpu2."""
    result = run(doc(tp=2, cp=2, pp=2, gpus=8, batch=2))
    groups = result.summary["tensor_groups"][0]
    assert [d.rsplit("/", 1)[1] for d in groups[0]] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    ring = {
        (r.src.rsplit("/", 1)[1], r.dst.rsplit("/", 1)[1])
        for r in result.records
        if r.label == "kv ring"
    }
    assert ("gpu0", "gpu2") in ring and ("gpu2", "gpu0") in ring and ("gpu1", "gpu3") in ring


@pytest.mark.parametrize(
    "changes, path, words",
    [
        ({"cp": 4, "shape": {**SHAPE, "seq": 260}}, "parallelism.cp", "2 x cp = 8"),
        ({"cp": 3, "shape": {**SHAPE, "seq": 384}}, "parallelism", "does not divide the 8 workers"),
        ({"cp": 2, "dp": 3}, "parallelism.dp", "dp 3 x tp 1 x cp 2 x pp 1 = 6"),
        ({"cp": 2, "zero": 2}, "zero.stage", "ZeRO-2/3 with context parallelism"),
        ({"cp": 2, "order": ["tp", "cp", "pp"]}, "parallelism.order", "not an order"),
    ],
)
def test_impossible_context_parallel_is_an_error(
    changes: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(**changes))
    assert info.value.problems[0].path == path
    assert words in str(info.value)


def test_cp_needs_a_transformer() -> None:
    document = doc(cp=2)
    document["model"] = {"layers": [{"name": "fc", "params": 1e6, "flops": 1e9}]}
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == "parallelism.cp"
    assert "transformer" in str(info.value)
