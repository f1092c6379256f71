"""FlashAttention: the fused attention kernel, its activations and its time.

Sources: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", Table 2 (a block keeps s b h (34 + 5 a s / h) bytes, the 5 a s / h term being the
softmax output, its dropout mask and the dropout output); Dao et al. 2022, "FlashAttention"
(the fused kernel stores none of the s x s scores, only the output and the softmax
statistics, and its Figure 1 measures up to 7.6x on GPT-2's attention on an A100) and Dao
2023, "FlashAttention-2", Section 4.1 (forward 4 s^2 d a FLOPs, halved with a causal mask;
backward 2.5 x forward, as the FlashAttention repository's
benchmarks/benchmark_flash_attention.py counts them); the roofline max(F / rate, bytes /
bandwidth) (Williams et al. 2009).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clustersim import simulate
from clustersim.compute import DEFAULT_CURVE, compute_model
from clustersim.errors import ScenarioError
from clustersim.model import activations
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.presets import build_model, build_preset
from clustersim.model.transformer import Transformer
from clustersim.scenario import ModelSpec
from clustersim.strategies.hybrid.stages import StageOptions, plan_stages

A100_PEAK, A100_BANDWIDTH, EFFICIENCY = 312e12, 2.0e12, 0.754


def _gpt(s: int, a: int, h: int = 4096, **options: object) -> Transformer:
    return Transformer(2, h, a, 4 * h, 51200, s, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("s", [512, 2048, 8192, 32768])
@pytest.mark.parametrize("a", [8, 32, 64])
@pytest.mark.parametrize("tp", [1, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
def test_block_bytes_are_korthikanti_without_scores_plus_logsumexp(
    s: int, a: int, tp: int, b: int
) -> None:
    """Korthikanti's Table 2 without its 5 a s / (h t) term, plus the fp32 logsumexp, 4 a s b
    / t bytes; selective recomputation drops nothing more; full keeps the block input."""
    h = 4096
    flash = _gpt(s, a, flash_attention=True)
    sbh, lse = s * b * h, 4 * a * s * b / tp
    expected = {
        (False, "none"): sbh * (10 + 24 / tp) + lse,
        (True, "none"): sbh * 34 / tp + lse,
        (False, "selective"): sbh * (10 + 24 / tp) + lse,
        (True, "selective"): sbh * 34 / tp + lse,
        (False, "full"): 2 * sbh,
    }
    for (sp, recompute), value in expected.items():
        got = activations.block_activation_bytes(
            flash, b, tp=tp, sequence_parallel=sp, recompute=recompute
        )
        assert got == pytest.approx(value, rel=1e-12), (sp, recompute)
    unfused = activations.block_activation_bytes(_gpt(s, a), b, tp=tp)
    flashed = activations.block_activation_bytes(flash, b, tp=tp)
    assert unfused - flashed == pytest.approx(5 * a * s * s * b / tp - lse, rel=1e-12)


@pytest.mark.parametrize("s", [1024, 4096])
@pytest.mark.parametrize("kv_heads", [None, 8])
@pytest.mark.parametrize("dropout", [True, False])
def test_layer_bytes_without_scores(s: int, kv_heads: int | None, dropout: bool) -> None:
    """The layer's own bytes (module transformer): 13 sh + 4 as with dropout, 8 sh + 4 s h_kv
    + 4 as without (the softmax output, dropout mask and dropout output gone); the same as
    the activations module's at t = 1."""
    h, a = 4096, 32
    t = _gpt(s, a, kv_heads=kv_heads, dropout=dropout, flash_attention=True)
    h_kv = h * (kv_heads or a) // a
    plain = 4 * s * h + 2 * 2 * s * h_kv + (s * h if dropout else 0)
    assert t.attention_activation_bytes == 2 * 2 * s * h + plain + 4 * a * s
    layer = t.attention("a")
    assert activations.layer_activation_bytes(layer, t.build("x"), 3) == pytest.approx(
        3 * layer.activation_bytes, rel=1e-12
    )


