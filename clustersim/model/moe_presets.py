"""The catalogue of mixtures of experts: models whose MLPs are experts (``model.moe``
gives them to any transformer: :mod:`clustersim.model.moe_models`).

* ``mixtral-8x7b`` -- Mistral AI's Mixtral 8x7B (Jiang et al. 2024, "Mixtral of
  Experts"; Hugging Face ``mistralai/Mixtral-8x7B-v0.1`` config): 32 blocks, h 4096,
  32 heads (8 key/value), SwiGLU experts of width 14336, 8 experts, top-2, vocabulary
  32000, RMS norm, rotary positions, untied head.  46.70B parameters, 12.88B active
  (published: 46.7B and 12.9B).
* ``deepseek-moe-16b`` -- DeepSeekMoE 16B (Dai et al. 2024, "DeepSeekMoE: Towards
  Ultimate Expert Specialization"; Hugging Face ``deepseek-ai/deepseek-moe-16b-base``
  config): 28 blocks, the first dense (SwiGLU 10944), h 2048, 16 heads, 64 routed
  experts of width 1408 + 2 shared, top-6, vocabulary 102400, context 4096.  16.38B
  parameters, 2.83B active (published: 16.4B and 2.8B).
* ``deepseek-v3`` -- DeepSeek-V3 (DeepSeek-AI 2024, technical report): 61 blocks, the
  first 3 dense (SwiGLU 18432), h 7168, 128 heads, 256 routed experts of width 2048 + 1
  shared, top-8, vocabulary 129280, context 4096.  Multi-head latent attention (MLA) is
  stood in for by standard multi-head attention: projections of 4 h^2 = 205.5M
  parameters per block (MLA's low-rank q/kv projections and output: 187.1M, so +1.1B
  over the model, 0.2%) and score products with MLA's head widths (192 query/key, 128
  value: ``head_dims``), so the attention FLOPs per token are within 3% of MLA's.  The
  multi-token-prediction module (14B more on Hugging Face) is not modelled.  672.1B
  parameters, 38.7B active (published: 671B and 37B).

All three train with FlashAttention (``flash_attention``): Mistral AI's models run their
attention on FlashAttention and xFormers kernels (Jiang et al. 2023, "Mistral 7B",
Section 2; Mixtral keeps Mistral 7B's architecture, Jiang et al. 2024, Section 2);
DeepSeek's HAI-LLM framework, which trained DeepSeekMoE and DeepSeek-V3, uses
FlashAttention (DeepSeek-AI 2024, "DeepSeek LLM", Section 2.4).
"""

from __future__ import annotations

from .moe import MoE, moe_blocks
from .presets import LLAMA_STYLE, register_transformer
from .transformer import Transformer

register_transformer(
    "mixtral-8x7b",
    "Mixtral 8x7B (Jiang et al. 2024): 32 x 4096, 32 heads (8 key/value), 8 SwiGLU "
    "experts of 14336, top-2, context 4096",
    Transformer(
        32,
        4096,
        32,
        14336,
        32000,
        4096,
        kv_heads=8,
        **LLAMA_STYLE,
        moe=MoE(experts=8, top_k=2, blocks=moe_blocks(32), expert_ffn=14336),
    ),
    ("mixtral",),
    module=__name__,
)
register_transformer(
    "deepseek-moe-16b",
    "DeepSeekMoE 16B (Dai et al. 2024): 28 x 2048, 16 heads, first block dense, 64 "
    "routed experts of 1408 + 2 shared, top-6, context 4096",
    Transformer(
        28,
        2048,
        16,
        10944,
        102400,
        4096,
        **LLAMA_STYLE,
        moe=MoE(
            experts=64,
            top_k=6,
            blocks=moe_blocks(28, first_dense=1),
            expert_ffn=1408,
            shared_experts=2,
        ),
    ),
    module=__name__,
)
register_transformer(
    "deepseek-v3",
    "DeepSeek-V3 (DeepSeek-AI 2024): 61 x 7168, 128 heads (MLA as equal-size attention), "
    "first 3 blocks dense, 256 routed experts of 2048 + 1 shared, top-8, context 4096",
    Transformer(
        61,
        7168,
        128,
        18432,
        129280,
        4096,
        head_dims=(192, 128),
        **LLAMA_STYLE,
        moe=MoE(
            experts=256,
            top_k=8,
            blocks=moe_blocks(61, first_dense=3),
            expert_ffn=2048,
            shared_experts=1,
        ),
    ),
    module=__name__,
)
