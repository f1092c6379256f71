"""Transformer Engine's fp8 casts and transposes (:mod:`clustersim.model.fp8_casts`).

Held to the byte counts written out here from the module's sources (Transformer Engine
v1.9's ``linear.py``, ``layernorm_linear.py``, ``base.py`` and its cast-transpose kernel;
Megatron-Core's GPT layer spec), per TE product of a layer on one of ``t`` GPUs, ``R = b s``
rows, in bytes (a 16-bit value read 2, an fp8 value or its transpose written 1, an fp8 value
read 1):

* forward: the input of ``proj`` (R x h/t values) and of ``fc2`` (R x f/t) cast and
  transposed, 4 bytes per value (3, a cast alone, under sequence parallelism);
* backward: the output gradient of every product cast and transposed, 4 bytes per value --
  ``qkv`` R x (h + 2 h_kv)/t, ``fc1`` R x f/t (x 2 gated), ``proj`` and ``fc2`` R x h; under
  sequence parallelism the last two's R h / t local values cast (3) and their R h gathered
  values transposed (2), and their inputs transposed (2), with or without biases (Megatron-Core
  adds those of ``proj``, ``fc1`` and ``fc2`` itself); the fp8 norm output of ``qkv`` and
  ``fc1`` (R x h) transposed, 2 bytes;
* once a step: every product's weight cast and transposed, 4 bytes per value.

Then the run: on a GPU whose fp8 and bf16 peaks and curves are one, an fp8 step is its bf16
step plus exactly those bytes over ``bandwidth x memory_efficiency`` -- under the pipeline
strategy with the weights once a step, under ZeRO at every forward.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.calibrate.memory_fit import memory_step
from clustersim.calibrate.run_step import run_step
from clustersim.hardware import find
from clustersim.model.fp8_casts import Fp8Casts, is_cast, weight_casts
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.transformer import Transformer
from clustersim.scenario import parse_scenario

S = 256
"""Sequence length of every shape here."""


def _shape(h: int, f: int, heads: int, kv_heads: int, gated: bool, bias: bool) -> Transformer:
    return Transformer(
        layers=2,
        hidden=h,
        heads=heads,
        ffn=f,
        vocab=1024,
        seq=S,
        kv_heads=kv_heads,
        gated_ffn=gated,
        bias=bias,
        flash_attention=True,
    )


def _expected(
    kind: str, shape: Transformer, b: int, t: int, sp: bool
) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[tuple[str, float]]]:
    """(forward, backward, weight) casts of one ``kind`` layer by the module docstring's
    formulas: (name, bytes), sorted."""
    rows, h, f = b * S, shape.hidden, shape.ffn
    h_kv = (shape.kv_heads or shape.heads) * h // shape.heads
    split = sp and t > 1
    row_parallel_in = h // t if kind == "attention" else f // t  # proj's or fc2's input width
    column_out = (
        (h + 2 * h_kv) // t if kind == "attention" else f // t * (2 if shape.gated_ffn else 1)
    )
    forward = [("fp8_cast.input", (3 if split else 4) * rows * row_parallel_in)]
    backward = [
        ("fp8_cast.grad_output", 4.0 * rows * column_out),  # qkv or fc1
        ("fp8_transpose.norm_output", 2.0 * rows * h),  # their fp8 norm output
    ]
    if split:
        backward += [
            ("fp8_cast.grad_output", 3.0 * rows * h / t + 2.0 * rows * h),
            ("fp8_transpose.input", 2.0 * rows * row_parallel_in),
        ]
    else:
        backward.append(("fp8_cast.grad_output", 4.0 * rows * h))
    weights = [
        ("fp8_cast.weight", 4.0 * column_out * h),
        ("fp8_cast.weight", 4.0 * h * row_parallel_in),
    ]
    return sorted(forward), sorted(backward), sorted(weights)


def _named(ops: list[Any]) -> list[tuple[str, float]]:
    return sorted((op.name, op.bytes) for op in ops if is_cast(op))


SHAPES = [
    # h, f, heads, kv_heads, gated, bias
    (1024, 4096, 16, 16, False, True),  # GPT, GeLU, biases
    (4096, 14336, 32, 8, True, False),  # Llama 3 8B: GQA, SwiGLU
    (6144, 24576, 48, 8, False, False),  # Nemotron-4 15B: squared ReLU, GQA
    (12288, 49152, 96, 96, False, True),  # GPT-3 175B
]


@pytest.mark.parametrize("h, f, heads, kv_heads, gated, bias", SHAPES)
@pytest.mark.parametrize("t, sp", [(1, False), (2, False), (2, True), (8, True)])
@pytest.mark.parametrize("b", [1, 3])
def test_the_casts_of_a_layer_are_the_formulas(
    h: int, f: int, heads: int, kv_heads: int, gated: bool, bias: bool, t: int, sp: bool, b: int
) -> None:
    """Each attention and MLP layer's forward, backward and weight casts, for a sweep of
    shapes, tensor parallelism with and without sequence parallelism, and micro-batches."""
    shape = _shape(h, f, heads, kv_heads, gated, bias)
    fp8 = Fp8Casts.of("fp8", shape, t, sp)
    assert fp8 is not None
    for layer in shape.build("m").layers:
        forward = forward_operations(layer, shape, b, t, fp8)
        backward = backward_operations(forward, fp8)
        if layer.kind not in ("attention", "mlp"):
            assert not _named(forward + backward), layer.name  # embedding, LM head: 16-bit
            continue
        fwd, bwd, weights = _expected(layer.kind, shape, b, t, sp)
        assert _named(forward) == fwd, layer.name
        assert _named(backward) == bwd, layer.name
        assert _named(weight_casts(forward)) == weights, layer.name
        plain = forward_operations(layer, shape, b, t)
        assert [op for op in forward if not is_cast(op)] == plain  # the kernels are unchanged
        assert [op for op in backward if not is_cast(op)] == backward_operations(plain)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32", "tf32", None])
def test_no_casts_outside_fp8(precision: str | None) -> None:
    shape = _shape(1024, 4096, 16, 16, False, True)
    assert Fp8Casts.of(precision, shape, 2, True) is None
    for layer in shape.build("m").layers:
        forward = forward_operations(layer, shape, 2, 2)
        assert not _named(forward + backward_operations(forward))


# -- the run ---------------------------------------------------------------------------------

PEAK, BANDWIDTH, MEMORY_EFFICIENCY = 500e12, 2e12, 0.8
CURVE = {"e_max": 0.8, "kernel_time": "5us"}
GPU = {
    "peaks": {"bf16": "500TFLOPS", "fp8": "500TFLOPS"},
    "efficiency": 0.7,
    "memory": "80GB",
    "memory_bandwidth": "2TB/s",
    "compute": {"curves": {"bf16": CURVE, "fp8": CURVE}, "memory_efficiency": MEMORY_EFFICIENCY},
}
"""A GPU whose fp8 products run exactly as its bf16 ones: an fp8 step differs from a bf16
step by the casts alone (weights, gradients and activations are 16-bit in both)."""


def _doc(
    shape: Transformer, precision: str, batch: int, micro_batch: int, tp: int, **more: Any
) -> dict[str, Any]:
    transformer = {
        "layers": shape.layers,
        "hidden": shape.hidden,
        "heads": shape.heads,
        "kv_heads": shape.kv_heads,
        "ffn": shape.ffn,
        "vocab": shape.vocab,
        "seq": shape.seq,
        "gated_ffn": shape.gated_ffn,
        "bias": shape.bias,
        "flash_attention": True,
    }
    return {
        "name": "casts",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {
                "gpus": tp,
                "gpu": GPU,
                "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
                "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                "nic": {"bandwidth": "200Gb/s", "latency": "2us"},
            },
        },
        "model": {"transformer": transformer},
        "training": {
            "global_batch": batch,
            "micro_batch": micro_batch,
            "iterations": 1,
            "precision": precision,
            "optimizer": "adam",
            **more.pop("training", {}),
        },
        **more,
    }


def _step_s(doc: dict[str, Any]) -> float:
    return simulate(parse_scenario(doc)).summary["iteration_time_s"]


def _cast_bytes(
    shape: Transformer, b: int, t: int, sp: bool, recompute: str
) -> tuple[float, float]:
    """(bytes per micro-batch, bytes of the weights) of the model's casts by the formulas;
    full recomputation runs the forward's casts again."""
    per_micro_batch = weights = 0.0
    for kind in ("attention", "mlp"):
        fwd, bwd, wts = _expected(kind, shape, b, t, sp)
        again = 2 if recompute == "full" else 1
        per_micro_batch += again * sum(x for _, x in fwd) + sum(x for _, x in bwd)
        weights += sum(x for _, x in wts)
    return shape.layers * per_micro_batch, shape.layers * weights


