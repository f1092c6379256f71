"""The catalog's efficiency curves against the measurements they come from (docs/hardware.md,
"Curves"), and against fused-attention throughput they were not fitted to.

Sources: S. Bekman, "Machine Learning Engineering", Maximum Achievable Matmul FLOPS table
(commit 744d01e) for the ceilings; OpenXLA's matmul table as in ROCm/xla commit ea2c45f
(scenarios/kernels/xla2026/*.csv, 375 shapes per GPU and type) for the fixed kernel times;
for attention, pytorch/benchmark commit ff65cb6 (PR 2391: FlashAttention-3 forward, bf16,
H100, B x S = 16K, H x D = 2048, D = 128, non-causal), the FlashAttention-3 abstract (Shah
et al. 2024: up to 740 TFLOP/s in FP16, close to 1.2 PFLOP/s in FP8 on an H100) and the
FlashAttention-2 abstract (Dao 2023: 50-73% of the A100's peak).
"""

from __future__ import annotations

import math

import pytest

from clustersim import units
from clustersim.compute import DEFAULT_CURVE, compute_model, curve_at, read_kernels
from clustersim.hardware import GPUS
from clustersim.model.operators import FLASH, forward_operations
from clustersim.model.transformer import Transformer

from .conftest import SCENARIOS

KERNELS = SCENARIOS / "kernels" / "xla2026"

FITS = [
    ("h100-sxm5-80gb", "bf16", "h100_bf16.csv", 0.105),
    ("h100-sxm5-80gb", "tf32", "h100_tf32.csv", 0.274),
    ("b200", "bf16", "b200_bf16.csv", 0.138),
    ("b200", "tf32", "b200_tf32.csv", 0.135),
    ("b200", "fp8", "b200_fp8.csv", 0.139),
    ("mi300x", "bf16", "mi300x_bf16.csv", 0.264),
    ("mi300x", "tf32", "mi300x_tf32.csv", 0.317),
    ("mi300x", "fp8", "mi300x_fp8.csv", 0.426),
]
"""(GPU, precision, sweep, root-mean-square log error docs/hardware.md states)."""


def _peak(gpu: str, precision: str) -> float:
    return units.parse_flop_rate(GPUS.get(gpu).spec["peaks"][precision])


def _curve(gpu: str, precision: str) -> tuple[float, float]:
    """(e_max, kernel time in s) of the preset's curve for ``precision``."""
    curve = GPUS.get(gpu).spec["compute"]["curves"][precision]
    return curve["e_max"], units.parse_time(curve["kernel_time"])


def _errors(gpu: str, precision: str, file: str, kernel_s: float) -> list[float]:
    """log(measured / curve) of every shape of the sweep ``file``."""
    peak = _peak(gpu, precision)
    e_max, _ = _curve(gpu, precision)
    curve = curve_at(e_max, kernel_s, peak)
    samples = read_kernels(KERNELS / file, peak)
    return [math.log(s.flops / s.seconds / peak / curve(s.flops)) for s in samples]


