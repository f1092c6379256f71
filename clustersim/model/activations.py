"""Activation memory of transformer layers (Korthikanti et al. 2022).

"Reducing Activation Recomputation in Large Transformer Models" counts the
bytes one transformer block keeps for its backward pass, with 16-bit
activations, sequence length s, micro-batch b, hidden size h, a heads and a
tensor-parallel group of t GPUs:

=========================================  =========================
no parallelism                             s b h (34 + 5 a s / h)
tensor parallel                            s b h (10 + 24/t + 5 a s / (h t))
tensor + sequence parallel                 s b h (34/t + 5 a s / (h t))
tensor parallel + selective recompute      s b h (10 + 24/t)
tensor + sequence + selective recompute    s b h (34/t)
full recompute                             2 s b h (the block input)
=========================================  =========================

Our models split a block into an ``attention`` and an ``mlp`` layer, so the
block's bytes are split the same way:

* attention: layer-norm input 2sbh, QKV input 2sbh, Q 2sbh, K and V 2sbh each
  (x kv_heads / heads with grouped-query attention), softmax output 2as^2b,
  its dropout mask as^2b, dropout output 2as^2b, output-projection input 2sbh,
  output dropout mask sbh: 13 sbh + 5 a s^2 b.  The layer-norm input, QKV
  input and output mask (5 sbh) stay whole on every GPU of a tensor-parallel
  group unless sequence parallelism splits them; the rest divides by t.
* mlp: layer-norm input 2sbh, first-linear input 2sbh, GeLU input and output
  2sbf each (f = 4h: 16 sbh; gated FFNs keep gate, up and product outputs,
  6 sbf), dropout mask sbh: 21 sbh for f = 4h, of which 5 sbh are whole.
* Models without dropout (``Transformer.dropout`` false, e.g. LLaMA) keep no
  masks and no dropout output: attention 12 sbh + 2 a s^2 b (with
  whole part 4 sbh), mlp 4 sbh + the FFN values (whole part 4 sbh).
* FlashAttention (``Transformer.flash_attention``): no a s^2 terms; the fused
  kernel keeps the fp32 logsumexp of each row and head, 4 a s b bytes (divided by t
  with the heads), and selective recomputation has nothing left to drop.
* moe (a mixture-of-experts layer, :mod:`clustersim.model.moe`): as mlp, with the
  FFN values of ``c k + shared`` experts of width f_e (c the capacity factor).
* selective recomputation drops the a s^2 terms (softmax and dropout are
  recomputed); full recomputation keeps only each block's input, 2 sbh
  (2 sbh / t with sequence parallelism), counted on the attention layer.
* embedding: the dropout mask of its output, sbh; head: the final-norm input
  2sbh and the fp32 logits of the cross entropy 4 s b V / t (vocabulary-
  parallel).  Neither is recomputed.

The table counts 16-bit activations (2 bytes a value, 1 byte a dropout mask).  Training
in fp32 or tf32 stores 4-byte values (PyTorch keeps a tensor in its dtype): every value term
scales by ``value_bytes / 2`` (:func:`activation_value_bytes`), the 1-byte masks, the fp32
logits and the fp32 logsumexp stay as they are.  With ``value_bytes`` = 2 (16-bit formats,
and fp8 as Transformer Engine trains) the bytes are Korthikanti's exactly.

Layers of other models keep ``Layer.activation_bytes`` per sample.  Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layers import Layer, Model

RECOMPUTE_MODES = ("none", "selective", "full")
LOGSUMEXP_BYTES = 4
"""Bytes of one logsumexp a FlashAttention kernel keeps (fp32)."""
HALF_BYTES = 2.0
"""Bytes of a 16-bit activation value: the unit of Korthikanti et al.'s table."""
MASK_BYTES = 1
"""Bytes of one dropout-mask element (a bool)."""


def activation_value_bytes(precision: str) -> float:
    """Bytes of one stored activation value when training in ``precision``: 4 for fp32 and
    tf32 (tensors stay fp32), 2 for fp16, bf16 and fp8 (Transformer Engine keeps its
    activations in 16 bits) -- :data:`clustersim.model.layers.BYTES_PER_VALUE`."""
    from .layers import BYTES_PER_VALUE

    return float(BYTES_PER_VALUE[precision])


def layer_activation_bytes(
    layer: Layer,
    model: Model,
    samples: float,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    value_bytes: float = HALF_BYTES,
) -> float:
    """Bytes ``layer`` keeps for backward on one GPU of its tensor-parallel group, for
    ``samples``, with activation values of ``value_bytes`` bytes (:func:`activation_value_bytes`;
    a layer of another model keeps its own ``activation_bytes``)."""
    shape = model.transformer
    if shape is None or layer.kind not in _BY_KIND:
        return layer.activation_bytes * samples
    kept = _Kept(tp, sequence_parallel, recompute, value_bytes)
    return _BY_KIND[layer.kind](shape, samples, kept)