@pytest.mark.parametrize(
    "shape, micro_batches, b, tp, recompute",
    [
        (_shape(1024, 4096, 16, 16, False, True), 1, 1, 1, "none"),
        (_shape(1024, 4096, 16, 16, False, True), 3, 2, 1, "full"),
        (_shape(2048, 5632, 16, 4, True, False), 2, 1, 2, "selective"),
        (_shape(1024, 4096, 16, 16, False, True), 2, 2, 2, "full"),
    ],
)
def test_the_pipeline_step_rises_by_the_casts_bytes_over_the_bandwidth(
    shape: Transformer, micro_batches: int, b: int, tp: int, recompute: str
) -> None:
    """One replica of one stage (tp GPUs with sequence parallelism): the fp8 step is the bf16
    step plus (micro-batches x the casts of a micro-batch + the weights' once) / (bandwidth x
    memory_efficiency)."""
    more: dict[str, Any] = {
        "training": {"recompute": recompute},
        "parallelism": {"tp": tp, "pp": 1, "dp": 1, "sequence_parallel": tp > 1},
        "pipeline": {"schedule": "1f1b"},
    }
    if tp > 1:
        more["parallelism"]["tp_comm_overlap"] = False
    batch = micro_batches * b
    bf16 = _step_s(_doc(shape, "bf16", batch, b, tp, **copy.deepcopy(more)))
    fp8 = _step_s(_doc(shape, "fp8", batch, b, tp, **more))
    per_micro_batch, weights = _cast_bytes(shape, b, tp, tp > 1, recompute)
    expected = (micro_batches * per_micro_batch + weights) / (BANDWIDTH * MEMORY_EFFICIENCY)
    assert fp8 - bf16 == pytest.approx(expected, rel=1e-9)
    assert expected > 0.01 * bf16  # the casts are no rounding error


