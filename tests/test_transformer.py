"""Transformer shapes held to their papers: parameter counts, FLOPs, activation bytes.

Sources: Brown et al. 2020 (GPT-3, Table 2.1), Touvron et al. 2023 (LLaMA-2; exact counts of
Hugging Face's LlamaForCausalLM), Narayanan et al. 2021 (Megatron-LM: Table 1, the FLOPs
formula of Section 5.1 and its training-time examples), Korthikanti et al. 2022 (activation
memory, Table 2 and Section 5), Chowdhery et al. 2022 (PaLM, Appendix B: 6N + 12 L H Q T model
FLOPs per token).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.model import Model, activations, build_model, registered_presets
from clustersim.model.transformer import Transformer, megatron_flops_per_iteration
from clustersim.scenario import ModelSpec

SECONDS_PER_DAY = 86_400.0

GPT3_TABLE = {
    "gpt3-125m": 125e6,
    "gpt3-350m": 350e6,
    "gpt3-760m": 760e6,
    "gpt3-1.3b": 1.3e9,
    "gpt3-2.7b": 2.7e9,
    "gpt3-6.7b": 6.7e9,
    "gpt3-13b": 13.0e9,
    "gpt3-175b": 175.0e9,
}
"""n_params of Brown et al. 2020, Table 2.1."""
LLAMA2_HF = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
}
"""sum(p.numel()) of Hugging Face's Llama-2-{7,13,70}b-hf."""
MEGATRON_TABLE = {
    "megatron-1.7b": 1.7e9,
    "megatron-3.6b": 3.6e9,
    "megatron-7.5b": 7.5e9,
    "megatron-18.4b": 18.4e9,
    "megatron-39.1b": 39.1e9,
    "megatron-76.1b": 76.1e9,
    "megatron-145.6b": 145.6e9,
    "megatron-310.1b": 310.1e9,
    "megatron-529.6b": 529.6e9,
    "megatron-1t": 1008.0e9,
}
"""Number of parameters (billion) of Narayanan et al. 2021, Table 1."""
GPT_SHAPED = [*GPT3_TABLE, *MEGATRON_TABLE]
"""Presets with f = 4h, tied head, learned positions, biases, layer norms, dropout."""
TRANSFORMER_PRESETS = ["bert-large", "gpt2-1.5b", *GPT3_TABLE, *LLAMA2_HF, *MEGATRON_TABLE]


def model(name: str) -> Model:
    return build_model(ModelSpec(preset=name))


def shape(name: str) -> Transformer:
    found = model(name).transformer
    assert isinstance(found, Transformer)
    return found


# --------------------------------------------------------------------------- parameters


def test_every_transformer_preset_is_registered() -> None:
    """The GPT-3, LLaMA-2 and Megatron-LM presets are all registered (and listed)."""
    assert set(TRANSFORMER_PRESETS) <= set(registered_presets())


@pytest.mark.parametrize("name", list(GPT3_TABLE))
def test_gpt3_parameters_match_table_2_1(name: str) -> None:
    """GPT-3 counts within 2% of Table 2.1's n_params.

    The table's sizes are nominal labels: the architecture in the same table gives "350M"
    355.9M (+1.7%, GPT-2 medium's 354.8M plus 1024 more positions), "2.7B" 2.65B (-1.8%),
    "13.0B" 12.85B; the exact counts are held to Narayanan et al.'s formula below.
    """
    got = model(name).params
    assert got == pytest.approx(GPT3_TABLE[name], rel=0.02)


def test_gpt3_175b_is_175_billion_within_a_quarter_percent() -> None:
    """GPT-3 175B: 174.6e9 parameters, 0.23% under the table's 175.0B."""
    assert model("gpt3-175b").params == pytest.approx(175.0e9, rel=0.0025)


@pytest.mark.parametrize("name", list(LLAMA2_HF))
def test_llama2_parameters_match_hugging_face_exactly(name: str) -> None:
    """LLaMA-2: RMSNorm, SwiGLU, GQA (70B), untied head, rotary positions: HF's exact counts."""
    assert model(name).params == LLAMA2_HF[name]


@pytest.mark.parametrize("name", list(MEGATRON_TABLE))
def test_megatron_parameters_round_to_table_1(name: str) -> None:
    """Narayanan et al.'s Table 1 gives billions to one decimal: ours round to the same value
    (|ours - table| <= 0.05e9; the 1.7B model is 1.652e9, the 1T model 1008.04e9)."""
    assert abs(model(name).params - MEGATRON_TABLE[name]) <= 0.05e9