def block_activation_bytes(
    shape: object,
    samples: float,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    value_bytes: float = HALF_BYTES,
) -> float:
    """Bytes one transformer block (attention + mlp) keeps, per GPU; Korthikanti's table."""
    kept = _Kept(tp, sequence_parallel, recompute, value_bytes)
    return _attention(shape, samples, kept) + _mlp(shape, samples, kept)


@dataclass(frozen=True)
class _Kept:
    """How a layer keeps its activations: tensor-parallel group, sequence parallelism,
    recomputation and the bytes of one value."""

    tp: int
    sp: bool
    recompute: str
    value_bytes: float

    @property
    def v(self) -> float:
        """Bytes of a value in units of Korthikanti's 16-bit ones (1 in 16 bits, 2 in fp32)."""
        return self.value_bytes / HALF_BYTES


def _dims(shape: object, samples: float) -> tuple[float, float, float]:
    s, h = shape.seq, shape.hidden  # type: ignore[attr-defined]
    return s * samples * h, s, h


def _split(whole: float, divided: float, kept: _Kept) -> float:
    """Bytes per GPU: ``divided`` splits over t, ``whole`` too with sequence parallelism."""
    return (whole / kept.tp if kept.sp else whole) + divided / kept.tp


def _mask(shape: object) -> float:
    """Bytes per element of a dropout mask: 1, or 0 for a model without dropout."""
    return MASK_BYTES if getattr(shape, "dropout", True) else 0


def _attention(shape: object, samples: float, kept: _Kept) -> float:
    sbh, s, h = _dims(shape, samples)
    v = kept.v
    if kept.recompute == "full":
        return 2 * v * sbh / (kept.tp if kept.sp else 1)
    heads = shape.heads  # type: ignore[attr-defined]
    kv = (getattr(shape, "kv_heads", None) or heads) / heads
    mask = _mask(shape)
    whole = (2 * v + 2 * v + mask) * sbh  # layer-norm input, QKV input, output dropout mask
    divided = (2 + 4 * kv + 2) * v * sbh  # Q, K and V, output-projection input
    if getattr(shape, "flash_attention", False):
        divided += LOGSUMEXP_BYTES * heads * s * samples  # fp32 logsumexp, a s b values
    elif kept.recompute != "selective":
        scores = heads * s * s * samples  # a s^2 b values
        # softmax output, with dropout also its mask and its output
        divided += (2 * v + mask + 2 * v if mask else 2 * v) * scores
    return _split(whole, divided, kept)


def _ffn_values(shape: object, width: float) -> float:
    """16-bit bytes per token of an FFN of ``width``, in units of s b h: GeLU input and
    output (2 s b f each), or gate, up and their product (SwiGLU)."""
    h = shape.hidden  # type: ignore[attr-defined]
    return (6 if getattr(shape, "gated_ffn", False) else 4) * width / h


def _mlp(shape: object, samples: float, kept: _Kept) -> float:
    sbh, _s, _h = _dims(shape, samples)
    if kept.recompute == "full":
        return 0.0
    v = kept.v
    whole = (2 * v + 2 * v + _mask(shape)) * sbh  # layer-norm input, first-linear input, mask
    values = v * _ffn_values(shape, shape.ffn)  # type: ignore[attr-defined]
    return _split(whole, values * sbh, kept)


def _moe(shape: object, samples: float, kept: _Kept) -> float:
    sbh, _s, _h = _dims(shape, samples)
    if kept.recompute == "full":
        return 0.0
    v = kept.v
    moe = shape.moe  # type: ignore[attr-defined]
    copies = moe.capacity_factor * moe.top_k + moe.shared_experts
    values = v * copies * _ffn_values(shape, moe.expert_ffn)
    whole = (2 * v + 2 * v + _mask(shape)) * sbh
    return _split(whole, values * sbh, kept)


def _embedding(shape: object, samples: float, kept: _Kept) -> float:
    sbh, _s, _h = _dims(shape, samples)
    return _mask(shape) * sbh / (kept.tp if kept.sp else 1)


def _head(shape: object, samples: float, kept: _Kept) -> float:
    sbh, s, _h = _dims(shape, samples)
    norm = (
        2 * kept.v * sbh / (kept.tp if kept.sp else 1)
        if getattr(shape, "final_norm", True)
        else 0.0
    )
    logits = 4 * s * samples * shape.vocab / kept.tp if getattr(shape, "head", "tied") else 0.0  # type: ignore[attr-defined]
    return norm + logits


_BY_KIND = {
    "attention": _attention,
    "mlp": _mlp,
    "moe": _moe,
    "embedding": _embedding,
    "head": _head,
}
