"""Models as layer lists: presets computed from their architecture, or layers given by hand.

:func:`build_model` turns the scenario's ``model:`` section into a
:class:`~clustersim.strategies.training.Model`.  Nothing here is a typed-in total: each
preset walks its architecture (convolution shapes, transformer widths) and
every count follows from it.

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

Transformer presets: BERT-large, GPT-2 XL, the GPT-3 family (Brown et al.
2020), LLaMA-2 7B/13B/70B (Touvron et al. 2023) and the ten GPT models of
Narayanan et al. 2021 (Megatron-LM); mixtures of experts (Mixtral 8x7B, DeepSeekMoE
16B, DeepSeek-V3) in :mod:`clustersim.model.moe_models`.  A ``model.transformer``
section builds the same way from its keys (:func:`transformer_from_spec`), and
``model.moe`` gives either experts (:func:`~clustersim.model.moe_models.with_moe`).

Presets register themselves with the :func:`preset` decorator; list them with
:func:`registered_presets` or ``clustersim list models``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import Problem, ScenarioError, join_path
from ..registry import Registry
from ..scenario import LayerSpec, ModelSpec, TransformerSpec
from .embedding import EmbeddingTable
from .layers import Layer, Model
from .transformer import BACKWARD_FACTOR, Transformer, transformer_builder, transformer_model

__all__ = [
    "ACTIVATION_BYTES_PER_VALUE",
    "BACKWARD_FACTOR",
    "ConvNet",
    "Preset",
    "Transformer",
    "build_model",
    "build_preset",
    "layers_from_specs",
    "preset",
    "registered_presets",
    "transformer_from_spec",
    "transformer_model",
]

ACTIVATION_BYTES_PER_VALUE = 4
"""Bytes of one stored activation value of a convolutional net (fp32)."""

# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Preset:
    """A named model: a one-line description and a function building it."""

    name: str
    description: str
    build: Callable[[], Model]
    aliases: tuple[str, ...] = ()


def _preset_line(name: str, found: Preset) -> str:
    """``clustersim list models``: name, parameters, forward FLOPs per sample, description."""
    model = found.build()
    return (
        f"{name:<16} {model.params / 1e6:>9.1f} M params  "
        f"{model.forward_flops / 1e9:>9.2f} GFLOPs/sample forward  {found.description}"
    )


PRESETS: Registry[Preset] = Registry("models", "model preset", describe=_preset_line, unique=True)
"""Every model preset, by name (aliases resolve to it)."""


def preset(
    name: str, description: str, aliases: Sequence[str] = ()
) -> Callable[[Callable[[], Model]], Callable[[], Model]]:
    """Decorator registering a function ``() -> Model`` as the preset ``name``."""

    def register(build: Callable[[], Model]) -> Callable[[], Model]:
        PRESETS.add(name, Preset(name, description, build, tuple(aliases)), aliases)
        return build

    return register


def registered_presets() -> dict[str, Preset]:
    """Every registered preset by name, in registration order."""
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
        model = moe_models.with_moe(model, spec.moe, join_path(path, "moe"))
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


def _layer(name: str, params: float, flops: float, activation_values: float) -> Layer:
    """A convolutional-net layer with the default backward cost and fp32 activations."""
    return Layer(
        name, params, flops, BACKWARD_FACTOR * flops, activation_values * ACTIVATION_BYTES_PER_VALUE
    )


# --------------------------------------------------------------------------- convolutional nets


@dataclass(frozen=True)
class Shape:
    """A feature map of one sample: channels x height x width."""

    channels: int
    height: int
    width: int

    @property
    def elements(self) -> int:
        return self.channels * self.height * self.width


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


@dataclass
class ConvNet:
    """Builds a convolutional net layer by layer, tracking the feature-map shape."""

    shape: Shape
    layers: list[Layer] = field(default_factory=list)

    def conv(
        self,
        name: str,
        out_channels: int,
        kernel: int,
        stride: int = 1,
        *,
        bias: bool = False,
        batch_norm: bool = True,
        source: Shape | None = None,
    ) -> Shape:
        """Append a convolution (padding kernel // 2) on ``source`` (default: the current map).

        Parameters: weights, bias if any, batch-norm scale and shift.
        FLOPs: 2 x multiply-adds.  Activations: the output elements.
        Returns the output shape, which becomes the current map.
        """
        src = source or self.shape
        pad = kernel // 2
        out = Shape(
            out_channels,
            _out_size(src.height, kernel, stride, pad),
            _out_size(src.width, kernel, stride, pad),
        )
        weights = src.channels * out_channels * kernel * kernel
        params = weights + (out_channels if bias else 0) + (2 * out_channels if batch_norm else 0)
        macs = weights * out.height * out.width
        self.layers.append(_layer(name, params, 2 * macs, out.elements))
        self.shape = out
        return out

    def pool(self, kernel: int, stride: int, padding: int = 0) -> Shape:
        """Max or average pooling: changes the shape, adds no layer (its cost is neglected)."""
        s = self.shape
        self.shape = Shape(
            s.channels,
            _out_size(s.height, kernel, stride, padding),
            _out_size(s.width, kernel, stride, padding),
        )
        return self.shape

    def fc(self, name: str, out_features: int) -> Shape:
        """Append a fully connected layer (with bias) on the flattened current map."""
        inputs = self.shape.elements
        self.layers.append(
            _layer(
                name, inputs * out_features + out_features, 2 * inputs * out_features, out_features
            )
        )
        self.shape = Shape(out_features, 1, 1)
        return self.shape

    def model(self, name: str) -> Model:
        return Model(name, tuple(self.layers))


def _bottleneck(net: ConvNet, name: str, width: int, stride: int, downsample: bool) -> None:
    """A ResNet v1.5 bottleneck: 1x1, 3x3 (carrying the stride), 1x1 to 4 x width, + shortcut."""
    block_input = net.shape
    net.conv(f"{name}.conv1", width, 1)
    net.conv(f"{name}.conv2", width, 3, stride)
    out = net.conv(f"{name}.conv3", 4 * width, 1)
    if downsample:
        net.conv(f"{name}.downsample", 4 * width, 1, stride, source=block_input)
        net.shape = out


@preset(
    "resnet50",
    "ResNet-50 v1.5 (torchvision), ImageNet 224x224, bottleneck blocks [3, 4, 6, 3]",
    aliases=("resnet-50",),
)
def resnet50() -> Model:
    """ResNet-50 as torchvision builds it (He et al. 2016, stride on the 3x3 conv)."""
    net = ConvNet(Shape(3, 224, 224))
    net.conv("conv1", 64, 7, 2)
    net.pool(3, 2, padding=1)
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            _bottleneck(net, f"layer{stage + 1}.{block}", width, stride, downsample=block == 0)
    net.pool(net.shape.height, 1)  # global average pooling
    net.fc("fc", 1000)
    return net.model("resnet50")


_VGG16_STAGES = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
"""Output channels and number of 3x3 convolutions of each VGG-16 stage (configuration D)."""


@preset("vgg16", "VGG-16 (torchvision, no batch norm), ImageNet 224x224", aliases=("vgg-16",))
def vgg16() -> Model:
    """VGG-16 configuration D (Simonyan & Zisserman 2015): 13 convs with bias, 3 FC layers."""
    net = ConvNet(Shape(3, 224, 224))
    index = 0
    for channels, convs in _VGG16_STAGES:
        for _ in range(convs):
            net.conv(f"features.{index}", channels, 3, bias=True, batch_norm=False)
            index += 1
        net.pool(2, 2)
    for i, width in enumerate((4096, 4096, 1000)):
        net.fc(f"classifier.{i}", width)
    return net.model("vgg16")


# --------------------------------------------------------------------------- transformers


NORM_PARAMS = {"layernorm": 2, "rmsnorm": 1}
"""Parameters of one norm per hidden unit, by ``model.transformer.norm``: scale and shift
(layer norm) or scale only (RMS norm)."""
LM_HEADS: dict[str, str | None] = {"tied": "tied", "untied": "untied", "none": None}
""":attr:`Transformer.head` by ``model.transformer.head``."""
POSITION_EMBEDDINGS: dict[str, int | None] = {"learned": None, "rotary": 0}
""":attr:`Transformer.max_positions` by ``model.transformer.positions``: one learned vector
per token of the sequence, or none (rotary embeddings have no parameters)."""


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


def _register_transformer(
    name: str, description: str, shape: Transformer, aliases: Sequence[str] = ()
) -> None:
    """Register ``shape`` as the preset ``name``."""
    preset(name, description, aliases)(transformer_builder(name, shape))


@preset(
    "bert-large",
    "BERT-large encoder + pooler (24 x 1024, 16 heads), sequence 512",
    aliases=("bert-large-uncased",),
)
def bert_large() -> Model:
    """BERT-large as Hugging Face's ``BertModel`` (Devlin et al. 2019): 335,141,888 parameters.

    The paper rounds it to 340M; the pre-training heads (MLM transform, NSP)
    are not included.  Post-LN: two layer norms per block, as counted here.
    """
    return transformer_model(
        "bert-large",
        layers=24,
        hidden=1024,
        heads=16,
        ffn=4096,
        vocab=30522,
        seq=512,
        max_positions=512,
        type_vocab=2,
        embedding_norm=True,
        final_norm=False,
        head=None,
        pooler=True,
        causal=False,
    )


@preset(
    "gpt2-1.5b",
    "GPT-2 XL (48 x 1600, 25 heads, tied embeddings), context 1024",
    aliases=("gpt2-xl",),
)
def gpt2_xl() -> Model:
    """GPT-2 XL (Radford et al. 2019; Hugging Face ``gpt2-xl``): 1,557,611,200 parameters."""
    return transformer_model(
        "gpt2-1.5b",
        layers=48,
        hidden=1600,
        heads=25,
        ffn=6400,
        vocab=50257,
        seq=1024,
        max_positions=1024,
        head="tied",
    )


GPT3_VOCAB = 50257
"""GPT-3's vocabulary: GPT-2's byte-level BPE (Brown et al. 2020, Section 2.1)."""
GPT3_CONTEXT = 2048
"""GPT-3's context window, tokens."""
GPT3_MODELS = (
    # name, n_layers, d_model, n_heads, aliases (Brown et al. 2020, Table 2.1)
    ("gpt3-125m", 12, 768, 12, ("gpt3-small",)),
    ("gpt3-350m", 24, 1024, 16, ("gpt3-medium",)),
    ("gpt3-760m", 24, 1536, 16, ("gpt3-large",)),
    ("gpt3-1.3b", 24, 2048, 16, ("gpt3-xl",)),
    ("gpt3-2.7b", 32, 2560, 32, ()),
    ("gpt3-6.7b", 32, 4096, 32, ()),
    ("gpt3-13b", 40, 5120, 40, ()),
    ("gpt3-175b", 96, 12288, 96, ("gpt3",)),
)
"""The GPT-3 family.  Table 2.1 gives GPT-3 XL 24 heads of 128, which do not make 2048: we use
16 heads of 128.  GPT-3 13B's d_model 5140 is a typo for 5120 (40 heads of 128)."""


def gpt3(layers: int, hidden: int, heads: int) -> Transformer:
    """A GPT-3 shape: learned positions, tied LM head, ffn 4h, layer norms with biases."""
    return Transformer(layers, hidden, heads, 4 * hidden, GPT3_VOCAB, GPT3_CONTEXT)


for _name, _layers, _hidden, _heads, _aliases in GPT3_MODELS:
    _register_transformer(
        _name,
        f"GPT-3 {_name[5:].upper()} (Brown et al. 2020): {_layers} x {_hidden}, {_heads} heads, "
        f"context {GPT3_CONTEXT}",
        gpt3(_layers, _hidden, _heads),
        _aliases,
    )

LLAMA2_VOCAB = 32000
"""LLaMA-2's SentencePiece vocabulary."""
LLAMA2_CONTEXT = 4096
"""LLaMA-2's context length, tokens."""
LLAMA2_MODELS = (
    # name, layers, hidden, heads, key/value heads, ffn (Touvron et al. 2023; Hugging Face configs)
    ("llama2-7b", 32, 4096, 32, 32, 11008),
    ("llama2-13b", 40, 5120, 40, 40, 13824),
    ("llama2-70b", 80, 8192, 64, 8, 28672),
)
"""The LLaMA-2 family; 70B uses grouped-query attention with 8 key/value heads.  Trained with
fused attention that stores no attention weights (LLaMA, Touvron et al. 2023a, Section 2.4:
xformers' causal attention with FlashAttention's backward, Dao et al. 2022; LLaMA-2 keeps
LLaMA's pretraining setting, Touvron et al. 2023b, Section 2): flash_attention."""


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


def llama2(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> Transformer:
    """A LLaMA-2 shape: RMSNorm, SwiGLU, rotary positions, no biases, no dropout, untied head,
    FlashAttention."""
    return Transformer(
        layers,
        hidden,
        heads,
        ffn,
        LLAMA2_VOCAB,
        LLAMA2_CONTEXT,
        kv_heads=kv_heads,
        **LLAMA_STYLE,
    )


for _name, _layers, _hidden, _heads, _kv, _ffn in LLAMA2_MODELS:
    _register_transformer(
        _name,
        f"LLaMA-2 {_name[7:].upper()} (Touvron et al. 2023): {_layers} x {_hidden}, {_heads} heads"
        f" ({_kv} key/value), SwiGLU {_ffn}, context {LLAMA2_CONTEXT}",
        llama2(_layers, _hidden, _heads, _kv, _ffn),
        (_name.replace("llama2", "llama-2"),),
    )

MEGATRON_VOCAB = 51200
"""Vocabulary of Narayanan et al.'s GPT models (GPT-2's, padded)."""
MEGATRON_CONTEXT = 2048
"""Sequence length of Narayanan et al.'s GPT models, tokens."""
MEGATRON_MODELS = (
    # name, attention heads, hidden size, layers (Narayanan et al. 2021, Table 1)
    ("megatron-1.7b", 24, 2304, 24),
    ("megatron-3.6b", 32, 3072, 30),
    ("megatron-7.5b", 32, 4096, 36),
    ("megatron-18.4b", 48, 6144, 40),
    ("megatron-39.1b", 64, 8192, 48),
    ("megatron-76.1b", 80, 10240, 60),
    ("megatron-145.6b", 96, 12288, 80),
    ("megatron-310.1b", 128, 16384, 96),
    ("megatron-529.6b", 128, 20480, 105),
    ("megatron-1t", 160, 25600, 128),
)
"""The ten GPT models of the Megatron-LM scaling study (the table gives the 1T model 1008.0B)."""


def megatron_gpt(heads: int, hidden: int, layers: int) -> Transformer:
    """A GPT of Narayanan et al.: learned positions, tied LM head, ffn 4h."""
    return Transformer(layers, hidden, heads, 4 * hidden, MEGATRON_VOCAB, MEGATRON_CONTEXT)


for _name, _heads, _hidden, _layers in MEGATRON_MODELS:
    _register_transformer(
        _name,
        f"GPT {_name[9:].upper()} (Narayanan et al. 2021, Table 1): {_layers} x {_hidden}, "
        f"{_heads} heads, sequence {MEGATRON_CONTEXT}",
        megatron_gpt(_heads, _hidden, _layers),
    )

from . import llm_presets, moe_models  # noqa: E402  (these presets register after the dense ones)

moe_models._register()
llm_presets._register()
