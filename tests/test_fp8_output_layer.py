"""fp8 training keeps its output layer in 16 bits
(:data:`clustersim.compute.models.SIXTEEN_BIT_KERNELS`).

Megatron-Core (tags core_v0.6.0 cac60ce and core_v0.9.0 1afee59) builds the output layer as its
own ``tensor_parallel.ColumnParallelLinear`` (``megatron/core/models/gpt/gpt_model.py``), whose
products are ``torch.matmul`` calls, and opens Transformer Engine's ``fp8_autocast`` around the
transformer layers alone (``TransformerBlock.forward``,
``megatron/core/transformer/transformer_block.py``).  So an H100 priced at
``training.precision: fp8`` runs ``logits``, ``logits.dgrad`` and ``logits.wgrad`` at its bf16
peak and curve -- not at a fitted ``compute.attention``, which is the attention core's alone --
and the layers' products at the fp8 ones; at bf16 every product runs at the bf16 ones.  Held to
the roofline by hand, the H100's numbers read from its catalog file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.compute.models import ComputeModel, Operation
from clustersim.model import build_model
from clustersim.model.fp8_casts import Fp8Casts
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.transformer import Transformer
from clustersim.scenario import parse_scenario
from clustersim.strategies.kernel_times import DeviceModels
from clustersim.topology import Device

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "clustersim" / "hardware" / "gpus" / "h100-sxm5-80gb.yaml"
OUTPUT_LAYER = {"logits", "logits.dgrad", "logits.wgrad"}
CORE = {"flash_attention", "flash_attention.backward"}
"""The attention core's kernels of a fused-attention layer."""
FITTED = {"peak": "700TFLOPS", "curve": {"e_max": 0.55, "kernel_time": "20us"}}
"""A ``compute.attention`` as ``clustersim calibrate profile`` writes one."""


def _value(entry: Any) -> str:
    return str(entry["value"] if isinstance(entry, dict) else entry)


def _h100() -> dict[str, Any]:
    """The catalog H100's peaks (FLOP/s), curves ((e_max, kernel time s)), efficiency and
    memory bandwidth (B/s), read from its file by hand."""
    spec = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))["spec"]
    peaks = {
        p: float(_value(spec["peaks"][p]).removesuffix("TFLOPS")) * 1e12 for p in ("bf16", "fp8")
    }
    curves = {}
    for p in ("bf16", "fp8"):
        curve = spec["compute"]["curves"][p]
        mamf = float(_value(curve["mamf"]).removesuffix("TFLOPS")) * 1e12
        curves[p] = (mamf / peaks[p], float(_value(curve["kernel_time"]).removesuffix("us")) * 1e-6)
    bandwidth = float(_value(spec["memory_bandwidth"]).removesuffix("TB/s")) * 1e12
    return {
        "peaks": peaks,
        "curves": curves,
        "efficiency": float(_value(spec["efficiency"])),
        "bandwidth": bandwidth,
    }


H100 = _h100()


def _seconds(op: Operation, peak: float, e_max: float, kernel_s: float) -> float:
    """The roofline by hand: the larger of the work at ``peak`` x efficiency x the curve
    ``e_max W / (W + W_half)``, ``W_half = kernel_s e_max peak``, and the bytes over the
    bandwidth."""
    work = op.flops * op.work
    half = kernel_s * e_max * peak
    compute = work / (peak * H100["efficiency"] * e_max * work / (work + half)) if work else 0.0
    return max(compute, op.bytes / H100["bandwidth"])


def _at(op: Operation, precision: str) -> float:
    peak, (e_max, kernel_s) = H100["peaks"][precision], H100["curves"][precision]
    return _seconds(op, peak, e_max, kernel_s)


def _model(precision: str, gpu: dict[str, Any] | None = None) -> ComputeModel:
    """The compute model a run at ``precision`` on a DGX H100 gives its GPUs (``gpu``: keys
    beside the node's GPU preset)."""
    node: dict[str, Any] = {"preset": "dgx-h100"}
    if gpu:
        node["gpu"] = {"preset": "h100-sxm5-80gb", **gpu}
    doc = {
        "name": "head",
        "cluster": {"kind": "two_tier", "node": node},
        "model": {"preset": "gpt3-125m"},
        "training": {"global_batch": 8, "precision": precision},
    }
    spec = parse_scenario(doc).cluster.node.gpu
    device = Device(
        "gpu0",
        "gpu",
        0,
        spec.flops_per_s,
        spec.efficiency,
        spec.memory_bytes,
        spec.memory_bandwidth_Bps,
        compute=spec.compute,
    )
    return DeviceModels(ROOT).of(device)


