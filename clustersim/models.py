"""Models as layer lists: presets computed from their architecture, or layers given by hand.

:func:`build_model` turns the scenario's ``model:`` section into a
:class:`~clustersim.training.Model`.  Nothing here is a typed-in total: each
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
* **Activation bytes** are fp32 values (4 bytes) kept for the backward pass.
  For convolutional nets: the output elements of each layer (its input is the
  previous layer's output, so each tensor is counted once; batch-norm and ReLU
  intermediates are not counted separately).  For transformers: the tensors
  listed by Korthikanti et al. 2022 ("Reducing activation recomputation"),
  without dropout masks -- attention 6sh + a s^2 values (layer-norm input,
  QKV input, Q, K, V, softmax output, projection input), MLP 2sh + 2 s f
  values (3 s f when gated).

Layer granularity: convolutional nets have one :class:`Layer` per convolution
(with its batch norm) and per fully connected layer, named as in torchvision
(``layer1.0.conv1``, ``layer1.0.downsample``, ``fc``).  Transformers have an
``embedding`` layer, then ``layer{i}.attention`` and ``layer{i}.mlp`` per block,
then a ``head`` (final norm, LM head, pooler -- those the model has).

A hand-written layer with ``repeat: n`` (n > 1) becomes n separate layers
named ``name#1`` ... ``name#n``, so that gradients of each copy can be
bucketed and communicated as soon as that copy's backward ends.

Presets register themselves with the :func:`preset` decorator; list them with
:func:`registered_presets` or ``clustersim list models``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .errors import Problem, ScenarioError, hinted, join_path
from .scenario import LayerSpec, ModelSpec
from .training import Layer, Model

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
    "transformer_model",
]

BACKWARD_FACTOR = 2.0
"""Backward FLOPs per forward FLOP when a layer does not say."""
ACTIVATION_BYTES_PER_VALUE = 4
"""Bytes of one stored activation value (fp32)."""

# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Preset:
    """A named model: a one-line description and a function building it."""

    name: str
    description: str
    build: Callable[[], Model]
    aliases: tuple[str, ...] = ()


_PRESETS: dict[str, Preset] = {}
_ALIASES: dict[str, str] = {}


def preset(
    name: str, description: str, aliases: Sequence[str] = ()
) -> Callable[[Callable[[], Model]], Callable[[], Model]]:
    """Decorator registering a function ``() -> Model`` as the preset ``name``."""

    def register(build: Callable[[], Model]) -> Callable[[], Model]:
        if name in _PRESETS or name in _ALIASES:
            raise ValueError(f"model preset {name!r} is already registered")
        _PRESETS[name] = Preset(name, description, build, tuple(aliases))
        for alias in aliases:
            _ALIASES[alias] = name
        return build

    return register


def registered_presets() -> dict[str, Preset]:
    """Every registered preset by name, in registration order."""
    return dict(_PRESETS)


def build_preset(name: str, path: str = "model") -> Model:
    """The preset ``name`` (or one of its aliases); ScenarioError at ``path.preset`` if unknown."""
    canonical = _ALIASES.get(name, name)
    found = _PRESETS.get(canonical)
    if found is None:
        names = list(_PRESETS)
        raise ScenarioError(
            Problem(
                join_path(path, "preset"),
                hinted(f"unknown model preset {name!r}", name, [*names, *_ALIASES]),
                ", ".join(names),
            )
        )
    return found.build()


def build_model(spec: ModelSpec, path: str = "model") -> Model:
    """The model a scenario's ``model:`` section describes (``path`` is its key path, for errors)."""
    if spec.preset is not None:
        return build_preset(spec.preset, path)
    assert spec.layers is not None  # ModelSpec guarantees exactly one of preset or layers
    return Model("custom", tuple(layers_from_specs(spec.layers)))


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
    """A layer with the default backward cost and fp32 activations."""
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


@dataclass(frozen=True)
class Transformer:
    """A transformer's shape; :meth:`build` turns it into layers.

    ``seq`` is the sequence length FLOPs and activations are counted for (one
    sample = one sequence).  ``max_positions`` is the number of learned
    position embeddings (None: ``seq``; 0: none, e.g. rotary).  ``kv_heads``
    (None: ``heads``) gives grouped-query attention.  ``head`` is ``"tied"``
    (LM head sharing the token embedding: FLOPs, no parameters), ``"untied"``
    or ``None`` (no LM head).  ``norm_params`` is the parameters of one norm
    per hidden unit: 2 for layer norm, 1 for RMS norm.

    Forward FLOPs per sequence of one block (Megatron-LM, Narayanan et al. 2021;
    Kaplan et al. 2020): QKV and output projections 8 s h^2, attention scores
    QK^T and their product with V 2 x 2 s^2 h, MLP 4 s h f (6 s h f gated);
    with f = 4h that is 24 s h^2 + 4 s^2 h.  The LM head adds 2 s h V.
    Embedding look-ups cost no FLOPs.
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

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.head not in ("tied", "untied", None):
            raise ValueError(f"head must be 'tied', 'untied' or None, not {self.head!r}")

    def build(self, name: str) -> Model:
        """The model: embedding, attention and MLP of each block, then the head."""
        layers = [self.embedding()]
        for i in range(self.layers):
            layers += [self.attention(f"layer{i}.attention"), self.mlp(f"layer{i}.mlp")]
        head = self.output()
        if head.params or head.forward_flops:
            layers.append(head)
        return Model(name, tuple(layers))

    def _norm(self) -> int:
        return self.norm_params * self.hidden

    def embedding(self) -> Layer:
        """Token, position and token-type embeddings (+ their layer norm, BERT)."""
        h, s = self.hidden, self.seq
        positions = s if self.max_positions is None else self.max_positions
        params = (self.vocab + positions + self.type_vocab) * h
        params += self._norm() if self.embedding_norm else 0
        return _layer("embedding", params, 0.0, s * h)

    def attention(self, name: str) -> Layer:
        """Norm, QKV projection, attention over the sequence, output projection."""
        h, s = self.hidden, self.seq
        kv = (self.kv_heads or self.heads) * (h // self.heads)
        qkv_out = h + 2 * kv
        params = h * qkv_out + h * h + (qkv_out + h if self.bias else 0) + self._norm()
        flops = 2 * s * h * qkv_out + 2 * s * h * h + 4 * s * s * h
        return _layer(name, params, flops, 6 * s * h + self.heads * s * s)

    def mlp(self, name: str) -> Layer:
        """Norm and the feed-forward network (two matrices, three when gated)."""
        h, s, f = self.hidden, self.seq, self.ffn
        mats = 3 if self.gated_ffn else 2
        params = mats * h * f + (f + h if self.bias else 0) + self._norm()
        return _layer(name, params, 2 * mats * s * h * f, 2 * s * h + mats * s * f)

    def output(self) -> Layer:
        """Final norm, LM head (logits over the vocabulary) and pooler: those the model has."""
        h, s, v = self.hidden, self.seq, self.vocab
        params = self._norm() if self.final_norm else 0
        flops = 0.0
        values = 0.0
        if self.head is not None:
            params += v * h if self.head == "untied" else 0
            flops += 2 * s * h * v
            values += s * v
        if self.pooler:  # dense h -> h with bias on the first token
            params += h * h + h
            flops += 2 * h * h
            values += h
        return _layer("head", params, flops, values)


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
