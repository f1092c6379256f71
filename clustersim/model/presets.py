"""Models as layer lists: the preset registry, and a scenario's ``model:`` section built.

:func:`build_model` turns the scenario's ``model:`` section into a
:class:`~clustersim.model.layers.Model`: a named preset (:data:`PRESETS`), a
``model.transformer`` shape or layers given by hand.  Nothing in a preset is a typed-in
total: each walks its architecture (convolution shapes, transformer widths) and every
count follows from it.

Conventions (all per sample, i.e. per image or per sequence):

* **Parameters** are trainable values, counted as PyTorch does
  (``sum(p.numel() for p in model.parameters())``): batch-norm and layer-norm
  weight and bias count, their running statistics do not; tied weights count
  once.
* **FLOPs**: a multiply-add counts as 2 FLOPs.  Only matrix products and
  convolutions are counted; element-wise work (batch norm, layer norm, ReLU,
  GELU, softmax, residual adds, pooling, bias adds) is left out (under 1% of
  the total for every preset).  So ResNet-50's 4.09 GMACs are ~8.2 GFLOPs.
* **Backward FLOPs** are 2 x forward unless a layer list says otherwise (the
  gradients with respect to inputs and to weights each cost one forward).
* **Activation bytes** are the bytes a layer keeps for its backward pass.
  Convolutional nets: fp32 values (4 bytes), the output elements of each
  layer (its input is the previous layer's output, so each tensor is counted
  once; batch-norm and ReLU intermediates are not counted separately).
  Transformers: Korthikanti et al. 2022 ("Reducing Activation Recomputation in
  Large Transformer Models"), 16-bit activations, no tensor parallelism, no
  recomputation -- a GPT block keeps 34 s h + 5 a s^2 bytes (1-byte dropout
  masks included), the embedding its dropout mask s h, the head the final
  norm's input 2 s h and the fp32 logits 4 s V; :mod:`clustersim.model.transformer`
  lists every tensor and the generalisation to other FFN widths, gated FFNs,
  grouped-query attention and models without dropout.

Layer granularity: convolutional nets have one :class:`Layer` per convolution
(with its batch norm) and per fully connected layer, named as in torchvision
(``layer1.0.conv1``, ``layer1.0.downsample``, ``fc``).  Transformers have an
``embedding`` layer, then ``layer{i}.attention`` and ``layer{i}.mlp`` per block,
then a ``head`` (final norm, LM head, pooler -- those the model has).

A hand-written layer with ``repeat: n`` (n > 1) becomes n separate layers
named ``name#1`` ... ``name#n``, so that gradients of each copy can be
bucketed and communicated as soon as that copy's backward ends.

The presets are defined in the catalogues the registry imports on its first lookup
(:data:`CATALOGUES`): :mod:`~clustersim.model.dense_presets` (ResNet-50, VGG-16, BERT-large,
GPT-2 XL, GPT-3, LLaMA-2, Narayanan et al.'s GPT models),
:mod:`~clustersim.model.moe_presets` (Mixtral 8x7B, DeepSeekMoE 16B, DeepSeek-V3) and
:mod:`~clustersim.model.llm_presets` (the models of published training runs).  Each
registers with the :func:`preset` decorator or :func:`register_transformer`; they are
listed in that order of catalogues whichever was imported first.  A
``model.transformer`` section builds the same way from its keys
(:func:`transformer_from_spec`), and ``model.moe`` gives either experts
(:func:`~clustersim.model.moe_models.with_moe`).  List the presets with
:func:`registered_presets` or ``clustersim list models``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Problem, ScenarioError, join_path
from ..registry import Registry
from ..scenario import LayerSpec, ModelSpec, TransformerSpec
from .embedding import EmbeddingTable
from .layers import Layer, Model
from .moe_models import with_moe
from .transformer import BACKWARD_FACTOR, Transformer, transformer_builder

__all__ = [
    "BACKWARD_FACTOR",
    "CATALOGUES",
    "LLAMA_STYLE",
    "PRESETS",
    "Preset",
    "Transformer",
    "build_model",
    "build_preset",
    "layers_from_specs",
    "preset",
    "register_transformer",
    "registered_presets",
    "transformer_from_spec",
]

# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Preset:
    """A named model: a one-line description and a function building it."""

    name: str
    description: str
    build: Callable[[], Model]
    aliases: tuple[str, ...] = ()
    module: str = ""
    """The module that registered it (its catalogue's place in :data:`CATALOGUES` orders
    the listing)."""


def _preset_line(name: str, found: Preset) -> str:
    """``clustersim list models``: name, parameters, forward FLOPs per sample, description."""
    model = found.build()
    return (
        f"{name:<16} {model.params / 1e6:>9.1f} M params  "
        f"{model.forward_flops / 1e9:>9.2f} GFLOPs/sample forward  {found.description}"
    )


CATALOGUES = (
    "clustersim.model.dense_presets",
    "clustersim.model.moe_presets",
    "clustersim.model.llm_presets",
)
"""The modules that define the built-in presets, in the order ``clustersim list models``
shows them: dense models, mixtures of experts, the models of published training runs."""


PRESETS: Registry[Preset] = Registry(
    "models", "model preset", describe=_preset_line, builtins=CATALOGUES, unique=True
)
"""Every model preset, by name (aliases resolve to it)."""


def preset(
    name: str, description: str, aliases: Sequence[str] = ()
) -> Callable[[Callable[[], Model]], Callable[[], Model]]:
    """Decorator registering a function ``() -> Model`` as the preset ``name`` (of the
    function's module)."""

    def register(build: Callable[[], Model]) -> Callable[[], Model]:
        entry = Preset(name, description, build, tuple(aliases), build.__module__)
        PRESETS.add(name, entry, aliases)
        return build

    return register


def register_transformer(
    name: str,
    description: str,
    shape: Transformer,
    aliases: Sequence[str] = (),
    *,
    module: str = "",
) -> None:
    """Register ``shape`` as the preset ``name``; ``module`` is the registering module's
    ``__name__`` (a catalogue of :data:`CATALOGUES` lists in its place)."""
    entry = Preset(name, description, transformer_builder(name, shape), tuple(aliases), module)
    PRESETS.add(name, entry, aliases)


def registered_presets() -> dict[str, Preset]:
    """Every registered preset by name, in the order ``clustersim list models`` shows them."""
    return PRESETS.entries()


def build_preset(name: str, path: str = "model") -> Model:
    """The preset ``name`` (or one of its aliases); ScenarioError at ``path.preset`` if unknown."""
    return PRESETS.lookup(name, join_path(path, "preset")).build()


def build_model(spec: ModelSpec, path: str = "model") -> Model:
    """The model a scenario's ``model:`` section describes (``path`` is its key path, for
    errors); with ``embedding``, its sparse table as the first layer
    (:mod:`clustersim.model.embedding`)."""
    model = _build_dense(spec, path)
    if spec.moe is not None:
        model = with_moe(model, spec.moe, join_path(path, "moe"))
    if spec.embedding is None:
        return model
    table = EmbeddingTable.from_spec(spec.embedding)
    taken = any(layer.name == "embedding" for layer in model.layers)
    layer = table.layer("sparse_embedding" if taken else "embedding")
    return replace(model, layers=(layer, *model.layers), embedding=table)


def _build_dense(spec: ModelSpec, path: str) -> Model:
    if spec.preset is not None:
        model = build_preset(spec.preset, path)
        if spec.flash_attention is not None:
            model = _with_flash_attention(
                model, spec.flash_attention, join_path(path, "flash_attention")
            )
        return model
    if spec.transformer is not None:
        shape = transformer_from_spec(spec.transformer, join_path(path, "transformer"))
        return shape.build("transformer")
    assert (
        spec.layers is not None
    )  # ModelSpec guarantees exactly one of preset, transformer, layers
    return Model("custom", tuple(layers_from_specs(spec.layers)))


def _with_flash_attention(model: Model, flash: bool, path: str) -> Model:
    """``model`` with FlashAttention on or off (a ScenarioError if it is not a transformer)."""
    shape = model.transformer
    if shape is None:
        raise ScenarioError(
            Problem(
                path,
                f"{model.name} is not a transformer: flash_attention has no attention to fuse",
                "a transformer preset (clustersim list models)",
            )
        )
    return replace(shape, flash_attention=flash).build(model.name)


def layers_from_specs(specs: Sequence[LayerSpec]) -> list[Layer]:
    """Layers given by hand; ``repeat: n`` (n > 1) gives n layers named ``name#1`` .. ``name#n``."""
    layers: list[Layer] = []
    for spec in specs:
        backward = spec.backward_flops
        if backward is None:
            backward = BACKWARD_FACTOR * spec.flops
        names = (
            [spec.name]
            if spec.repeat == 1
            else [f"{spec.name}#{i + 1}" for i in range(spec.repeat)]
        )
        layers.extend(Layer(n, spec.params, spec.flops, backward, spec.activations) for n in names)
    return layers


# --------------------------------------------------------------------------- transformers


NORM_PARAMS = {"layernorm": 2, "rmsnorm": 1}
"""Parameters of one norm per hidden unit, by ``model.transformer.norm``: scale and shift
(layer norm) or scale only (RMS norm)."""
LM_HEADS: dict[str, str | None] = {"tied": "tied", "untied": "untied", "none": None}
""":attr:`Transformer.head` by ``model.transformer.head``."""
POSITION_EMBEDDINGS: dict[str, int | None] = {"learned": None, "rotary": 0}
""":attr:`Transformer.max_positions` by ``model.transformer.positions``: one learned vector
per token of the sequence, or none (rotary embeddings have no parameters)."""
LLAMA_STYLE: dict[str, Any] = {
    "max_positions": 0,
    "bias": False,
    "gated_ffn": True,
    "norm_params": NORM_PARAMS["rmsnorm"],
    "head": "untied",
    "dropout": False,
    "flash_attention": True,
}
"""The LLaMA-style architecture choices shared by LLaMA-2, Mixtral and the DeepSeek models:
rotary positions (no learned ones), no biases, SwiGLU, RMSNorm, untied LM head, no dropout,
FlashAttention."""


def transformer_from_spec(spec: TransformerSpec, path: str = "model.transformer") -> Transformer:
    """The shape a ``model.transformer`` section describes (ffn defaults to 4 x hidden)."""
    try:
        return Transformer(
            layers=spec.layers,
            hidden=spec.hidden,
            heads=spec.heads,
            ffn=spec.ffn if spec.ffn is not None else 4 * spec.hidden,
            vocab=spec.vocab,
            seq=spec.seq,
            max_positions=POSITION_EMBEDDINGS[spec.positions],
            kv_heads=spec.kv_heads,
            bias=spec.bias,
            gated_ffn=spec.gated_ffn,
            norm_params=NORM_PARAMS[spec.norm],
            head=LM_HEADS[spec.head],
            dropout=spec.dropout,
            flash_attention=spec.flash_attention,
        )
    except ValueError as exc:  # TransformerSpec checks the same; kept as a clear error
        raise ScenarioError(Problem(path, str(exc))) from None