@pytest.mark.parametrize("name", GPT_SHAPED)
def test_gpt_parameters_follow_narayanan_formula(name: str) -> None:
    """P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)) (Narayanan et al. 2021, Section 5.1),
    plus the final layer norm's 2h, exactly."""
    t = shape(name)
    l, h, v, s = t.layers, t.hidden, t.vocab, t.seq  # noqa: E741
    assert model(name).params == 12 * l * h * h + 13 * l * h + (v + s) * h + 2 * h


@pytest.mark.parametrize("name", TRANSFORMER_PRESETS)
def test_shape_params_equal_the_sum_over_layers(name: str) -> None:
    """Transformer.params (closed form) equals the built model's sum over its layers."""
    built = model(name)
    assert built.transformer.params == built.params


def test_user_transformer_with_gpt3_175b_keys_equals_the_preset() -> None:
    """model.transformer with GPT-3 175B's keys (defaults: ffn 4h, learned positions, tied
    head, layer norm, biases) gives exactly the preset's parameters, FLOPs and activations."""
    spec = ModelSpec.model_validate(
        {"transformer": {"layers": 96, "hidden": 12288, "heads": 96, "seq": 2048, "vocab": 50257}}
    )
    built = build_model(spec)
    preset = model("gpt3-175b")
    assert built.name == "transformer"
    assert built.params == preset.params == 174_604_259_328
    assert built.forward_flops == preset.forward_flops
    assert [x.activation_bytes for x in built.layers] == [x.activation_bytes for x in preset.layers]


def test_user_transformer_with_llama2_70b_keys_has_hugging_face_count() -> None:
    """The LLaMA-2 70B keys (GQA 8, SwiGLU 28672, RMSNorm, no bias, untied, rotary)."""
    spec = ModelSpec.model_validate(
        {
            "transformer": {
                "layers": 80,
                "hidden": 8192,
                "heads": 64,
                "kv_heads": 8,
                "ffn": 28672,
                "gated_ffn": True,
                "norm": "rmsnorm",
                "bias": False,
                "head": "untied",
                "positions": "rotary",
                "seq": 4096,
                "vocab": 32000,
            }
        }
    )
    assert build_model(spec).params == LLAMA2_HF["llama2-70b"]


def test_user_transformer_without_head_has_no_lm_head() -> None:
    """head: none -> the head layer is the final norm only (2h parameters, no FLOPs)."""
    spec = ModelSpec.model_validate(
        {
            "transformer": {
                "layers": 2,
                "hidden": 64,
                "heads": 4,
                "seq": 8,
                "vocab": 100,
                "head": "none",
            }
        }
    )
    head = build_model(spec).layers[-1]
    assert (head.kind, head.params, head.forward_flops) == ("head", 2 * 64, 0.0)


def test_layers_carry_their_kind_and_the_model_its_shape() -> None:
    """embedding, attention/mlp per block, head; Model.transformer is the shape."""
    built = model("gpt3-125m")
    kinds = [layer.kind for layer in built.layers]
    assert kinds == ["embedding", *["attention", "mlp"] * 12, "head"]
    assert built.transformer == shape("gpt3-125m")
    assert built.layers[1].name == "layer0.attention"


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"heads": 5}, "multiple of heads"), ({"kv_heads": 3}, "multiple of kv_heads")],
)
def test_shape_rejects_heads_that_do_not_divide(fields: dict[str, int], message: str) -> None:
    """heads must divide hidden, kv_heads must divide heads."""
    base = {"layers": 1, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 10, "seq": 4}
    with pytest.raises(ValueError, match=message):
        Transformer(**{**base, **fields})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- FLOPs


def summed_layer_flops(built: Model, batch: int, recompute: bool) -> float:
    """Forward + backward of every layer, + a second forward of the blocks if recomputing."""
    total = sum(layer.forward_flops + layer.backward_flops for layer in built.layers)
    if recompute:
        total += sum(x.forward_flops for x in built.layers if x.kind in ("attention", "mlp"))
    return batch * total


