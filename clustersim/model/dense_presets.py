"""The catalogue of dense models: convolutional nets and transformers without experts.

* ``resnet50``, ``vgg16`` -- torchvision's ImageNet models (:mod:`clustersim.model.convnet`);
* ``bert-large``, ``gpt2-1.5b`` -- BERT-large (Devlin et al. 2019) and GPT-2 XL (Radford et
  al. 2019);
* the GPT-3 family (Brown et al. 2020), LLaMA-2 7B/13B/70B (Touvron et al. 2023) and the
  ten GPT models of Narayanan et al. 2021 (Megatron-LM).

Every preset is built from its architecture and registers in
:data:`~clustersim.model.presets.PRESETS`, which imports this module on its first lookup;
mixtures of experts are in :mod:`clustersim.model.moe_presets`, the models of published
training runs in :mod:`clustersim.model.llm_presets`.
"""

from __future__ import annotations

from .convnet import ConvNet, Shape
from .layers import Model
from .presets import LLAMA_STYLE, preset, register_transformer
from .transformer import Transformer, transformer_model

# --------------------------------------------------------------------------- convolutional nets


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
    register_transformer(
        _name,
        f"GPT-3 {_name[5:].upper()} (Brown et al. 2020): {_layers} x {_hidden}, {_heads} heads, "
        f"context {GPT3_CONTEXT}",
        gpt3(_layers, _hidden, _heads),
        _aliases,
        module=__name__,
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
    register_transformer(
        _name,
        f"LLaMA-2 {_name[7:].upper()} (Touvron et al. 2023): {_layers} x {_hidden}, {_heads} heads"
        f" ({_kv} key/value), SwiGLU {_ffn}, context {LLAMA2_CONTEXT}",
        llama2(_layers, _hidden, _heads, _kv, _ffn),
        (_name.replace("llama2", "llama-2"),),
        module=__name__,
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
    register_transformer(
        _name,
        f"GPT {_name[9:].upper()} (Narayanan et al. 2021, Table 1): {_layers} x {_hidden}, "
        f"{_heads} heads, sequence {MEGATRON_CONTEXT}",
        megatron_gpt(_heads, _hidden, _layers),
        module=__name__,
    )
