"""``clustersim calibrate profile`` on a real transformer step (issue 44 item 3): a published
PyTorch profiler trace of Megatron-LM GPT on an A100-SXM4-80GB (tensor parallel 8, rank 0,
fp16, torch.profiler with record_shapes), kept in tests/fixtures/profiles (source and
licence in its SOURCE.md).

Held to what lies outside the reader and the fit: the product shapes Megatron's GPT layer
has at the model's shape (hidden 4096, 64 heads, FFN 4 x hidden, vocabulary 51,200, tensor
parallel 8, micro-batch 4 of 2,048 tokens: QKV 3h/t, attention output h/t, FC1 4h/t, FC2,
scores and context per head, the output layer's vocabulary shard), 40 of each per step
(40 layers), and the trace's measured kernel times: the calibrated curve must give each
linear-layer product within 10%, the attention's memory-bound products at their bytes over
the bandwidth."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clustersim.calibrate.kernel_fit import fit_profile
from clustersim.calibrate.trace import read_profile
from clustersim.cli import main
from clustersim.hardware import find

TRACE = Path(__file__).parent / "fixtures" / "profiles" / "megatron_gpt_a100_tp8_rank0.json.gz"

HIDDEN, HEADS, LAYERS, VOCAB = 4096, 64, 40, 51200
"""The GPT's shape, as its products show it (the trace does not name the model)."""
TP, MICRO_BATCH, SEQUENCE = 8, 4, 2048
TOKENS = MICRO_BATCH * SEQUENCE
HEAD_DIM = HIDDEN // HEADS


def megatron_gpt_products() -> dict[tuple[int, int, int, int], int]:
    """(m, n, k, batch) -> count of one forward pass of Megatron's GPT on one tensor-parallel
    rank: the four linear layers of each layer, its attention scores (baddbmm) and context
    (bmm) per local head and micro-batch sample, and the output layer once."""
    per_rank_heads = HEADS // TP
    layer = {
        (TOKENS, 3 * HIDDEN // TP, HIDDEN, 1): LAYERS,  # QKV, column parallel
        (TOKENS, HIDDEN, HIDDEN // TP, 1): LAYERS,  # attention output, row parallel
        (TOKENS, 4 * HIDDEN // TP, HIDDEN, 1): LAYERS,  # FC1, column parallel
        (TOKENS, HIDDEN, 4 * HIDDEN // TP, 1): LAYERS,  # FC2, row parallel
        (SEQUENCE, SEQUENCE, HEAD_DIM, MICRO_BATCH * per_rank_heads): LAYERS,  # Q K^T
        (SEQUENCE, HEAD_DIM, SEQUENCE, MICRO_BATCH * per_rank_heads): LAYERS,  # scores V
    }
    layer[(TOKENS, VOCAB // TP, HIDDEN, 1)] = 1  # the output layer's shard
    return layer


def test_the_trace_holds_megatron_gpts_products_at_its_shape() -> None:
    """The reader finds the A100 of deviceProperties, one step, 241 fp16 products in exactly
    the shapes and counts of a forward pass of the layer, and no product without shapes."""
    profile = read_profile(TRACE)
    assert profile.device == "NVIDIA A100-SXM4-80GB"
    assert profile.steps == 1 and profile.unshaped == 0
    found: dict[tuple[int, int, int, int], int] = {}
    for p in profile.products:
        key = (p.m, p.n, p.k, p.batch)
        found[key] = found.get(key, 0) + 1
    assert found == megatron_gpt_products()
    assert {p.precision for p in profile.products} == {"fp16"}
    assert profile.product_s == pytest.approx(86.781e-3, rel=1e-4)


def test_the_fitted_curve_gives_the_steps_linear_layers_back() -> None:
    """Default hold-out, base the catalog's A100-SXM4-80GB (2.039 TB/s).  The attention's two
    batched products (a head of 64) are memory-bound in the roofline: priced at their bytes,
    2 x 32 x (2 x 2048 x 64 + 2048^2) = 285 MB, over the bandwidth (140 us), which the
    measured 184 and 294 us lie above (a bandwidth bound), and held out of the curve's fit.
    The five linear-layer shapes (QKV, attention output, FC1, FC2, output layer: 78% of the
    products' time) are each within 10% of their measured kernel time, and summed within 5%."""
    fit = fit_profile(read_profile(TRACE), find("a100-sxm4-80gb", "gpu"), "default")
    assert set(fit.curves) == {"fp16"}
    measured = sum(sum(s.times_s) for s in fit.shapes)
    assert measured == pytest.approx(86.781e-3, rel=1e-4)
    bound = [i for i, s in enumerate(fit.shapes) if fit.is_memory_bound(i)]
    assert sorted(fit.shapes[i].batch for i in bound) == [32, 32]
    for i in bound:
        attention = 2.0 * 32 * (2 * 2048 * 64 + 2048 * 2048)
        assert fit.predicted_s(i) == pytest.approx(attention / 2.039e12, rel=1e-9)
        assert fit.predicted_s(i) < fit.shapes[i].time_s
    linear = [i for i in range(len(fit.shapes)) if i not in bound]
    assert len(linear) == 5
    times = sum(sum(fit.shapes[i].times_s) for i in linear)
    assert times > 0.75 * measured
    for i in linear:
        assert abs(fit.error(i)) < 0.10, fit.shapes[i].label
    predicted = sum(fit.predicted_s(i) * len(fit.shapes[i].times_s) for i in linear)
    assert predicted == pytest.approx(times, rel=0.05)


def test_end_to_end_on_the_published_trace(tmp_path: Path, capsys) -> None:
    """The command writes a GPU file the catalog reads back as an A100 with a fitted fp16
    curve, saying which shapes were memory-bound and left out, and the plot."""
    out = tmp_path / "a100_megatron.yaml"
    assert main(["calibrate", "profile", str(TRACE), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fp16 products, 7 shapes" in text and "held-out shapes:" in text
    gpu = find(str(out), "gpu")
    assert gpu.name == "a100_megatron"
    written = out.read_text()
    assert "# Memory-bound shapes (priced by their bytes, not fitted): 2 points" in written
    assert "7 shapes, 2 of them memory-bound at the base curve and left out" in written
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")


def test_the_forward_pass_fits_the_memory_efficiency_of_its_run(tmp_path: Path, capsys) -> None:
    """With the run the trace is of (tests/fixtures/profiles/megatron_gpt_tp8.yaml), the
    trace -- a forward pass, no autograd ops -- is fitted to the run's forward kernels: its
    products are exactly the FLOPs clustersim's layer gives that forward pass (ratio 1.0000:
    Megatron's kernels and clustersim's FLOP formulas agree), and the memory efficiency is
    the share of the A100's 2.039 TB/s that makes the run's forward memory-bound operations
    take the trace's 365 element-wise, norm and reduction kernels' 44.61 ms (0.89)."""
    out = tmp_path / "a100_megatron.yaml"
    run = TRACE.parent / "megatron_gpt_tp8.yaml"
    assert main(["calibrate", "profile", str(TRACE), "--scenario", str(run), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fitted to the forward passes alone" in text
    assert "matrix-product FLOPs of the trace over the run's steps: 1.0000" in text
    assert "365 element-wise/norm/reduction kernels" in text
    written = yaml.safe_load(out.read_text())["spec"]["compute"]["memory_efficiency"]
    assert 0.85 < written["value"] < 0.95
    assert "measured 0.0446" in written["note"] and "forward" in written["note"]