def _shape(hidden: int, heads: int, vocab: int, seq: int) -> Transformer:
    return Transformer(
        layers=2,
        hidden=hidden,
        heads=heads,
        ffn=4 * hidden,
        vocab=vocab,
        seq=seq,
        flash_attention=True,
    )


def _kernels(shape: Transformer, b: int, tp: int, fp8: bool) -> list[Operation]:
    """Every kernel of the model's layers, forward and backward, fp8 casts with them."""
    casts = Fp8Casts.of("fp8" if fp8 else "bf16", shape, tp, tp > 1)
    out: list[Operation] = []
    for layer in shape.build("m").layers:
        forward = forward_operations(layer, shape, b, tp, casts)
        out += forward + backward_operations(forward, casts)
    return out


SHAPES = [
    # hidden, heads, vocab, seq, micro-batch, tp
    (4096, 32, 128256, 8192, 1, 2),  # Llama 3 8B as FlagPerf ran it
    (4096, 32, 32000, 4096, 1, 1),  # Llama 2 7B, the SFT calibration run
    (6144, 48, 256000, 4096, 1, 4),  # Nemotron-4 15B
    (12288, 96, 51200, 2048, 2, 8),  # GPT-3 175B
    (768, 12, 50257, 1024, 4, 1),  # GPT-3 125M: small products, the fixed cost weighs
]


@pytest.mark.parametrize(("hidden", "heads", "vocab", "seq", "b", "tp"), SHAPES)
def test_fp8_runs_the_output_layer_at_the_16_bit_peak_and_curve(
    hidden: int, heads: int, vocab: int, seq: int, b: int, tp: int
) -> None:
    """At fp8 each of the output layer's products (forward, input and weight gradients) takes
    the roofline's seconds at the bf16 peak and curve; the layers' products take them at the
    fp8 ones, the attention core at the bf16 ones, every memory-bound kernel its bytes over the
    bandwidth."""
    model = _model("fp8")
    kernels = _kernels(_shape(hidden, heads, vocab, seq), b, tp, fp8=True)
    assert {op.name for op in kernels} >= OUTPUT_LAYER | CORE | {"fc1", "qkv.wgrad"}
    for op in kernels:
        sixteen_bit = op.name in OUTPUT_LAYER or op.name in CORE or not op.flops
        expected = _at(op, "bf16" if sixteen_bit else "fp8")
        assert model.operation_seconds(op) == pytest.approx(expected, rel=1e-12), op.name


@pytest.mark.parametrize(("hidden", "heads", "vocab", "seq", "b", "tp"), SHAPES[:3])
def test_a_fitted_attention_rate_prices_the_attention_core_alone(
    hidden: int, heads: int, vocab: int, seq: int, b: int, tp: int
) -> None:
    """A GPU with its own ``compute.attention`` (a fitted one) trained at fp8: the attention
    core at that rate, the output layer still at the catalog's bf16 peak and curve."""
    model = _model("fp8", {"compute": {"attention": FITTED}})
    peak, kernel_s, e_max = 700e12, 20e-6, 0.55
    for op in _kernels(_shape(hidden, heads, vocab, seq), b, tp, fp8=True):
        if op.name in CORE:
            expected = _seconds(op, peak, e_max, kernel_s)
        elif op.name in OUTPUT_LAYER:
            expected = _at(op, "bf16")
        else:
            expected = _at(op, "fp8" if op.flops else "bf16")
        assert model.operation_seconds(op) == pytest.approx(expected, rel=1e-12), op.name


@pytest.mark.parametrize(("hidden", "heads", "vocab", "seq", "b", "tp"), SHAPES)
def test_bf16_prices_every_product_at_the_bf16_peak_and_curve(
    hidden: int, heads: int, vocab: int, seq: int, b: int, tp: int
) -> None:
    """At bf16 the output layer is a product like any other: no rate of its own."""
    model = _model("bf16")
    assert model.attention is None
    for op in _kernels(_shape(hidden, heads, vocab, seq), b, tp, fp8=False):
        assert model.operation_seconds(op) == pytest.approx(_at(op, "bf16"), rel=1e-12), op.name