@pytest.mark.parametrize("name", ["gpt3-125m", "gpt3-1.3b", "gpt3-175b", "megatron-1t"])
@pytest.mark.parametrize("seq", [512, 2048, 4096])
@pytest.mark.parametrize("batch", [1, 8, 1536])
@pytest.mark.parametrize("recompute", [True, False])
def test_megatron_formula_equals_summed_layer_flops(
    name: str, seq: int, batch: int, recompute: bool
) -> None:
    """96 B s l h^2 (1 + s/6h + V/16lh) with recomputation, 72 B s l h^2 (1 + s/6h + V/12lh)
    without, equal our layer FLOPs summed (x4 blocks and x3 head, or x3 everything), within
    float rounding (1e-12), for GPT shapes (f = 4h, tied head) at any batch and sequence."""
    t = replace(shape(name), seq=seq)
    formula = megatron_flops_per_iteration(batch, seq, t.layers, t.hidden, t.vocab, recompute)
    summed = summed_layer_flops(t.build(name), batch, recompute)
    assert summed == pytest.approx(formula, rel=1e-12)
    assert t.megatron_flops(batch, recompute) == formula


@pytest.mark.parametrize("name", GPT_SHAPED)
def test_no_recompute_is_three_quarters_except_the_lm_head(name: str) -> None:
    """72 = 3/4 x 96: without recomputation the blocks lose their extra forward; the LM head is
    not recomputed either way, so the difference from 3/4 is a quarter of its 6 B s h V."""
    t, batch = shape(name), 4
    with_r = t.megatron_flops(batch, recompute=True)
    without = t.megatron_flops(batch, recompute=False)
    head = 6 * batch * t.seq * t.hidden * t.vocab
    assert without - 0.75 * with_r == pytest.approx(head / 4, rel=1e-9)


@pytest.mark.parametrize("name", [*GPT_SHAPED, *LLAMA2_HF])
def test_flops_per_token_without_recompute_is_palm_model_flops(name: str) -> None:
    """PaLM's model FLOPs per token, 6 N + 12 L H Q T (N: weights of the matrix products, LM
    head included; H Q = h; T = s), exactly, also for gated FFNs and grouped-query attention."""
    t = shape(name)
    h, kv = t.hidden, t.kv_hidden
    ffn_mats = 3 if t.gated_ffn else 2
    matmul_weights = t.layers * (h * (h + 2 * kv) + h * h + ffn_mats * h * t.ffn) + h * t.vocab
    assert t.flops_per_token(recompute=False) == pytest.approx(
        6 * matmul_weights + 12 * t.layers * h * t.seq, rel=1e-12
    )


@pytest.mark.parametrize("name", GPT_SHAPED)
def test_flops_per_token_approaches_6p_and_8p(name: str) -> None:
    """The 6 P (training) and 8 P (with recomputation) rules of thumb: our FLOPs per token lie
    above them (attention scores s/6h, LM head) and within 4% for the models of 70B and more,
    within 30% for all (GPT-3 125M: +29%), as the s/6h and (V + s)/(12 l h) terms shrink."""
    t = shape(name)
    tolerance = 0.04 if t.params > 70e9 else 0.30
    for recompute, factor in ((False, 6), (True, 8)):
        ratio = t.flops_per_token(recompute) / (factor * t.params)
        assert ratio > 1 and ratio < 1 + tolerance, recompute


@pytest.mark.parametrize(
    ("name", "tokens", "gpus", "flops_per_gpu", "days"),
    [
        ("gpt3-175b", 300e9, 1024, 140e12, 34.0),  # Narayanan et al. 2021, Section 5.1
        ("megatron-1t", 450e9, 3072, 163e12, 84.0),
    ],
)
def test_training_time_examples_of_narayanan(
    name: str, tokens: float, gpus: int, flops_per_gpu: float, days: float
) -> None:
    """End-to-end training time ~ 8 T P / (n X): GPT-3 175B on 300B tokens, 1024 A100s at
    140 TFLOP/s each, ~34 days; the 1T model on 450B tokens, 3072 A100s at 163 TFLOP/s, ~84
    days (within 2%).  The full formula, per token, gives the same within 4%."""
    t = shape(name)
    approximate = 8 * tokens * t.params / (gpus * flops_per_gpu) / SECONDS_PER_DAY
    assert approximate == pytest.approx(days, rel=0.02)
    per_token = t.megatron_flops(batch=1, recompute=True) / t.seq
    full = tokens * per_token / (gpus * flops_per_gpu) / SECONDS_PER_DAY
    assert full == pytest.approx(approximate, rel=0.04)


# --------------------------------------------------------------------------- activation bytes


def block_bytes(built: Model, index: int = 0) -> float:
    layers = {layer.name: layer for layer in built.layers}
    return (
        layers[f"layer{index}.attention"].activation_bytes
        + layers[f"layer{index}.mlp"].activation_bytes
    )


