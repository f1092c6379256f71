"""Presets of the published training runs clustersim is held to (``clustersim reproduce
--only production``): models trained at scale whose shapes their authors published.

* ``bloom-176b`` -- BigScience's BLOOM (Le Scao et al. 2022, "BLOOM: A 176B-Parameter
  Open-Access Multilingual Language Model", arXiv:2211.05100, Table 3; training
  configuration ``train/tr11-176B-ml`` of bigscience-workshop/bigscience): 70 blocks, h 14336,
  112 heads, vocabulary 250,880 (250,680 padded), sequence 2048, ALiBi positions (no
  position parameters), a layer norm on the embedding, tied LM head, GeLU, biases, no
  dropout in pre-training.  176.25B parameters (published: 176,247M).  Trained without
  FlashAttention (Megatron-DeepSpeed's fused softmax).
* ``llama3-8b``, ``llama3-70b``, ``llama3-405b`` -- Meta's Llama 3 (Llama Team 2024, "The
  Llama 3 Herd of Models", arXiv:2407.21783, Table 3): 32 x 4096 / 80 x 8192 / 126 x 16384,
  32 / 64 / 128 heads, 8 key/value heads, SwiGLU widths 14,336 / 28,672 / 53,248,
  vocabulary 128,256 (the released tokenizer; the paper rounds it to 128K), sequence 8192,
  RoPE, RMSNorm, untied head, FlashAttention.  8.03B / 70.55B / 405.85B parameters
  (published: 8B, 70B, 405B).
* ``mpt-7b`` -- MosaicML's MPT-7B (llm-foundry ``scripts/train/yamls/pretrain/mpt-7b.yaml``):
  32 x 4096, 32 heads, MLP 4h with GeLU, vocabulary 50,432 (padded), sequence 2048, ALiBi,
  no biases, layer norms without bias, tied head, FlashAttention.  6.649B parameters
  (llm-foundry's benchmark table counts 6,658,859,008: 0.14% more, which this shape does not
  place).
"""

from __future__ import annotations

from .presets import LLAMA_STYLE, register_transformer
from .transformer import Transformer

LLAMA3_VOCAB = 128256
"""Llama 3's tokenizer vocabulary (Hugging Face ``meta-llama/Meta-Llama-3-8B`` config)."""
LLAMA3_CONTEXT = 8192
"""Llama 3's pre-training sequence length, tokens (Llama Team 2024, Section 3.4.1)."""
LLAMA3_MODELS = (
    # name, layers, hidden, heads, key/value heads, ffn (Llama Team 2024, Table 3)
    ("llama3-8b", 32, 4096, 32, 8, 14336),
    ("llama3-70b", 80, 8192, 64, 8, 28672),
    ("llama3-405b", 126, 16384, 128, 8, 53248),
)


register_transformer(
    "bloom-176b",
    "BLOOM 176B (Le Scao et al. 2022): 70 x 14336, 112 heads, ALiBi, vocabulary 250880, "
    "sequence 2048",
    Transformer(
        70,
        14336,
        112,
        4 * 14336,
        250880,
        2048,
        max_positions=0,
        embedding_norm=True,
        dropout=False,
    ),
    ("bloom",),
    module=__name__,
)
for _name, _layers, _hidden, _heads, _kv_heads, _ffn in LLAMA3_MODELS:
    register_transformer(
        _name,
        f"Llama 3 {_name[7:].upper()} (Llama Team 2024): {_layers} x {_hidden}, {_heads} heads "
        f"({_kv_heads} key/value), SwiGLU {_ffn}, context {LLAMA3_CONTEXT}",
        Transformer(
            _layers,
            _hidden,
            _heads,
            _ffn,
            LLAMA3_VOCAB,
            LLAMA3_CONTEXT,
            kv_heads=_kv_heads,
            **LLAMA_STYLE,
        ),
        (_name.replace("llama3", "llama-3"), _name.replace("llama3", "llama3.1")),
        module=__name__,
    )
register_transformer(
    "mpt-7b",
    "MPT-7B (MosaicML 2023): 32 x 4096, 32 heads, ALiBi, vocabulary 50432, sequence 2048",
    Transformer(
        32,
        4096,
        32,
        4 * 4096,
        50432,
        2048,
        max_positions=0,
        bias=False,
        norm_params=1,
        dropout=False,
        flash_attention=True,
    ),
    module=__name__,
)