def test_bert_pooler_stays_in_16_bits_at_fp8() -> None:
    """BERT's pooler (a ``torch.nn.Linear`` after Megatron-Core's transformer block,
    ``megatron/core/models/bert/pooler.py``) is priced as one FLOP count at the bf16 rate of a
    product of its size, forward and backward."""
    doc = {
        "name": "bert",
        "cluster": {"kind": "two_tier", "node": {"preset": "dgx-h100"}},
        "model": {"preset": "bert-large"},
        "training": {"global_batch": 8, "precision": "fp8"},
    }
    built = build_model(parse_scenario(doc).model)
    head = next(layer for layer in built.layers if layer.kind == "head")
    forward = forward_operations(head, built.transformer, 2, 1)
    pooler = [op for op in forward + backward_operations(forward) if op.name == "pooler"]
    assert len(pooler) == 2
    model = _model("fp8")
    for op in pooler:
        assert model.operation_seconds(op) == pytest.approx(_at(op, "bf16"), rel=1e-12)


# -- the run ---------------------------------------------------------------------------------


RUN_SHAPE: dict[str, Any] = {
    "layers": 2,
    "hidden": 2048,
    "heads": 16,
    "ffn": 5632,
    "vocab": 64000,
    "seq": 2048,
    "gated_ffn": True,
    "flash_attention": True,
}
"""A small Llama-like model (``model.transformer`` keys, :class:`Transformer` fields)."""


def _run_doc(strategy: str, sixteen_bit: dict[str, Any] | None) -> dict[str, Any]:
    """:data:`RUN_SHAPE` on one H100, 2 micro-batches of 2 sequences, fp8."""
    gpu: dict[str, Any] = {"preset": "h100-sxm5-80gb"}
    if sixteen_bit is not None:
        gpu["compute"] = {"sixteen_bit": sixteen_bit}
    doc: dict[str, Any] = {
        "name": "head",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {"preset": "dgx-h100", "gpus": 1, "nics": 1, "gpu": gpu},
        },
        "model": {"transformer": dict(RUN_SHAPE)},
        "training": {
            "global_batch": 4,
            "micro_batch": 2,
            "iterations": 1,
            "precision": "fp8",
            "recompute": "none",
        },
    }
    if strategy == "pipeline":
        doc["parallelism"] = {"tp": 1, "pp": 1, "dp": 1}
        doc["pipeline"] = {"schedule": "1f1b"}
    else:
        doc["zero"] = {"stage": 1}
    return doc


@pytest.mark.parametrize("strategy", ["pipeline", "zero"])
def test_the_fp8_step_rises_by_the_output_layer_at_16_bits(strategy: str) -> None:
    """One GPU, fp8: the step against the same step with ``compute.sixteen_bit`` set to the
    fp8 peak and curve (the output layer priced as before) is longer by 2 micro-batches x the
    output layer's products at bf16 less at fp8."""
    e_max, kernel_s = H100["curves"]["fp8"]
    as_fp8 = {"peak": "1979TFLOPS", "curve": {"e_max": e_max, "kernel_time": f"{kernel_s}s"}}
    steps = {
        name: simulate(parse_scenario(_run_doc(strategy, given))).summary["iteration_time_s"]
        for name, given in (("16-bit", None), ("fp8", as_fp8))
    }
    shape = Transformer(**RUN_SHAPE)
    head = [op for op in _kernels(shape, 2, 1, fp8=True) if op.name in OUTPUT_LAYER]
    assert len(head) == 3
    rise = 2 * sum(_at(op, "bf16") - _at(op, "fp8") for op in head)
    assert steps["16-bit"] - steps["fp8"] == pytest.approx(rise, rel=1e-6)
    assert rise > 0.005 * steps["fp8"]  # the output layer is no rounding error here


def test_the_rate_keeps_its_old_name() -> None:
    """``clustersim.compute.AttentionRate`` (exported before the output layer shared it) is
    still importable, and is :class:`ProductRate`."""
    from clustersim.compute import AttentionRate, ProductRate

    assert AttentionRate is ProductRate