@pytest.mark.parametrize("name", GPT_SHAPED)
def test_gpt_block_keeps_34sh_plus_5as2_bytes(name: str) -> None:
    """Korthikanti et al. eq. 1 at b = 1, t = 1: s h (34 + 5 a s / h); attention 11 sh + 5 a s^2
    plus its layer-norm input 2 sh, MLP 19 sh plus its layer-norm input 2 sh."""
    t = shape(name)
    s, h, a = t.seq, t.hidden, t.heads
    assert block_bytes(t.build(name)) == pytest.approx(s * h * (34 + 5 * a * s / h), rel=1e-12)
    assert t.attention_activation_bytes == 13 * s * h + 5 * a * s * s
    assert t.mlp_activation_bytes == 21 * s * h


@pytest.mark.parametrize("ratio", [1, 2, 8 / 3, 4, 8])
def test_mlp_bytes_grow_with_ffn_width(ratio: float) -> None:
    """An FFN of width f keeps its GeLU input and output, 2 s f bytes each: 5 s h + 4 s f (21 sh
    at f = 4h); a gated one its gate and up outputs and their product: 5 s h + 6 s f."""
    s, h = 128, 768
    f = int(ratio * h)
    plain = Transformer(2, h, 12, f, 1000, s)
    assert plain.mlp_activation_bytes == 5 * s * h + 4 * s * f
    assert replace(plain, gated_ffn=True).mlp_activation_bytes == 5 * s * h + 6 * s * f


@pytest.mark.parametrize("kv_heads", [1, 2, 8, 32])
def test_grouped_query_attention_keeps_smaller_k_and_v(kv_heads: int) -> None:
    """K and V (2 s h bytes each with all heads) scale by kv_heads / heads."""
    s, h, a = 256, 4096, 32
    mha = Transformer(2, h, a, 4 * h, 1000, s)
    gqa = replace(mha, kv_heads=kv_heads)
    assert mha.attention_activation_bytes - gqa.attention_activation_bytes == pytest.approx(
        2 * 2 * s * h * (1 - kv_heads / a)
    )


