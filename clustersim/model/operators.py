"""The kernels of a transformer layer on one GPU: matrix products with their shapes and the
memory-bound kernels between them, for forward and backward (Megatron-LM's layout).

For a micro-batch of ``b`` sequences of ``s`` tokens, hidden ``h``, ``a`` heads of size
``d = h / a`` (``head_dims`` gives the query/key and value widths where they differ, as
DeepSeek's MLA does), feed-forward ``f``, vocabulary ``V`` and tensor parallelism ``t``
(Narayanan et al. 2021, Section 2.3: heads, the first MLP matrix's columns, the second's
rows and the vocabulary split ``t`` ways; layer norms, dropouts and residual adds are
replicated):

* attention: ``qkv`` (m = b s, n = (h + 2 h_kv) / t, k = h); ``scores`` (b a / t products
  of s x d by d x s); ``softmax`` (memory-bound: scale, mask, softmax and dropout of the
  b a s^2 / t scores: reads and writes 2 bytes each, plus a 1-byte mask, 9 bytes per
  score with dropout, 4 without); ``context`` (b a / t products s x s by s x d); ``proj``
  (m = b s, n = h, k = h / t); ``norm_residual`` (memory-bound: layer norm and
  bias-dropout-add, 11 bytes per b s h value: 2 read + 2 written by the norm, 2 x 2 read +
  2 written + 1 mask by the add).
* attention with FlashAttention (``Transformer.flash_attention``; Dao et al. 2022, Dao
  2023): ``qkv``, one fused ``flash_attention`` kernel in place of ``scores``, ``softmax``
  and ``context`` (FLOPs those of the two score products, ``2 b s^2 a (d_qk + d_v) / t``;
  bytes: Q, K and V read and the output written, 2 bytes each, and the fp32 logsumexp
  of each row and head written, 4 b a s / t), ``proj``, ``norm_residual``.  A causal
  model's kernel skips the blocks above the diagonal: its hardware ``work`` is 0.5 of the
  counted FLOPs (Dao 2023, Section 4.1, halves the FLOPs of a causal kernel; the FLOP
  count of the model keeps the full s^2, as Megatron's and PaLM's do).
* mlp: ``fc1`` (m = b s, n = f / t, x 2 gated, k = h); ``activation`` (memory-bound: GeLU
  reads and writes b s f / t values, 4 bytes each; gated: 3 reads and writes of them, 6);
  ``fc2`` (m = b s, n = h, k = f / t); ``norm_residual`` as above.
* moe: the router, the token permutation and unpermutation and the experts' products per
  local expert, as Megatron-Core runs them (:mod:`.moe_operators`).
* head: ``logits`` (m = b s, n = V / t, k = h) and ``cross_entropy`` (memory-bound: the
  fp32 logits written and read twice, 12 bytes per b s V / t value).

Backward: each product twice (gradient of the input, m x n by n x k; of the weight, k x m
by m x n: the same FLOPs), each memory-bound kernel 1.5 x its forward bytes (it reads the
saved tensor and the incoming gradient and writes one gradient where the forward read one
and wrote one).  The fused attention's backward is one kernel of 2 x its forward FLOPs
(what the model counts) whose hardware ``work`` is 1.25 x that: it recomputes the scores
QK^T and the softmax from Q, K and the logsumexp, so it runs 5 products where the forward
runs 2: 2.5 x the forward's FLOPs (Dao 2023, Section 4.1; the FLOP count of the
FlashAttention repository's benchmarks/benchmark_flash_attention.py), x 0.5 when causal.
It reads Q, K, V, the output, its gradient (2 bytes each), the logsumexp and the row sums
of dO x O (fp32), and writes dQ, dK and dV: twice the forward's bytes.  The products' FLOPs
add up to the layer's FLOPs (:mod:`.transformer`) divided by ``t``; the memory-bound
kernels add time, no FLOPs.  Layers of other kinds (an embedding, a pooler) are one
shapeless operation of their FLOPs.

fp8 training (``fp8``, :class:`~.fp8_casts.Fp8Casts`): Transformer Engine's casts and
transposes of the attention and MLP layers' products, memory-bound operations
(:mod:`.fp8_casts`), follow the forward's kernels and the backward's; the weights' casts,
once per step, are :func:`~.fp8_casts.weight_casts`'.
"""

from __future__ import annotations

from ..compute.models import Operation
from .fp8_casts import Fp8Casts, backward_casts, forward_casts, is_cast
from .layers import Layer
from .moe_operators import moe_operations
from .transformer import ACTIVATION_BYTES_PER_VALUE, Transformer

BACKWARD_BYTES = 1.5
"""Bytes of a memory-bound kernel's backward per byte of its forward."""
FLASH = "flash_attention"
"""Name of the fused attention kernel."""
FLASH_BACKWARD_WORK = 1.25
"""Hardware FLOPs of a FlashAttention backward per counted FLOP: it runs 2.5 x the forward
(Dao 2023, Section 4.1) where the model counts 2 x (the scores are recomputed inside)."""
CAUSAL_WORK = 0.5
"""Share of the score blocks a causal FlashAttention kernel computes (the rest is masked)."""
FP32_BYTES = 4
"""Bytes of one fp32 value (the logsumexp and dO x O row sums of the fused attention)."""
CAST_KINDS = ("attention", "mlp", "moe")
"""Layers whose products are Transformer Engine's, with fp8 casts in fp8 training."""


def product_bytes(m: int, n: int, k: int, batch: int = 1) -> float:
    """Bytes a product of ``batch`` (m x k) by (k x n) matrices reads and writes: its two
    operands and its result, 16 bits each."""
    return 2.0 * batch * (m * k + k * n + m * n)


