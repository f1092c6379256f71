"""The kernels of a mixture-of-experts layer (:mod:`clustersim.model.moe_operators`).

Held to the byte counts and shapes written out here from Megatron-Core's MoE code
(core_v0.11.0: ``moe_utils.permute`` / ``unpermute``, the all-to-all and all-gather token
dispatchers, ``TEGroupedMLP``; the router's ``torch.nn.functional.linear``) and Transformer
Engine's GroupedLinear (v2.1), for ``R = b s`` rows, hidden ``h``, ``E`` experts of width
``f``, top-``k``, tensor parallelism ``t``, expert parallelism ``e``:

* all-to-all dispatcher (``e > 1``): ``permute`` reads and writes the ``R k / t`` copies a GPU
  sends, ``4 R k h / t`` bytes; ``unpermute`` scales them by their probabilities (``4``),
  zeroes the ``R / t`` restored rows (``2``), scatter-adds the copies (read ``2``) into them
  (read and written ``4``): ``(6 R k / t + 6 R / t) h`` bytes; with more than one local
  expert the received ``R k`` copies are regrouped before and after the experts, ``4 R k h``
  bytes each;
* all-gather dispatcher (``e = 1``, Megatron-Core's default): the same on the gathered rows,
  ``P = R k`` copies, ``G = R`` rows;
* per local expert a product ``(R k e / E) x (g f / t) x h`` and ``(R k e / E) x h x (f /
  t)``, one per expert (TE's grouped GEMM is one cuBLAS GEMM per group);
* fp8: each expert product's input cast and transposed (4 bytes per ``m x k`` value), its
  output gradient likewise (4 per ``m x n``), its weight once (4 per ``n x k``); the router
  none, and priced at the 16-bit rate.
"""

from __future__ import annotations

import pytest

from clustersim.compute import ProductRate, compute_model, curve_at
from clustersim.model.fp8_casts import Fp8Casts, is_cast, weight_casts
from clustersim.model.moe import MoE
from clustersim.model.moe_operators import moe_operations, permuted_rows
from clustersim.model.operators import backward_operations, forward_operations
from clustersim.model.transformer import Transformer

S = 512
"""Sequence length of every shape here."""


def _shape(experts: int, top_k: int, shared: int = 0, gated: bool = True) -> Transformer:
    moe = MoE(experts=experts, top_k=top_k, blocks=(0, 1), expert_ffn=1024, shared_experts=shared)
    return Transformer(
        layers=2,
        hidden=512,
        heads=8,
        ffn=2048,
        vocab=1000,
        seq=S,
        gated_ffn=gated,
        bias=False,
        moe=moe,
        flash_attention=True,
    )


def _moe_layer(shape: Transformer):
    model = shape.build("m")
    return next(layer for layer in model.layers if layer.kind == "moe")


def _by_name(ops, name):
    return [op for op in ops if op.name == name]


@pytest.mark.parametrize("experts,top_k,ep,tp", [(8, 2, 8, 1), (8, 2, 1, 8), (16, 1, 4, 2)])
@pytest.mark.parametrize("shared,gated", [(0, True), (1, True), (2, False)])
def test_products_add_up_to_the_layer_flops(experts, top_k, ep, tp, shared, gated):
    """Router, experts and shared experts: the layer's FLOPs (router 2 s h E + active experts)
    x b / t, whatever the split over tp and ep."""
    shape = _shape(experts, top_k, shared, gated)
    b = 3
    ops = moe_operations(shape, b, tp, ep)
    assert sum(op.flops for op in ops) == pytest.approx(shape.moe_flops * b / tp, rel=1e-12)