def test_llama2_without_dropout_keeps_no_masks() -> None:
    """LLaMA-2 70B (no dropout, GQA 8/64, SwiGLU), unfused attention: attention 8 sh + 4 s h_kv
    + 2 a s^2 (the softmax output feeds the product with V directly), mlp 4 sh + 6 s f,
    embedding nothing; with its FlashAttention the 2 a s^2 become the logsumexp, 4 a s."""
    t = shape("llama2-70b")
    s, h, a, f = t.seq, t.hidden, t.heads, t.ffn
    unfused = replace(t, flash_attention=False)
    assert unfused.attention_activation_bytes == 8 * s * h + 4 * s * (h // 8) + 2 * a * s * s
    assert t.attention_activation_bytes == 8 * s * h + 4 * s * (h // 8) + 4 * a * s
    assert t.mlp_activation_bytes == 4 * s * h + 6 * s * f
    assert model("llama2-70b").layers[0].activation_bytes == 0


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-7b", "megatron-1t"])
def test_embedding_and_head_bytes(name: str) -> None:
    """Embedding: its dropout mask s h (none without dropout); head: final-norm input 2 s h and
    fp32 logits 4 s V."""
    t = shape(name)
    built = model(name)
    s, h = t.seq, t.hidden
    assert built.layers[0].activation_bytes == (s * h if t.dropout else 0)
    assert built.layers[-1].activation_bytes == 2 * s * h + 4 * s * t.vocab


@pytest.mark.parametrize("name", TRANSFORMER_PRESETS)
@pytest.mark.parametrize("samples", [1, 2, 8])
def test_layer_bytes_equal_activations_module_at_t1(name: str, samples: int) -> None:
    """Layer.activation_bytes x b equals activations.layer_activation_bytes(layer, model, b) at
    t = 1, no recomputation, for every layer of every transformer preset."""
    built = model(name)
    for layer in built.layers:
        expected = layer.activation_bytes * samples
        got = activations.layer_activation_bytes(layer, built, samples)
        assert got == pytest.approx(expected, rel=1e-12), layer.name


# --------------------------------------------------------------------------- activations.py


MT_NLG_530B = "megatron-529.6b"
"""Korthikanti et al.'s 530B model (MT-NLG): 105 blocks of 20480, 128 heads, s 2048 -- the block
shape of Narayanan et al.'s 529.6B model."""
KORTHIKANTI_MODELS = ["gpt3-175b", MT_NLG_530B, "megatron-1t", "gpt3-1.3b"]


@pytest.mark.parametrize(("name", "ratio"), [("gpt3-175b", 80), (MT_NLG_530B, 64)])
def test_5as_over_h_of_the_paper(name: str, ratio: float) -> None:
    """Korthikanti et al., Section 4.1: 5 a s / h = 80 for GPT-3 175B and 64 for the 530B
    model, so the attention scores dominate a block's 34 + 5 a s / h."""
    t = shape(name)
    sbh = t.seq * t.hidden
    assert activations.block_activation_bytes(t, 1) / sbh - 34 == pytest.approx(ratio)


@pytest.mark.parametrize(("name", "saving"), [("gpt3-175b", 0.70), (MT_NLG_530B, 0.65)])
def test_selective_recompute_saving_with_tensor_and_sequence_parallelism(
    name: str, saving: float
) -> None:
    """Selective recomputation removes ~70% (GPT-3) and ~65% (530B) of the activation memory
    that tensor + sequence parallelism (t = 8) leaves (Section 5; within 1 point)."""
    t = shape(name)
    kept = activations.block_activation_bytes(
        t, 1, tp=8, sequence_parallel=True, recompute="selective"
    )
    full = activations.block_activation_bytes(t, 1, tp=8, sequence_parallel=True)
    saved = 1 - kept / full
    assert saved == pytest.approx(saving, abs=0.01)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("samples", [1, 4])
@pytest.mark.parametrize("name", KORTHIKANTI_MODELS)
def test_block_bytes_follow_korthikanti_table_2(tp: int, samples: int, name: str) -> None:
    """Table 2's per-layer bytes, swept over t, b and four model shapes (relative 1e-12)."""
    t = shape(name)
    s, h, a, b = t.seq, t.hidden, t.heads, samples
    sbh = s * b * h
    expected = {
        (False, "none"): sbh * (10 + 24 / tp + 5 * a * s / (h * tp)),
        (True, "none"): sbh * (34 / tp + 5 * a * s / (h * tp)),
        (False, "selective"): sbh * (10 + 24 / tp),
        (True, "selective"): sbh * (34 / tp),
        (False, "full"): 2 * sbh,
    }
    for (sp, recompute), value in expected.items():
        got = activations.block_activation_bytes(
            t, b, tp=tp, sequence_parallel=sp, recompute=recompute
        )
        assert got == pytest.approx(value, rel=1e-12), (sp, recompute)
    if tp == 1:
        assert activations.block_activation_bytes(t, b) == pytest.approx(sbh * (34 + 5 * a * s / h))


@pytest.mark.parametrize(
    ("precision", "value_bytes"), [("fp32", 4), ("tf32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 2)]
)
def test_activation_values_take_the_bytes_of_the_training_precision(
    precision: str, value_bytes: float
) -> None:
    """fp32 and tf32 keep fp32 tensors; 16-bit formats (and fp8 as Transformer Engine
    trains, its activations in 16 bits) keep 2-byte values."""
    assert activations.activation_value_bytes(precision) == value_bytes


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("name", KORTHIKANTI_MODELS)
def test_fp32_keeps_four_byte_values_and_one_byte_masks(tp: int, name: str) -> None:
    """Korthikanti's 16-bit sbh(34 + 5as/h) holds 2 sbh + a s^2 b of 1-byte dropout masks; in
    fp32 the 2-byte values double and the masks do not: sbh(66 + 9as/h) per block, and with
    tensor parallelism sbh(2 x 24/t + 2 x 4as/(ht) + (10 + 10) + as/(ht)) -- the whole part's
    values (8 sbh) double, its 2 sbh of masks stay."""
    t = shape(name)
    s, h, a = t.seq, t.hidden, t.heads
    sbh, r = s * h, a * s / h
    fp32 = activations.block_activation_bytes(t, 1, tp=tp, value_bytes=4)
    assert fp32 == pytest.approx(sbh * (2 * 8 + 2 + 2 * 24 / tp + (2 * 4 + 1) * r / tp), rel=1e-12)
    if tp == 1:
        assert fp32 == pytest.approx(sbh * (66 + 9 * r), rel=1e-12)
    half = activations.block_activation_bytes(t, 1, tp=tp)
    assert half == activations.block_activation_bytes(t, 1, tp=tp, value_bytes=2)
    full = activations.block_activation_bytes(t, 1, tp=tp, recompute="full", value_bytes=4)
    assert full == 4 * sbh  # the block input, fp32