@pytest.mark.parametrize("s", [512, 4096, 16384])
@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("head_dims", [None, (192, 128)])
def test_fused_kernel_flops_bytes_and_work(
    s: int, b: int, tp: int, head_dims: tuple[int, int] | None
) -> None:
    """One ``flash_attention`` kernel: FLOPs 2 b s^2 a (d_qk + d_v) / t (FA2's 4 s^2 d a per
    sequence), bytes Q, K, V read and O written (2 bytes each) and the logsumexp (4 bytes
    per row and head); work 0.5 (causal).  Backward: 2 x the FLOPs at 1.25 x the work
    (FA2's 2.5 x forward), 2 x the bytes.  The layer's kernels add up to its FLOPs."""
    h, a = 4096, 32
    t = _gpt(s, a, head_dims=head_dims, flash_attention=True)
    qk, v = head_dims or (h // a, h // a)
    layer = t.attention("a")
    fwd = forward_operations(layer, t, b, tp)
    assert [op.name for op in fwd] == ["qkv", "flash_attention", "proj", "norm_residual"]
    kernel = fwd[1]
    assert kernel.flops == pytest.approx(2 * b * s * s * a * (qk + v) / tp, rel=1e-12)
    if head_dims is None:
        assert kernel.flops == pytest.approx(4 * s * s * (h // a) * a * b / tp, rel=1e-12)
    qkvo = b * s * a * (qk + qk + v + v) / tp
    assert kernel.bytes == pytest.approx(2 * qkvo + 4 * b * a * s / tp, rel=1e-12)
    assert kernel.work == 0.5
    bwd = backward_operations(fwd)
    fused = next(op for op in bwd if op.name == "flash_attention.backward")
    assert (fused.flops, fused.bytes, fused.work) == (2 * kernel.flops, 2 * kernel.bytes, 0.625)
    assert fused.flops * fused.work == pytest.approx(2.5 * kernel.flops * kernel.work)
    assert sum(op.flops for op in fwd) == pytest.approx(layer.forward_flops * b / tp, rel=1e-12)
    assert sum(op.flops for op in bwd) == pytest.approx(layer.backward_flops * b / tp, rel=1e-12)


def test_encoder_kernel_computes_every_score() -> None:
    """BERT is not causal: its fused kernel does the full s^2 (work 1, backward 1.25)."""
    bert = replace(build_preset("bert-large").transformer, flash_attention=True)
    fwd = forward_operations(bert.attention("a"), bert, 1, 1)
    fused = next(op for op in backward_operations(fwd) if op.name == "flash_attention.backward")
    assert fwd[1].work == 1.0 and fused.work == 1.25


@pytest.mark.parametrize("head_dims", [None, (192, 128)])
def test_unfused_kernels_add_up_with_head_dims(head_dims: tuple[int, int] | None) -> None:
    """Unfused scores (s x s x d_qk) and context (s x d_v x s) add up to the layer's FLOPs,
    MLA's head widths too."""
    t = _gpt(4096, 128, h=7168, head_dims=head_dims)
    layer = t.attention("a")
    fwd = forward_operations(layer, t, 1, 1)
    assert sum(op.flops for op in fwd) == pytest.approx(layer.forward_flops, rel=1e-12)


def _core(shape: Transformer, roof: object) -> float:
    """Seconds of the attention core's forward and backward (scores, softmax, context, or the
    fused kernel) of one sequence."""
    ops = forward_operations(shape.attention("a"), shape, 1, 1)
    core = [op for op in ops if op.name in ("scores", "softmax", "context", "flash_attention")]
    return roof.seconds(core) + roof.seconds(backward_operations(core))  # type: ignore[attr-defined]


def test_long_sequences_run_much_faster_fused() -> None:
    """GPT-2 medium's attention (16 heads of 64, dropout) on an A100 under the roofline.
    The fused kernel is compute-bound at the matmul rate for its size (exact); the unfused
    softmax is memory-bound, 9 bytes per score.  The fused core's speedup grows with s; at
    s = 1024 it is within a factor 2 below FlashAttention's measured 7.6x (Dao et al. 2022,
    Figure 1) and never above 7.6 x 1.1; the whole layer's speedup grows with s as the
    s^2 part takes over."""
    roof = compute_model("roofline", A100_PEAK, EFFICIENCY, A100_BANDWIDTH)
    speedups, layer_speedups = [], []
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        unfused = _gpt(s, 16, h=1024)
        fused = replace(unfused, flash_attention=True)
        kernel = forward_operations(fused.attention("a"), fused, 1, 1)[1]
        work = kernel.flops * 0.5
        exact = work / (A100_PEAK * EFFICIENCY * DEFAULT_CURVE(work))
        assert roof.operation_seconds(kernel) == pytest.approx(exact, rel=1e-12)
        softmax = forward_operations(unfused.attention("a"), unfused, 1, 1)[2]
        assert roof.operation_seconds(softmax) == pytest.approx(9 * 16 * s * s / A100_BANDWIDTH)
        speedups.append(_core(unfused, roof) / _core(fused, roof))
        layers = [
            roof.seconds(forward_operations(x.attention("a"), x, 1, 1))
            + roof.seconds(backward_operations(forward_operations(x.attention("a"), x, 1, 1)))
            for x in (unfused, fused)
        ]
        layer_speedups.append(layers[0] / layers[1])
    assert speedups == sorted(speedups) and layer_speedups == sorted(layer_speedups)
    assert 7.6 / 2 <= speedups[1] <= 7.6
    assert max(speedups) <= 7.6 * 1.1
    assert layer_speedups[-1] > 3 * layer_speedups[0] and layer_speedups[0] > 1


def test_selective_recompute_has_nothing_to_recompute() -> None:
    """Unfused: selective recomputation re-runs the score products (4 s^2 h per sample and
    attention layer, Korthikanti et al.); fused: none, and no a s^2 bytes to save."""
    s, h = 2048, 4096
    for flash, per_layer in ((False, 4 * s * s * h), (True, 0.0)):
        model = _gpt(s, 32, flash_attention=flash).build("x")
        plans = plan_stages(model, [len(model.layers)], StageOptions(recompute="selective"))
        assert plans[0].recompute_flops == pytest.approx(2 * per_layer)


def test_presets_trained_with_it() -> None:
    """On for the LLaMA-2, Mixtral and DeepSeek presets; off for GPT-3, Megatron, GPT-2, BERT."""
    on = ("llama2-7b", "llama2-70b", "mixtral-8x7b", "deepseek-moe-16b", "deepseek-v3")
    off = ("gpt3-175b", "megatron-18.4b", "gpt2-1.5b", "bert-large")
    assert all(build_preset(n).transformer.flash_attention for n in on)
    assert not any(build_preset(n).transformer.flash_attention for n in off)


def test_scenario_keys_switch_it() -> None:
    """``model.flash_attention`` on a preset (kept through model.moe), and
    ``model.transformer.flash_attention``."""
    off = build_model(ModelSpec(preset="mixtral-8x7b", flash_attention=False, moe={"top_k": 1}))
    assert not off.transformer.flash_attention and off.transformer.moe.top_k == 1
    on = build_model(ModelSpec(preset="gpt3-1.3b", flash_attention=True))
    assert on.transformer.flash_attention
    assert on.params == build_preset("gpt3-1.3b").params
    spec = {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 100}
    own = build_model(ModelSpec(transformer={**spec, "flash_attention": True}))
    assert own.transformer.flash_attention


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"preset": "resnet50", "flash_attention": True}, "not a transformer"),
        (
            {"layers": [{"name": "x", "params": 10, "flops": "1GFLOP"}], "flash_attention": True},
            "no attention",
        ),
        (
            {
                "transformer": {"layers": 2, "hidden": 64, "heads": 4, "seq": 8, "vocab": 10},
                "flash_attention": True,
            },
            "inside model.transformer",
        ),
    ],
)
def test_flash_attention_refused_without_a_transformer_preset(
    tmp_path: Path, model: dict, message: str
) -> None:
    """``model.flash_attention`` needs a transformer preset: a clear error at its key path."""
    import yaml

    doc = {
        "name": "x",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {
                "gpus": 1,
                "gpu": {"flops": "312TFLOPS", "memory": "80GB"},
                "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
                "nic": {"bandwidth": "200Gb/s", "latency": "2us"},
            },
        },
        "model": model,
        "training": {"global_batch": 2, "micro_batch": 1, "iterations": 1},
        "parallelism": {"tp": 1, "pp": 1, "dp": 1},
        "pipeline": {"schedule": "1f1b"},
    }
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as err:
        simulate(path)
    assert "model.flash_attention" in str(err.value) and message in str(err.value)
