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

Layers of other models keep ``Layer.activation_bytes`` per sample.  Units: bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layers import Layer, Model

RECOMPUTE_MODES = ("none", "selective", "full")
LOGSUMEXP_BYTES = 4
"""Bytes of one logsumexp a FlashAttention kernel keeps (fp32)."""


def layer_activation_bytes(
    layer: Layer,
    model: Model,
    samples: float,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Bytes ``layer`` keeps for backward on one GPU of its tensor-parallel group, for ``samples``."""
    shape = model.transformer
    if shape is None or layer.kind not in _BY_KIND:
        return layer.activation_bytes * samples
    return _BY_KIND[layer.kind](shape, samples, tp, sequence_parallel, recompute)


def block_activation_bytes(
    shape: object,
    samples: float,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Bytes one transformer block (attention + mlp) keeps, per GPU; Korthikanti's table."""
    return _attention(shape, samples, tp, sequence_parallel, recompute) + _mlp(
        shape, samples, tp, sequence_parallel, recompute
    )


def _dims(shape: object, samples: float) -> tuple[float, float, float]:
    s, h = shape.seq, shape.hidden  # type: ignore[attr-defined]
    return s * samples * h, s, h


def _split(whole: float, divided: float, tp: int, sequence_parallel: bool) -> float:
    """Bytes per GPU: ``divided`` splits over t, ``whole`` too with sequence parallelism."""
    return (whole / tp if sequence_parallel else whole) + divided / tp


def _attention(shape: object, samples: float, tp: int, sp: bool, recompute: str) -> float:
    sbh, s, h = _dims(shape, samples)
    if recompute == "full":
        return 2 * sbh / (tp if sp else 1)
    heads = shape.heads  # type: ignore[attr-defined]
    kv = (getattr(shape, "kv_heads", None) or heads) / heads
    dropout = getattr(shape, "dropout", True)
    whole = (2 + 2 + (1 if dropout else 0)) * sbh
    divided = (2 + 4 * kv + 2) * sbh
    if getattr(shape, "flash_attention", False):
        divided += LOGSUMEXP_BYTES * heads * s * samples  # fp32 logsumexp, a s b values
    elif recompute != "selective":
        scores = heads * s * s * samples  # a s^2 b values
        divided += (5 if dropout else 2) * scores
    return _split(whole, divided, tp, sp)


def _mlp(shape: object, samples: float, tp: int, sp: bool, recompute: str) -> float:
    sbh, _s, h = _dims(shape, samples)
    if recompute == "full":
        return 0.0
    dropout = getattr(shape, "dropout", True)
    ffn = shape.ffn / h  # type: ignore[attr-defined]
    values = (6 if getattr(shape, "gated_ffn", False) else 4) * ffn
    whole = (2 + 2 + (1 if dropout else 0)) * sbh
    return _split(whole, values * sbh, tp, sp)


def _moe(shape: object, samples: float, tp: int, sp: bool, recompute: str) -> float:
    sbh, _s, h = _dims(shape, samples)
    if recompute == "full":
        return 0.0
    moe = shape.moe  # type: ignore[attr-defined]
    dropout = getattr(shape, "dropout", True)
    copies = moe.capacity_factor * moe.top_k + moe.shared_experts
    values = (6 if getattr(shape, "gated_ffn", False) else 4) * copies * moe.expert_ffn / h
    whole = (2 + 2 + (1 if dropout else 0)) * sbh
    return _split(whole, values * sbh, tp, sp)


def _embedding(shape: object, samples: float, tp: int, sp: bool, recompute: str) -> float:
    sbh, _s, _h = _dims(shape, samples)
    if not getattr(shape, "dropout", True):
        return 0.0
    return sbh / (tp if sp else 1)


def _head(shape: object, samples: float, tp: int, sp: bool, recompute: str) -> float:
    sbh, s, _h = _dims(shape, samples)
    norm = 2 * sbh / (tp if sp else 1) if getattr(shape, "final_norm", True) else 0.0
    logits = 4 * s * samples * shape.vocab / tp if getattr(shape, "head", "tied") else 0.0  # type: ignore[attr-defined]
    return norm + logits


_BY_KIND = {
    "attention": _attention,
    "mlp": _mlp,
    "moe": _moe,
    "embedding": _embedding,
    "head": _head,
}
