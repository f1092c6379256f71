"""A model as layers: parameters and cost per sample, and recomputation.

A model is a list of :class:`Layer` (built from the scenario's ``model:`` by
:func:`clustersim.model.build_model`).  Units: FLOPs per sample, bytes per
sample, bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}
"""Bytes of one gradient or parameter value on the wire, by precision: tf32 keeps fp32 values
(only the products round to tf32); fp8 training (Transformer Engine) keeps 16-bit weights and
gradients and communicates them in 16 bits (its fp8 casts and transposes are kernels of
their own: :mod:`clustersim.model.fp8_casts`)."""

OPTIMIZER_BYTES_PER_PARAM = {"sgd": 12.0, "momentum": 20.0, "adam": 28.0}
"""Memory traffic of one optimizer step per parameter, in bytes, with fp32 state:
sgd reads weight and gradient and writes the weight (3 x 4 B); momentum also
reads and writes the momentum (5 x 4 B); adam reads weight, gradient, m, v and
writes weight, m, v (7 x 4 B)."""


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer: its parameters and its cost per sample."""

    name: str
    params: float
    """Number of parameters."""
    forward_flops: float
    """Forward FLOPs per sample."""
    backward_flops: float
    """Backward FLOPs per sample (2 x forward unless the model says otherwise)."""
    activation_bytes: float
    """Activation bytes stored per sample for the backward pass."""
    kind: str = ""
    """What the layer is in a transformer: ``embedding``, ``attention``, ``mlp`` or ``head``
    ("" for other models).  Attention and MLP layers split over a tensor-parallel group and
    are the layers full recomputation re-runs."""
    forward_bytes: float = 0.0
    """Memory-bound forward work, bytes per sample through device memory; when above 0
    the forward is costed by it, not by ``forward_flops`` (a sparse embedding's gather)."""
    backward_bytes: float = 0.0
    """Memory-bound backward work, bytes per sample (as ``forward_bytes``)."""


@dataclass(frozen=True)
class Model:
    """A model as a sequence of layers, input first."""

    name: str
    layers: tuple[Layer, ...]
    transformer: Any = None
    """The :class:`clustersim.model.transformer.Transformer` shape the model was built from, if any
    (activation, FLOPs and tensor-parallel formulas need it)."""
    embedding: Any = None
    """The :class:`clustersim.model.embedding.EmbeddingTable` of the model's first layer, if
    it has a sparse embedding (``model.embedding``)."""

    @property
    def params(self) -> float:
        """Total number of parameters."""
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample."""
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        """Backward FLOPs per sample."""
        return sum(layer.backward_flops for layer in self.layers)

    def gradient_bytes(self, precision: str) -> float:
        """Bytes of one full gradient (or parameter copy) in ``precision``."""
        return self.params * BYTES_PER_VALUE[precision]


RECOMPUTED_KINDS = frozenset({"attention", "mlp", "moe"})
"""Layer kinds that activation recomputation re-runs (transformer blocks)."""


def with_recompute(model: Model, recompute: str) -> Model:
    """``model`` with the recomputation ``recompute`` folded into its layers' backward FLOPs.

    ``full``: one more forward in the backward of each attention and MLP layer;
    ``selective``: the attention scores and their product with V again, 4 s^2 h
    FLOPs per sample per attention layer (Korthikanti et al. 2022;
    ``Transformer.selective_recompute_flops``: none with FlashAttention); ``none``: unchanged.
    """
    if recompute == "none":
        return model
    shape = model.transformer
    scores = shape.selective_recompute_flops if shape is not None else 0.0

    def extra(layer: Layer) -> float:
        if recompute == "full":
            return layer.forward_flops if layer.kind in RECOMPUTED_KINDS else 0.0
        return scores if layer.kind == "attention" else 0.0

    layers = tuple(
        replace(layer, backward_flops=layer.backward_flops + extra(layer)) for layer in model.layers
    )
    return replace(model, layers=layers)


def flops_per_iteration(model: Model, batch: float, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of ``batch`` samples: forward + backward, and the same
    with the recomputation ``recompute`` (see :func:`with_recompute`)."""
    plain = (model.forward_flops + model.backward_flops) * batch
    hardware = (model.forward_flops + with_recompute(model, recompute).backward_flops) * batch
    return plain, hardware