def _product(name: str, m: int, n: int, k: int, batch: int = 1) -> Operation:
    return Operation(name, m, n, k, batch, 2.0 * batch * m * n * k, product_bytes(m, n, k, batch))


def _memory(name: str, nbytes: float) -> Operation:
    return Operation(name, 0, 0, 0, 0, 0.0, nbytes)


def forward_operations(
    layer: Layer,
    shape: Transformer | None,
    b: int,
    tp: int,
    fp8: Fp8Casts | None = None,
    ep: int = 1,
) -> list[Operation]:
    """The forward kernels of ``layer`` for a micro-batch of ``b`` sequences on one of ``tp``
    GPUs (and, for an MoE layer, of ``ep`` expert-parallel ones: :mod:`.moe_operators`); with
    ``fp8``, an attention, MLP or MoE layer's fp8 casts after them."""
    if shape is not None and shape.moe is not None and layer.kind == "moe":
        ops = moe_operations(shape, b, tp, ep)
    else:
        ops = _forward(layer, shape, b, tp)
    if fp8 is not None and layer.kind in CAST_KINDS:
        ops += forward_casts(ops, fp8)
    return ops


def _forward(layer: Layer, shape: Transformer | None, b: int, tp: int) -> list[Operation]:
    if shape is None or layer.kind not in ("attention", "mlp", "head"):
        if layer.forward_flops <= 0:
            return []
        return [Operation(layer.kind or "layer", 0, 0, 0, 1, layer.forward_flops * b / tp, 0.0)]
    s, h, a, t = shape.seq, shape.hidden, shape.heads, tp
    rows, heads = b * s, b * a // t if (b * a) % t == 0 else b * a / t
    norm = _memory("norm_residual", 11.0 * rows * h)
    if layer.kind == "attention" and shape.flash_attention:
        return [
            _product("qkv", rows, (h + 2 * shape.kv_hidden) // t, h),
            _flash_attention(shape, b, t),
            _product("proj", rows, h, h // t),
            norm,
        ]
    if layer.kind == "attention":
        per_score = 9.0 if shape.dropout else 4.0
        qk, v = _head_widths(shape)
        return [
            _product("qkv", rows, (h + 2 * shape.kv_hidden) // t, h),
            _product("scores", s, s, qk, heads),
            _memory("softmax", per_score * heads * s * s),
            _product("context", s, v, s, heads),
            _product("proj", rows, h, h // t),
            norm,
        ]
    if layer.kind == "mlp":
        f = shape.ffn // t
        return [
            _product("fc1", rows, f * (2 if shape.gated_ffn else 1), h),
            _memory("activation", (6.0 if shape.gated_ffn else 4.0) * rows * f),
            _product("fc2", rows, h, f),
            norm,
        ]
    ops = []
    if shape.head is not None:
        v = shape.vocab // t
        ops += [_product("logits", rows, v, h), _memory("cross_entropy", 12.0 * rows * v)]
    if shape.pooler:
        ops.append(Operation("pooler", 0, 0, 0, 1, 2.0 * h * h * b / t, 0.0))
    return ops


def _head_widths(shape: Transformer) -> tuple[int, int]:
    """(query/key, value) width of one head."""
    return shape.head_dims or (shape.hidden // shape.heads, shape.hidden // shape.heads)


def _flash_attention(shape: Transformer, b: int, t: int) -> Operation:
    """The fused attention kernel of ``b`` sequences on one of ``t`` GPUs (module docstring):
    an ``s x s x (d_qk + d_v)`` product per head and sequence, bytes of Q, K, V, O and the
    logsumexp."""
    s, a, kv = shape.seq, shape.heads, shape.kv_heads or shape.heads
    qk, v = _head_widths(shape)
    heads = b * a // t if (b * a) % t == 0 else b * a / t
    flops = 2.0 * heads * s * s * (qk + v)
    values = b * s * (a * (qk + v) + kv * (qk + v)) / t  # Q and O; K and V
    nbytes = ACTIVATION_BYTES_PER_VALUE * values + FP32_BYTES * b * a * s / t
    work = CAUSAL_WORK if shape.causal else 1.0
    return Operation(FLASH, s, s, qk + v, heads, flops, nbytes, work)


def _flash_backward(op: Operation) -> Operation:
    """Twice the forward's FLOPs at 1.25 x the work; twice its bytes (Q, K, V read and dQ,
    dK, dV written; O and dO read; the logsumexp and the dO x O row sums read)."""
    return op._replace(
        name=FLASH + ".backward",
        flops=2.0 * op.flops,
        bytes=2.0 * op.bytes,
        work=FLASH_BACKWARD_WORK * op.work,
    )


def backward_operations(forward: list[Operation], fp8: Fp8Casts | None = None) -> list[Operation]:
    """The backward kernels of ``forward``: two products per product, 1.5 x the bytes of
    each memory-bound kernel, twice the FLOPs of a shapeless operation, one fused kernel of
    twice the FLOPs (and 1.25 x the work) of a FlashAttention kernel; with ``fp8``, the
    backward's fp8 casts of ``forward``'s products after them (the forward's own casts have
    no backward)."""
    out: list[Operation] = []
    for op in forward:
        if is_cast(op):
            continue
        if op.name == FLASH:
            out.append(_flash_backward(op))
        elif op.m:
            out.append(_product(op.name + ".dgrad", op.m, op.k, op.n, op.batch))
            out.append(_product(op.name + ".wgrad", op.k, op.n, op.m, op.batch))
        elif op.flops:
            out.append(op._replace(flops=2.0 * op.flops))
        else:
            out.append(op._replace(bytes=BACKWARD_BYTES * op.bytes))
    if fp8 is not None:
        out += backward_casts(forward, fp8)
    return out
