"""Transformer shapes: parameters, FLOPs and activation bytes that follow from the architecture.

A :class:`Transformer` is the shape of a decoder (GPT, LLaMA) or encoder
(BERT); :meth:`Transformer.build` turns it into a
:class:`~clustersim.strategies.training.Model` of layers: ``embedding``, then
``layer{i}.attention`` and ``layer{i}.mlp`` per block, then ``head`` (final
norm, LM head, pooler -- those the model has).  Each layer carries its
:attr:`~clustersim.strategies.training.Layer.kind` and the model keeps the shape in
``Model.transformer``.

Notation (Narayanan et al. 2021; Korthikanti et al. 2022): ``l`` blocks,
hidden size ``h``, ``a`` heads, feed-forward width ``f``, sequence ``s``,
vocabulary ``V``, micro-batch ``b``; ``h_kv = kv_heads x h / a`` is the width
of K and V (``h`` without grouped-query attention).

**Parameters** are counted as PyTorch does; a tied LM head shares the token
embedding and adds none.

**FLOPs** (a multiply-add is 2 FLOPs; matrix products only): per sequence, an
attention layer does ``2 s h (h + 2 h_kv)`` (QKV) + ``2 s h^2`` (output
projection) + ``4 s^2 h`` (scores QK^T and their product with V); an MLP
layer ``4 s h f`` (``6 s h f`` gated); the LM head ``2 s h V``.  With
``f = 4h`` a block is ``24 s h^2 + 4 s^2 h``.  Backward is 2 x forward.

**Activation bytes** are Korthikanti et al.'s tensors kept for the backward
pass, 16-bit (2 bytes) each, per sequence (b = 1), no tensor parallelism, no
recomputation (:mod:`clustersim.model.activations` has the same numbers with
tensor/sequence parallelism and recomputation):

* attention: layer-norm input 2sh, QKV input 2sh, Q 2sh, K and V 2 s h_kv
  each, softmax output 2as^2, its dropout mask as^2, the dropout output (the
  input of the product with V) 2as^2, output-projection input 2sh, output
  dropout mask sh.  With ``h_kv = h``: 13 sh + 5 a s^2 (the paper's 11 sh +
  5 a s^2 plus the block's first layer norm).
* mlp: layer-norm input 2sh, first-linear input 2sh, the activation
  function's input and output 2sf each, dropout mask sh: 5 sh + 4 sf, i.e.
  21 sh for f = 4h (the paper's 19 sh plus the second layer norm).  A gated
  FFN (SwiGLU) keeps the gate and up projections' outputs and their product
  (the input of the down projection), 6 sf; its SiLU output is recomputed from
  the gate output, as Megatron-LM's fused SwiGLU does.
* so a GPT block keeps 34 sh + 5 a s^2 bytes, the paper's ``s b h (34 + 5 a s / h)``.
* without dropout (``dropout=False``, LLaMA) the masks are not kept and the
  softmax output is itself the input of the product with V: attention
  8 sh + 4 s h_kv + 2 a s^2, mlp 4 sh + 4 sf (6 sf gated).
* with FlashAttention (``flash_attention=True``; Dao et al. 2022, Dao 2023) scores,
  softmax, dropout and the product with V are one fused kernel that never writes the
  s x s scores to device memory: the a s^2 terms go, and the kernel keeps the
  per-row logsumexp of the softmax, 4 a s bytes (fp32), for its backward (the
  dropout mask is regenerated from the RNG state, a few bytes, not counted): attention
  13 sh + 4 as with dropout, 8 sh + 4 s h_kv + 4 as without.  Q, K, V and the output
  (the output projection's input) are kept as before.
* embedding: the dropout mask of its output, sh (none without dropout).
* moe: a mixture-of-experts block's feed-forward layer (``moe`` set; its
  parameters, FLOPs and activations in :mod:`clustersim.model.moe`).
* head: the final norm's input 2sh (if the model has a final norm) and the
  fp32 logits the cross entropy keeps, 4 s V (if it has an LM head).  BERT's
  embedding layer norm and pooler (a few h values) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from .layers import Layer, Model
from .moe import MoE

__all__ = [
    "ACTIVATION_BYTES_PER_VALUE",
    "BACKWARD_FACTOR",
    "LOGIT_BYTES_PER_VALUE",
    "LOGSUMEXP_BYTES_PER_VALUE",
    "Transformer",
    "megatron_flops_per_iteration",
    "transformer_builder",
    "transformer_model",
]

BACKWARD_FACTOR = 2.0
"""Backward FLOPs per forward FLOP (the gradients with respect to inputs and to weights each
cost one forward)."""
ACTIVATION_BYTES_PER_VALUE = 2
"""Bytes of one stored transformer activation (16-bit training)."""
LOGIT_BYTES_PER_VALUE = 4
"""Bytes of one logit kept by the cross entropy (fp32)."""
LOGSUMEXP_BYTES_PER_VALUE = 4
"""Bytes of one softmax logsumexp kept by a FlashAttention kernel for its backward (fp32)."""
HEAD_KINDS = ("tied", "untied", None)
"""LM heads: sharing the token embedding, with their own matrix, or none."""


@dataclass(frozen=True)
class Transformer:
    """A transformer's shape; :meth:`build` turns it into layers.

    ``seq`` is the sequence length FLOPs and activations are counted for (one
    sample = one sequence).  ``max_positions`` is the number of learned
    position embeddings (None: ``seq``; 0: none, e.g. rotary).  ``kv_heads``
    (None: ``heads``) gives grouped-query attention.  ``head`` is ``"tied"``
    (LM head sharing the token embedding: FLOPs, no parameters), ``"untied"``
    or ``None`` (no LM head).  ``norm_params`` is the parameters of one norm
    per hidden unit: 2 for layer norm, 1 for RMS norm.  ``dropout``: the model
    trains with dropout (GPT, BERT), so the dropout masks are kept for backward.
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    max_positions: int | None = None
    type_vocab: int = 0
    kv_heads: int | None = None
    bias: bool = True
    gated_ffn: bool = False
    norm_params: int = 2
    embedding_norm: bool = False
    final_norm: bool = True
    head: str | None = "tied"
    pooler: bool = False
    dropout: bool = True
    moe: MoE | None = None
    """Mixture of experts: which blocks replace their MLP by experts, and the experts."""
    head_dims: tuple[int, int] | None = None
    """(query/key, value) width of one head in the score products QK^T and PV (None:
    hidden / heads each); DeepSeek's multi-head latent attention uses (192, 128)."""
    flash_attention: bool = False
    """Attention as one fused FlashAttention kernel (Dao et al. 2022): the s x s scores are
    never stored, so no a s^2 activations and nothing for selective recomputation to redo."""
    causal: bool = True
    """Each token attends to the tokens before it (a decoder); False for an encoder (BERT).
    Only a FlashAttention kernel makes use of it: it skips the masked half of the scores."""

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head not in HEAD_KINDS:
            raise ValueError(f"head must be 'tied', 'untied' or None, not {self.head!r}")

    # ------------------------------------------------------------------ shape

    @property
    def kv_hidden(self) -> int:
        """Width of K and of V: key/value heads x head size (``hidden`` without GQA)."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    @property
    def positions(self) -> int:
        """Learned position embeddings (0 with rotary positions)."""
        return self.seq if self.max_positions is None else self.max_positions

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of the feed-forward network: 3 gated (gate, up, down), else 2."""
        return 3 if self.gated_ffn else 2

    @property
    def params(self) -> int:
        """Number of parameters, exact (as PyTorch counts them; tied weights once; every
        expert of an MoE model)."""
        ffn = sum(self.ffn_params(i) for i in range(self.layers))
        return self.embedding_params + self.layers * self.attention_params + ffn + self.head_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses: :attr:`params` with only its top_k routed experts (+
        shared and router) in each MoE block (= :attr:`params` for a dense model)."""
        if self.moe is None:
            return self.params
        idle = (self.moe.experts - self.moe.top_k) * self.expert_params
        return self.params - idle * len(self.moe.blocks)

    def is_moe_block(self, block: int) -> bool:
        """Whether block ``block`` (0-based) has experts in place of its MLP."""
        return self.moe is not None and self.moe.is_moe(block)

    def ffn_params(self, block: int) -> int:
        """Parameters of block ``block``'s feed-forward layer: MLP or experts."""
        return self.moe_params if self.is_moe_block(block) else self.mlp_params

    def ffn_flops(self, block: int) -> float:
        """Forward FLOPs per sequence of block ``block``'s feed-forward layer."""
        return self.moe_flops if self.is_moe_block(block) else self.mlp_flops

    # ------------------------------------------------------------------ parameters

    @property
    def _norm(self) -> int:
        return self.norm_params * self.hidden

    @property
    def embedding_params(self) -> int:
        """Token, position and token-type embeddings (+ their layer norm, BERT)."""
        table = (self.vocab + self.positions + self.type_vocab) * self.hidden
        return table + (self._norm if self.embedding_norm else 0)

    @property
    def attention_params(self) -> int:
        """Norm, QKV projection and output projection of one block (with biases if any)."""
        h, qkv = self.hidden, self.hidden + 2 * self.kv_hidden
        return h * qkv + h * h + (qkv + h if self.bias else 0) + self._norm

    @property
    def mlp_params(self) -> int:
        """Norm and feed-forward matrices of one block (biases of the up and down layers if any)."""
        h, f = self.hidden, self.ffn
        return self.ffn_matrices * h * f + (f + h if self.bias else 0) + self._norm

    @property
    def expert_params(self) -> int:
        """Parameters of one expert: ``m h f_e`` (+ biases of its up and down layers if any)."""
        h, f = self.hidden, self._moe.expert_ffn
        return self.ffn_matrices * h * f + (f + h if self.bias else 0)

    @property
    def router_params(self) -> int:
        """The router of one MoE layer: ``h E`` (no bias)."""
        return self.hidden * self._moe.experts

    @property
    def moe_params(self) -> int:
        """Norm, router, routed and shared experts of one MoE layer."""
        experts = self._moe.experts + self._moe.shared_experts
        return self._norm + self.router_params + experts * self.expert_params

    @property
    def _moe(self) -> MoE:
        if self.moe is None:
            raise ValueError("a dense transformer has no experts")
        return self.moe

    @property
    def head_params(self) -> int:
        """Final norm, untied LM head and pooler: those the model has."""
        h = self.hidden
        params = self._norm if self.final_norm else 0
        params += self.vocab * h if self.head == "untied" else 0
        return params + (h * h + h if self.pooler else 0)

    # ------------------------------------------------------------------ forward FLOPs per sequence

    @property
    def attention_flops(self) -> float:
        """Forward FLOPs of one attention layer per sequence: projections + scores and values."""
        s, h = self.seq, self.hidden
        return 2 * s * h * (h + 2 * self.kv_hidden) + 2 * s * h * h + self.score_flops

    @property
    def score_flops(self) -> float:
        """Forward FLOPs per sequence of QK^T and PV: ``2 s^2 a (d_qk + d_v)`` (``4 s^2 h``)."""
        s = self.seq
        if self.head_dims is None:
            return 4 * s * s * self.hidden
        qk, v = self.head_dims
        return 2 * s * s * self.heads * (qk + v)

    @property
    def selective_recompute_flops(self) -> float:
        """Forward FLOPs per sequence of one attention layer that selective recomputation
        runs again in its backward: the score products (:attr:`score_flops`; Korthikanti et
        al. 2022), none with FlashAttention (nothing of the s x s scores is dropped)."""
        return 0.0 if self.flash_attention else self.score_flops

    @property
    def mlp_flops(self) -> float:
        """Forward FLOPs of one MLP layer per sequence: ``2 s h f`` per matrix."""
        return 2 * self.ffn_matrices * self.seq * self.hidden * self.ffn

    @property
    def expert_flops(self) -> float:
        """Forward FLOPs of one expert per sequence if every token passed through it."""
        return 2 * self.ffn_matrices * self.seq * self.hidden * self._moe.expert_ffn

    @property
    def moe_flops(self) -> float:
        """Forward FLOPs of one MoE layer per sequence: router ``2 s h E`` and the active
        experts, ``(k + shared)`` x :attr:`expert_flops` (no capacity padding)."""
        router = 2 * self.seq * self.hidden * self._moe.experts
        return router + self._moe.active_experts * self.expert_flops

    @property
    def routed_flops(self) -> float:
        """Forward FLOPs per sequence of the routed experts of one MoE layer: k x expert."""
        return self._moe.top_k * self.expert_flops

    @property
    def head_flops(self) -> float:
        """Forward FLOPs of the head per sequence: logits ``2 s h V`` and pooler ``2 h^2``."""
        s, h = self.seq, self.hidden
        logits = 2 * s * h * self.vocab if self.head is not None else 0
        return logits + (2 * h * h if self.pooler else 0)

    def flops_per_token(self, recompute: bool) -> float:
        """Training FLOPs per token: forward + backward (2 x forward) of every layer, plus a second
        forward of the blocks with full activation recomputation (the head is not recomputed)."""
        ffn = sum(self.ffn_flops(i) for i in range(self.layers))
        blocks = self.layers * self.attention_flops + ffn
        per_sequence = (1 + BACKWARD_FACTOR) * (blocks + self.head_flops)
        if recompute:
            per_sequence += blocks
        return per_sequence / self.seq

    def megatron_flops(self, batch: int, recompute: bool = True) -> float:
        """Narayanan et al.'s FLOPs of one iteration of ``batch`` sequences of this shape
        (:func:`megatron_flops_per_iteration`; exact for GPT shapes, f = 4h, tied head)."""
        return megatron_flops_per_iteration(
            batch, self.seq, self.layers, self.hidden, self.vocab, recompute=recompute
        )

    # ------------------------------------------------------------------ activation bytes per sequence

    @property
    def attention_activation_bytes(self) -> float:
        """Bytes one attention layer keeps for backward per sequence (module docstring)."""
        s, h, a = self.seq, self.hidden, self.heads
        # layer-norm input, QKV input, Q, output-projection input (s h each); K and V (s h_kv)
        values = 4 * s * h + 2 * s * self.kv_hidden
        masks = s * h if self.dropout else 0  # output dropout mask, one byte per element
        if self.flash_attention:  # the fused kernel's logsumexp, fp32, one per row and head
            return ACTIVATION_BYTES_PER_VALUE * values + masks + LOGSUMEXP_BYTES_PER_VALUE * a * s
        # softmax output (+ the dropout output that feeds the product with V)
        values += (2 if self.dropout else 1) * a * s * s
        masks += a * s * s if self.dropout else 0  # the attention dropout mask
        return ACTIVATION_BYTES_PER_VALUE * values + masks

    @property
    def mlp_activation_bytes(self) -> float:
        """Bytes one MLP layer keeps for backward per sequence (module docstring)."""
        s, h, f = self.seq, self.hidden, self.ffn
        # layer-norm input and first-linear input (s h each), then the s f tensors:
        # GeLU input and output, or gate output, up output and their product (SwiGLU)
        ffn_tensors = 3 if self.gated_ffn else 2
        values = 2 * s * h + ffn_tensors * s * f
        mask = s * h if self.dropout else 0
        return ACTIVATION_BYTES_PER_VALUE * values + mask

    @property
    def moe_activation_bytes(self) -> float:
        """Bytes one MoE layer keeps for backward per sequence (:mod:`clustersim.model.moe`):
        norm and expert inputs (2 s h each), then ``c k + shared`` times one expert's
        ``s f_e`` tensors (3 gated, else 2), c the capacity factor."""
        s, h, moe = self.seq, self.hidden, self._moe
        ffn_tensors = 3 if self.gated_ffn else 2
        copies = moe.capacity_factor * moe.top_k + moe.shared_experts
        values = 2 * s * h + copies * ffn_tensors * s * moe.expert_ffn
        mask = s * h if self.dropout else 0
        return ACTIVATION_BYTES_PER_VALUE * values + mask

    @property
    def embedding_activation_bytes(self) -> float:
        """Bytes the embedding keeps per sequence: the dropout mask of its output (1 byte each)."""
        return self.seq * self.hidden if self.dropout else 0.0

    @property
    def head_activation_bytes(self) -> float:
        """Bytes the head keeps per sequence: final-norm input (16-bit) and fp32 logits."""
        s = self.seq
        norm = ACTIVATION_BYTES_PER_VALUE * s * self.hidden if self.final_norm else 0
        logits = LOGIT_BYTES_PER_VALUE * s * self.vocab if self.head is not None else 0
        return float(norm + logits)

    # ------------------------------------------------------------------ layers

    def build(self, name: str) -> Model:
        """The model: embedding, attention and MLP of each block, then the head."""
        layers = [self.embedding()]
        for i in range(self.layers):
            ffn = (
                self.experts(f"layer{i}.moe") if self.is_moe_block(i) else self.mlp(f"layer{i}.mlp")
            )
            layers += [self.attention(f"layer{i}.attention"), ffn]
        head = self.output()
        if head.params or head.forward_flops:
            layers.append(head)
        return Model(name, tuple(layers), transformer=self)

    def embedding(self) -> Layer:
        """Token, position and token-type embeddings: parameters, no FLOPs (look-ups)."""
        return _layer(
            "embedding", "embedding", self.embedding_params, 0.0, self.embedding_activation_bytes
        )

    def attention(self, name: str) -> Layer:
        """Norm, QKV projection, attention over the sequence, output projection."""
        return _layer(
            name,
            "attention",
            self.attention_params,
            self.attention_flops,
            self.attention_activation_bytes,
        )

    def mlp(self, name: str) -> Layer:
        """Norm and the feed-forward network (two matrices, three when gated)."""
        return _layer(name, "mlp", self.mlp_params, self.mlp_flops, self.mlp_activation_bytes)

    def experts(self, name: str) -> Layer:
        """Norm, router and experts of an MoE block (kind ``moe``)."""
        return _layer(name, "moe", self.moe_params, self.moe_flops, self.moe_activation_bytes)

    def output(self) -> Layer:
        """Final norm, LM head (logits over the vocabulary) and pooler: those the model has."""
        return _layer("head", "head", self.head_params, self.head_flops, self.head_activation_bytes)


