"""Mixture-of-experts models: a scenario's ``model.moe`` and the MoE presets.

:func:`with_moe` gives a transformer (preset or ``model.transformer``) the experts a
``model.moe`` section describes; on a preset that has experts already the keys given
replace the preset's.  The presets:

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

from dataclasses import replace

from ..errors import Problem, ScenarioError, join_path
from ..scenario import MoESpec
from .layers import Model
from .moe import MoE, moe_blocks
from .transformer import Transformer

__all__ = ["moe_from_spec", "with_moe"]

DEFAULT_TOP_K = 2
"""Experts per token when neither ``model.moe.top_k`` nor the preset says (GShard, Mixtral)."""


def with_moe(model: Model, spec: MoESpec, path: str = "model.moe") -> Model:
    """``model`` with the experts of ``spec`` (its transformer shape rebuilt)."""
    shape = model.transformer
    if shape is None:
        raise ScenarioError(
            Problem(
                path,
                "experts replace the MLPs of a transformer; this model is a list of layers",
                "a transformer preset (e.g. gpt3-1.3b) or model.transformer",
            )
        )
    moe = moe_from_spec(spec, shape, path)
    return replace(shape, moe=moe).build(model.name)


def moe_from_spec(spec: MoESpec, shape: Transformer, path: str = "model.moe") -> MoE:
    """The experts ``spec`` describes for ``shape`` (its own experts as defaults)."""
    base = shape.moe
    experts = _pick(spec.experts, base and base.experts, None)
    if experts is None:
        raise ScenarioError(
            Problem(join_path(path, "experts"), "is required", "the number of routed experts")
        )
    top_k = _pick(spec.top_k, base and base.top_k, DEFAULT_TOP_K)
    if top_k > experts:
        raise ScenarioError(
            Problem(
                join_path(path, "top_k"),
                f"{top_k} experts per token, but the layer has {experts}",
                f"1 to {experts}",
            )
        )
    skew = _skew(spec, base, experts, path)
    return MoE(
        experts=experts,
        top_k=top_k,
        blocks=_blocks(spec, base, shape.layers, path),
        expert_ffn=_pick(spec.expert_ffn, base and base.expert_ffn, shape.ffn),
        shared_experts=_pick(spec.shared_experts, base and base.shared_experts, 0),
        capacity_factor=_pick(spec.capacity_factor, base and base.capacity_factor, 1.0),
        skew=skew,
    )


def _pick(given: object, preset: object, default: object) -> object:
    """The key given, else the preset's value, else the default."""
    if given is not None:
        return given
    return preset if preset is not None else default


def _blocks(spec: MoESpec, base: MoE | None, layers: int, path: str) -> tuple[int, ...]:
    rule = spec.expert_layers
    if rule is None:
        return base.blocks if base is not None else moe_blocks(layers)
    key = join_path(path, "expert_layers")
    if rule == "all":
        return moe_blocks(layers)
    if isinstance(rule, list):
        late = [i for i in rule if i >= layers]
        if late or not rule:
            what = f"block {late[0]} does not exist" if late else "lists no block"
            raise ScenarioError(Problem(key, what, f"indices 0 to {layers - 1}"))
        return moe_blocks(layers, listed=rule)
    if rule.first_dense >= layers:
        raise ScenarioError(
            Problem(
                join_path(key, "first_dense"),
                f"{rule.first_dense} dense blocks leave none of the {layers} for experts",
                f"0 to {layers - 1}",
            )
        )
    return moe_blocks(layers, every=rule.every, first_dense=rule.first_dense)


def _skew(spec: MoESpec, base: MoE | None, experts: int, path: str) -> tuple[str, float] | None:
    if spec.skew is None:
        return base.skew if base is not None else None
    if hasattr(spec.skew, "zipf"):
        return ("zipf", spec.skew.zipf)
    ratio = spec.skew.max_load
    if ratio > experts:
        raise ScenarioError(
            Problem(
                join_path(path, "skew.max_load"),
                f"{ratio:g} x the mean load is more than all the tokens of {experts} experts",
                f"1 to {experts}",
            )
        )
    return ("max_load", ratio)


# --------------------------------------------------------------------------- presets


def _register() -> None:
    from .presets import LLAMA_STYLE, _register_transformer

    _register_transformer(
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
    )
    _register_transformer(
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
    )
    _register_transformer(
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
    )
