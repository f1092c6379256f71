"""The ``model`` section: what is trained -- hand-written layers, a transformer's shape, a
sparse embedding table, or a named preset."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Strict, Tag, model_validator

from clustersim.errors import Problem

from .experts import MoESpec
from .fields import (
    Bool,
    Count,
    Float,
    FlopCount,
    Invalid,
    Size,
    _Spec,
    _unit,
)

MAX_LAYERS = 10_000
"""Most layers a model may have once built (``repeat`` copies each count, a transformer
block two: attention and MLP), checked before any is built: every layer is a record per
worker and pass, and stage splits and gathers walk them."""


class LayerSpec(_Spec):
    """One layer (or a block repeated ``repeat`` times) of a model given by hand."""

    name: Annotated[str, Field(min_length=1)]
    """Name of the layer, shown in the timeline."""
    params: FlopCount
    """Number of parameters (a count, e.g. 2.4e6)."""
    flops: FlopCount
    """Forward FLOPs per sample."""
    backward_flops: FlopCount | None = None
    """Backward FLOPs per sample (default: 2 x forward)."""
    activations: Size = _unit("0B", "activations")
    """Activation bytes stored per sample for backward."""
    repeat: Count = 1
    """How many identical copies of the layer follow one another."""


class TransformerSpec(_Spec):
    """A transformer given by its architecture (the keys of the transformer presets)."""

    layers: Count
    """Transformer blocks (l)."""
    hidden: Count
    """Hidden size (h)."""
    heads: Count
    """Attention heads (a); must divide ``hidden``."""
    seq: Count
    """Sequence length (s): tokens per sample."""
    vocab: Count
    """Vocabulary size (V)."""
    ffn: Count | None = None
    """Feed-forward width (default 4 x hidden)."""
    kv_heads: Count | None = None
    """Key/value heads for grouped-query attention (default: heads)."""
    gated_ffn: Bool = False
    """Gated feed-forward (SwiGLU, LLaMA): three matrices instead of two."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """Normalisation: layernorm (scale and shift) or rmsnorm (scale only)."""
    bias: Bool = True
    """Linear layers have biases (GPT, BERT) or not (LLaMA)."""
    head: Literal["tied", "untied", "none"] = "tied"
    """LM head: sharing the token embedding (tied), its own matrix (untied) or none."""
    positions: Literal["learned", "rotary"] = "learned"
    """Position embeddings: learned (one vector per position) or rotary (no parameters)."""
    dropout: Bool = True
    """Dropout layers (GPT, BERT) or none (LLaMA): their masks count as stored activations."""
    flash_attention: Bool = False
    """Attention as one fused FlashAttention kernel (Dao et al. 2022): no s x s scores stored
    or recomputed; false is Megatron-LM's unfused attention (softmax and dropout kernels)."""

    @model_validator(mode="after")
    def _heads_divide(self) -> TransformerSpec:
        if self.hidden % self.heads:
            raise Invalid(
                Problem(
                    "heads",
                    f"{self.heads} heads do not divide hidden {self.hidden}",
                    "a divisor of hidden",
                )
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise Invalid(
                Problem(
                    "kv_heads",
                    f"{self.kv_heads} key/value heads do not divide {self.heads} heads",
                    "a divisor of heads",
                )
            )
        return self


MAX_ZIPF_EXPONENT = 16.0
"""Largest Zipf exponent: beyond it the coldest of the keys underflows to nothing."""


class ZipfKeys(_Spec):
    """Keys whose sizes and access frequencies follow Zipf's law: rank i goes as 1 / i^s."""

    zipf: Float = Field(ge=0, le=MAX_ZIPF_EXPONENT)
    """The exponent s (0 is uniform)."""


def _key_form(data: Any) -> str:
    """``zipf`` for a mapping (or a built :class:`ZipfKeys`), ``named`` otherwise."""
    return "zipf" if isinstance(data, dict | ZipfKeys) else "named"


KeyDistribution = Annotated[
    Annotated[Literal["layers", "uniform"], Tag("named")] | Annotated[ZipfKeys, Tag("zipf")],
    Discriminator(_key_form),
]
"""``layers``, ``uniform`` or ``{zipf: s}``: a name is checked as a name, a mapping as Zipf."""


RowDistribution = Annotated[
    Annotated[Literal["uniform"], Tag("named")] | Annotated[ZipfKeys, Tag("zipf")],
    Discriminator(_key_form),
]
"""``uniform`` or ``{zipf: s}`` (the rows of an embedding table)."""


MAX_EMBEDDING_ROWS = 10**12
"""Most rows an embedding table may have (beyond 1e7 the expected unique rows are
approximated; see :mod:`clustersim.model.embedding`)."""
MAX_EMBEDDING_TABLES = 1_000
"""Most identical embedding tables ``model.embedding.tables`` may ask for."""


class EmbeddingSpec(_Spec):
    """A sparse embedding table (a recommendation model's), added in front of the model's
    layers: each sample looks up ``lookups_per_sample`` rows of each table, drawn i.i.d.
    from ``distribution`` over the rows."""

    rows: Annotated[int, Strict(), Field(ge=1, le=MAX_EMBEDDING_ROWS)]
    """Rows of each table (ids, e.g. 10_000_000)."""
    dim: Count
    """Values per row (the embedding dimension)."""
    lookups_per_sample: Count = 1
    """Rows each sample looks up in each table (pooled: a multi-hot feature)."""
    distribution: RowDistribution = "uniform"
    """uniform: every row alike; ``{zipf: s}``: row of rank i drawn with probability
    proportional to 1 / i^s (row 0 the hottest)."""
    tables: Annotated[int, Strict(), Field(ge=1, le=MAX_EMBEDDING_TABLES)] = 1
    """Identical tables (each its own features, looked up ``lookups_per_sample`` times)."""

    @property
    def zipf(self) -> float:
        """The Zipf exponent of the row distribution (0 for uniform)."""
        return self.distribution.zipf if isinstance(self.distribution, ZipfKeys) else 0.0


class ModelSpec(_Spec):
    """The model: a preset computed from its architecture, a transformer, or a list of layers."""

    preset: str | None = None
    """Preset name, e.g. gpt3-175b, llama2-70b, bert-large, resnet50 (``clustersim list models``)."""
    transformer: TransformerSpec | None = None
    """A transformer given by its architecture (instead of a preset)."""
    layers: list[LayerSpec] | None = None
    """Layers given by hand (instead of a preset)."""
    embedding: EmbeddingSpec | None = None
    """A sparse embedding table put in front of the model above (a DLRM-like recommender:
    ``layers`` as the dense MLPs); parameter servers move only the rows a batch touches."""
    moe: MoESpec | None = None
    """Mixture of experts on a transformer (preset or ``transformer``)."""
    flash_attention: Bool | None = None
    """FlashAttention on or off for a preset (default: the preset's own; true for the
    LLaMA-2, Mixtral and DeepSeek presets); with ``transformer`` use its own key."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        given = [x is not None for x in (self.preset, self.transformer, self.layers)]
        if sum(given) != 1:
            raise Invalid(
                Problem(
                    "",
                    "give exactly one of preset, transformer or layers",
                    "preset: NAME, transformer: {layers, hidden, heads, seq, vocab} or layers: [...]",
                )
            )
        if self.layers is not None and not self.layers:
            raise Invalid(Problem("layers", "needs at least one layer"))
        if self.flash_attention is not None and self.preset is None:
            raise Invalid(
                Problem(
                    "flash_attention",
                    "applies to a preset; "
                    + (
                        "a list of layers has no attention to fuse"
                        if self.layers is not None
                        else "give it inside model.transformer"
                    ),
                    "model: {preset: NAME, flash_attention: true} or "
                    "model.transformer.flash_attention",
                )
            )
        return self._not_too_many_layers()

    def _not_too_many_layers(self) -> ModelSpec:
        """At most :data:`MAX_LAYERS` layers, counted before they are built."""
        allowed = f"at most {MAX_LAYERS:,} layers (a transformer block counts two)"
        if self.transformer is not None and 2 * self.transformer.layers + 2 > MAX_LAYERS:
            message = f"{self.transformer.layers:,} blocks make {2 * self.transformer.layers + 2:,} layers"
            raise Invalid(Problem("transformer.layers", message, allowed))
        total = 0
        for i, layer in enumerate(self.layers or ()):
            total += layer.repeat
            if total > MAX_LAYERS:
                message = f"the layers up to this one make {total:,} layers (repeat included)"
                raise Invalid(Problem(f"layers[{i}].repeat", message, allowed))
        return self