def _layer(name: str, kind: str, params: float, flops: float, activation_bytes: float) -> Layer:
    """A transformer layer with backward = 2 x forward."""
    return Layer(name, params, flops, BACKWARD_FACTOR * flops, activation_bytes, kind)


def transformer_model(
    name: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    vocab: int,
    seq: int,
    **options: object,
) -> Model:
    """A transformer model; ``options`` are the other fields of :class:`Transformer`."""
    shape = Transformer(layers, hidden, heads, ffn, vocab, seq, **options)  # type: ignore[arg-type]
    return shape.build(name)


def transformer_builder(name: str, shape: Transformer) -> partial[Model]:
    """A function ``() -> Model`` building ``shape`` under ``name`` (for preset registries)."""
    return partial(shape.build, name)


def megatron_flops_per_iteration(
    batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool = True
) -> float:
    """FLOPs of one training iteration of a GPT model (Narayanan et al. 2021, Section 5.1).

    With activation recomputation (the paper's case) each block runs its
    forward twice, so it costs 4 x forward, and the LM head 3 x forward::

        F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))

    Without recomputation the blocks cost 3 x forward, 3/4 of the above (72 =
    3/4 x 96); the LM head is never recomputed and keeps its 6 B s h V, which
    written against 72 B s l h^2 becomes V / (12 l h)::

        F = 72 B s l h^2 (1 + s / (6 h) + V / (12 l h))

    ``batch`` sequences of ``seq`` tokens, ``layers`` blocks of width
    ``hidden``, vocabulary ``vocab``.  Both are exact for f = 4h, a + a
    key/value heads and a tied head (our layer FLOPs summed the same way).
    """
    b, s, l, h, v = batch, seq, layers, hidden, vocab  # noqa: E741  (the paper's l)
    if recompute:
        return 96 * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
    return 72 * b * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))