@pytest.mark.parametrize("experts,top_k,ep", [(8, 2, 8), (8, 2, 2), (16, 1, 16), (64, 6, 8)])
def test_one_product_per_local_expert_at_its_mean_load(experts, top_k, ep):
    """E / e products of each kind, each of R k e / E rows: fc1 n = 2 f / t (gated), k = h;
    fc2 n = h, k = f / t."""
    shape, b, tp = _shape(experts, top_k), 2, 2
    ops = moe_operations(shape, b, tp, ep)
    fc1, fc2 = _by_name(ops, "expert_fc1"), _by_name(ops, "expert_fc2")
    rows = b * S * top_k * ep / experts
    assert len(fc1) == len(fc2) == experts // ep
    assert {(op.m, op.n, op.k) for op in fc1} == {(round(rows), 2 * 1024 // tp, 512)}
    assert {(op.m, op.n, op.k) for op in fc2} == {(round(rows), 512, 1024 // tp)}
    assert fc1[0].flops == pytest.approx(2 * rows * 2 * 1024 / tp * 512)


def test_alltoall_permutation_bytes():
    """e > 1: permute 4 R k h / t, unpermute (6 R k / t + 6 R / t) h, and with 2 local
    experts the regrouping 4 R k h before and after the experts (written out)."""
    shape, b, tp, ep, k, h = _shape(8, 2), 2, 2, 4, 2, 512
    rows = b * S
    ops = moe_operations(shape, b, tp, ep)
    assert _by_name(ops, "permute")[0].bytes == 4 * rows * k * h / tp
    assert _by_name(ops, "unpermute")[0].bytes == (6 * rows * k / tp + 6 * rows / tp) * h
    assert [op.bytes for op in _by_name(ops, "sort_chunks")] == [4 * rows * k * h] * 2
    assert permuted_rows(shape, b, tp, ep) == (rows * k / tp, rows / tp)


def test_allgather_permutation_bytes():
    """e = 1 (Megatron-Core's default all-gather dispatcher): every gathered copy permuted,
    4 R k h, and restored, (6 R k + 6 R) h; no regrouping."""
    shape, b, tp, k, h = _shape(8, 2), 3, 4, 2, 512
    rows = b * S
    ops = moe_operations(shape, b, tp, 1)
    assert _by_name(ops, "permute")[0].bytes == 4 * rows * k * h
    assert _by_name(ops, "unpermute")[0].bytes == (6 * rows * k + 6 * rows) * h
    assert not _by_name(ops, "sort_chunks")


def test_one_local_expert_needs_no_regrouping():
    """e = E: one expert per GPU, nothing to regroup (Mixtral at ep 8)."""
    assert not _by_name(moe_operations(_shape(8, 2), 1, 1, 8), "sort_chunks")


def test_router_activation_and_norm_bytes():
    """Router scores 18 bytes each (R E / t of them); the SwiGLU 6 bytes per N f / t value
    (N = R k), GeLU 4; the norm and residual 11 bytes per R h value."""
    b, tp, ep = 2, 2, 2
    rows = b * S
    gated = moe_operations(_shape(8, 2), b, tp, ep)
    plain = moe_operations(_shape(8, 2, gated=False), b, tp, ep)
    assert _by_name(gated, "router_topk")[0].bytes == 18 * rows * 8 / tp
    assert _by_name(gated, "activation")[0].bytes == 6 * rows * 2 * 1024 / tp
    assert _by_name(plain, "activation")[0].bytes == 4 * rows * 2 * 1024 / tp
    assert _by_name(gated, "norm_residual")[0].bytes == 11 * rows * 512
    router = _by_name(gated, "router")[0]
    assert (router.m, router.n, router.k) == (rows // tp, 8, 512)


def test_shared_experts_run_on_every_row():
    """S shared experts: one MLP of width S f over all R rows, split t ways."""
    b, tp = 2, 2
    ops = moe_operations(_shape(8, 2, shared=2), b, tp, 4)
    (fc1,), (fc2,) = _by_name(ops, "shared_fc1"), _by_name(ops, "shared_fc2")
    assert (fc1.m, fc1.n, fc1.k) == (b * S, 2 * 2 * 1024 // tp, 512)
    assert (fc2.m, fc2.n, fc2.k) == (b * S, 512, 2 * 1024 // tp)


def test_ep_must_divide_the_experts():
    with pytest.raises(ValueError, match="does not divide"):
        moe_operations(_shape(8, 2), 1, 1, 3)


def test_fp8_casts_of_the_expert_products():
    """Each expert product: input 4 m k bytes forward, output gradient 4 m n backward, weight
    4 n k once; none for the router (written out for 2 local experts at ep 4, t 2)."""
    shape, b, tp, ep = _shape(8, 2, shared=1), 2, 2, 4
    layer = _moe_layer(shape)
    fp8 = Fp8Casts(tp)  # sequence parallelism: the experts' rows are gathered all the same
    fwd = forward_operations(layer, shape, b, tp, fp8, ep)
    m, f, h = b * S * 2 * ep / 8, 1024 // tp, 512
    rows = b * S
    inputs = sorted(op.bytes for op in fwd if op.name == "fp8_cast.input")
    want_in = [4 * m * h] * 2 + [4 * m * f] * 2 + [4 * rows * h, 4 * rows * f]
    assert inputs == pytest.approx(sorted(want_in))
    bwd = backward_operations(fwd, fp8)
    grads = sorted(op.bytes for op in bwd if op.name == "fp8_cast.grad_output")
    want_grad = [4 * m * 2 * f] * 2 + [4 * m * h] * 2 + [4 * rows * 2 * f, 4 * rows * h]
    assert grads == pytest.approx(sorted(want_grad))
    assert not [op for op in bwd if op.name.startswith("fp8_transpose")]
    weights = sorted(op.bytes for op in weight_casts(fwd))
    want_w = [4 * 2 * f * h] * 2 + [4 * h * f] * 2 + [4 * 2 * f * h, 4 * h * f]
    assert weights == pytest.approx(sorted(want_w))


def test_router_runs_at_the_sixteen_bit_rate():
    """Megatron-Core's router is not Transformer Engine's: with a 16-bit rate of half the
    fp8 peak, the router product takes twice its fp8 time; an expert product does not."""
    curve = curve_at(0.8, 0.0, 2e15)
    half = ProductRate(1e15, curve_at(0.8, 0.0, 1e15))
    fp8 = compute_model("roofline", 2e15, 1.0, 1e18, curve)
    mixed = compute_model("roofline", 2e15, 1.0, 1e18, curve, sixteen_bit=half)
    ops = moe_operations(_shape(8, 2), 1, 1, 8)
    router, expert = _by_name(ops, "router")[0], _by_name(ops, "expert_fc1")[0]
    assert mixed.operation_seconds(router) == pytest.approx(2 * fp8.operation_seconds(router))
    assert mixed.operation_seconds(expert) == pytest.approx(fp8.operation_seconds(expert))


def test_moe_layer_prices_its_memory_bound_kernels():
    """On a device of finite memory bandwidth the layer takes its products' time plus its
    memory-bound kernels' bytes over the bandwidth (the layer was one shapeless product
    before: memory-bound work free)."""
    shape, b = _shape(8, 2), 2
    model = compute_model("roofline", 1e15, 1.0, 1e12, curve_at(1.0, 0.0, 1e15))
    ops = forward_operations(_moe_layer(shape), shape, b, 1, None, 8)
    memory = [op for op in ops if not op.flops]
    products = [op for op in ops if op.flops]
    assert not [op for op in ops if is_cast(op)]
    want = model.seconds(products) + sum(op.bytes for op in memory) / 1e12
    assert model.seconds(ops) == pytest.approx(want)
    assert model.seconds(products) >= sum(op.flops for op in products) / 1e15
    assert sum(op.bytes for op in memory) > 0