def _rms(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


@pytest.mark.parametrize(("gpu", "precision", "file", "stated"), FITS)
def test_each_curve_reproduces_its_sweep_within_the_stated_error(
    gpu: str, precision: str, file: str, stated: float
) -> None:
    """The curve of each swept GPU and precision is within the root-mean-square log error
    docs/hardware.md states of the 375 measured shapes, and its kernel time is the best one
    with e_max held (a grid of 1% steps finds nothing better by more than rounding)."""
    _, kernel_s = _curve(gpu, precision)
    assert len(_errors(gpu, precision, file, kernel_s)) == 375
    error = _rms(_errors(gpu, precision, file, kernel_s))
    assert error <= stated + 0.0005
    for step in (0.95, 0.97, 0.99, 1.01, 1.03, 1.05):
        assert _rms(_errors(gpu, precision, file, kernel_s * step)) >= error - 0.0005


@pytest.mark.parametrize(
    ("gpu", "precision", "mamf"),
    [
        ("a100-sxm4-80gb", "bf16", 271.2),
        ("h100-sxm5-80gb", "bf16", 794.5),
        ("h100-sxm5-80gb", "fp8", 1402.6),
        ("h200-sxm-141gb", "fp8", 1453.4),
        ("b200", "bf16", 1745.0),
        ("b200", "fp8", 3432.5),
        ("gb200", "bf16", 1822.0),
        ("gb200", "fp8", 3615.6),
        ("mi300x", "bf16", 668.4),
    ],
)
def test_ceilings_are_the_maximum_achievable_matmul_rates(
    gpu: str, precision: str, mamf: float
) -> None:
    """e_max is Bekman's MAMF over the dense peak where the table has the GPU and type."""
    e_max, _ = _curve(gpu, precision)
    assert e_max == pytest.approx(mamf * 1e12 / _peak(gpu, precision), rel=1e-12)


@pytest.mark.parametrize(
    ("gpu", "precision", "file", "stated"), [f for f in FITS if f[1] == "tf32"]
)
def test_without_a_mamf_the_ceiling_is_the_sweeps_best(
    gpu: str, precision: str, file: str, stated: float
) -> None:
    """Where no MAMF is published (tf32), e_max is the best rate of the sweep over the peak."""
    peak = _peak(gpu, precision)
    best = max(s.flops / s.seconds for s in read_kernels(KERNELS / file, peak))
    assert _curve(gpu, precision)[0] == pytest.approx(best / peak, rel=2e-4)


@pytest.mark.parametrize("gpu", ["a100-sxm4-80gb", "a100-sxm4-40gb"])
def test_the_a100_presets_give_the_built_in_curve_exactly(gpu: str) -> None:
    """At 312 TFLOP/s the A100 presets' bf16 curve is DEFAULT_CURVE, bit for bit."""
    e_max, kernel_s = _curve(gpu, "bf16")
    assert curve_at(e_max, kernel_s, _peak(gpu, "bf16")) == DEFAULT_CURVE


def _attention_tflops(gpu: str, precision: str, b: int, heads: int, seq: int, d: int) -> float:
    """TFLOP/s the roofline prices one forward FlashAttention kernel at (efficiency 1: the
    kernel alone), non-causal, ``b`` sequences of ``seq`` tokens, ``heads`` heads of ``d``."""
    shape = Transformer(
        layers=1,
        hidden=heads * d,
        heads=heads,
        ffn=4 * heads * d,
        vocab=1024,
        seq=seq,
        flash_attention=True,
        causal=False,
    )
    layer = next(layer for layer in shape.build("t").layers if layer.kind == "attention")
    (op,) = [op for op in forward_operations(layer, shape, b, 1) if op.name == FLASH]
    spec = GPUS.get(gpu).spec
    peak = _peak(gpu, precision)
    e_max, kernel_s = _curve(gpu, precision)
    bandwidth = units.parse_bandwidth(spec["memory_bandwidth"])
    model = compute_model("roofline", peak, 1.0, bandwidth, curve_at(e_max, kernel_s, peak))
    return op.flops / model.operation_seconds(op) / 1e12


FA3_BF16_H100 = [
    (32, 512, 430.32),
    (16, 1024, 517.099),
    (8, 2048, 565.544),
    (4, 4096, 590.233),
    (2, 8192, 614.234),
    (1, 16384, 620.73),
]
"""(batch, sequence, measured TFLOP/s) of FlashAttention-3's bf16 forward on an H100, 16 heads
of 128 (pytorch/benchmark PR 2391's test plan)."""


@pytest.mark.parametrize(
    ("gpu", "precision", "published", "what"),
    [
        ("h100-sxm5-80gb", "bf16", 620.73, "FA3 bf16, measured at 16K tokens, 16 heads of 128"),
        ("h100-sxm5-80gb", "bf16", 740.0, "FA3 bf16, the paper's maximum"),
        ("h100-sxm5-80gb", "fp8", 1200.0, "FA3 fp8, 'close to 1.2 PFLOP/s'"),
        ("a100-sxm4-80gb", "bf16", 0.73 * 312, "FA2 bf16, 73% of the A100's peak"),
    ],
)
def test_the_curves_price_fused_attention_within_30_percent_of_its_best(
    gpu: str, precision: str, published: float, what: str
) -> None:
    """The matmul curves, not fitted to attention, price the fused attention kernel at the
    benchmarks' longest sequence (16K tokens, hidden 2048) above the published rate -- the
    kernel's softmax is work the curve does not see -- but within 30% of it."""
    got = _attention_tflops(gpu, precision, 1, 16, 16384, 128)
    assert 1.0 <= got / published <= 1.30, what


def test_the_attention_gap_widens_at_short_sequences() -> None:
    """Measured FA3 throughput falls from 621 to 430 TFLOP/s between 16K and 512 tokens; the
    curve, which sees one kernel of all heads' FLOPs, falls less: its lead grows from 28% to
    72% (docs/hardware.md names this as what the model leaves out)."""
    ratios = [
        _attention_tflops("h100-sxm5-80gb", "bf16", b, 16, seq, 128) / measured
        for b, seq, measured in FA3_BF16_H100
    ]
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[0] == pytest.approx(1.72, abs=0.01) and ratios[-1] == pytest.approx(
        1.28, abs=0.01
    )