def test_zero_workers_cast_their_weights_at_every_forward() -> None:
    """ZeRO-1 with gradient accumulation on one GPU (Transformer Engine called without
    ``is_first_microbatch``): each of the 3 micro-batches casts the weights again."""
    shape = _shape(1024, 4096, 16, 16, False, True)
    more = {"zero": {"stage": 1}, "training": {"recompute": "none"}}
    bf16 = _step_s(_doc(shape, "bf16", 6, 2, 1, **copy.deepcopy(more)))
    fp8 = _step_s(_doc(shape, "fp8", 6, 2, 1, **more))
    per_micro_batch, weights = _cast_bytes(shape, 2, 1, False, "none")
    expected = 3 * (per_micro_batch + weights) / (BANDWIDTH * MEMORY_EFFICIENCY)
    assert fp8 - bf16 == pytest.approx(expected, rel=1e-9)


def test_calibrate_profile_lists_the_casts_of_a_micro_batch_and_of_the_step(
    tmp_path: Path,
) -> None:
    """The run ``calibrate profile --scenario`` fits a trace to: its micro-batch's memory-bound
    operations hold the casts, the step's the weights' casts once, and the step's bytes are
    micro-batches x the first + the second."""
    shape = _shape(1024, 4096, 16, 16, False, True)
    parallelism = {"tp": 2, "sequence_parallel": True}
    doc = _doc(shape, "fp8", 4, 2, 2, training={"recompute": "none"}, parallelism=parallelism)
    doc["cluster"]["node"] = {"preset": "dgx-h100", "gpus": 2, "nics": 2}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    base = find("h100-sxm5-80gb", "gpu")
    run = run_step(str(path), base)
    per_micro_batch, weights = _cast_bytes(shape, 2, 2, True, "none")
    assert sum(op.bytes for op in run.operations if is_cast(op)) == pytest.approx(per_micro_batch)
    assert [op.name for op in run.step_operations] == ["fp8_cast.weight"] * 4 * shape.layers
    assert sum(op.bytes for op in run.step_operations) == pytest.approx(weights)
    step = memory_step(run, base)
    listed = sum(op.bytes for op in step.operations)
    assert step.bytes == pytest.approx(listed * run.micro_batches + weights)


def test_each_chunk_casts_its_weights_in_its_first_forward_of_the_step() -> None:
    """An interleaved pipeline (pp 2, 2 chunks of one block each, 4 micro-batches): over every
    GPU, the fp8 forwards take the bf16 ones' time plus 4 x the forward casts and the weights'
    casts once, each added to the forward of micro-batch 0 of its chunk; the backwards 4 x
    the backward casts."""
    shape = dataclasses.replace(_shape(1024, 4096, 16, 16, False, True), layers=4)
    more: dict[str, Any] = {
        "training": {"recompute": "none"},
        "parallelism": {"tp": 1, "pp": 2, "dp": 1},
        "pipeline": {"schedule": "interleaved", "chunks": 2},
    }
    runs = {
        precision: simulate(parse_scenario(_doc(shape, precision, 4, 1, 2, **copy.deepcopy(more))))
        for precision in ("bf16", "fp8")
    }
    passes = {
        precision: {
            (r.resource, r.phase, r.microbatch, r.op): r.duration_s
            for r in run.records
            if r.kind == "compute" and r.phase in ("forward", "backward")
        }
        for precision, run in runs.items()
    }
    rise = {key: passes["fp8"][key] - passes["bf16"][key] for key in passes["bf16"]}
    assert len(rise) == 2 * 4 * 2 * 2  # GPUs x micro-batches x chunks x passes
    fwd = bwd = weights = 0.0
    for kind in ("attention", "mlp"):
        f, b, w = _expected(kind, shape, 1, 1, False)
        fwd, bwd = fwd + sum(x for _, x in f), bwd + sum(x for _, x in b)
        weights += sum(x for _, x in w)
    unit = BANDWIDTH * MEMORY_EFFICIENCY  # bytes per second; each chunk holds one block
    for (_, phase, microbatch, _), seconds in rise.items():
        expected = (fwd + (weights if microbatch == 0 else 0.0)) if phase == "forward" else bwd
        assert seconds == pytest.approx(expected / unit, rel=1e-9)
