"""Model presets from their architecture, hand-written layer lists, the preset registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.model import Model, dense_presets
from clustersim.model import presets as models
from clustersim.model.presets import build_model, registered_presets
from clustersim.model.transformer import Transformer, transformer_model
from clustersim.scenario import ModelSpec

PUBLISHED_PARAMS = {
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "bert-large": 335_141_888,
    "gpt2-1.5b": 1_557_611_200,
}
"""Exact parameter counts of the presets that existed before the large-model presets (the
GPT-3, LLaMA-2 and Megatron-LM presets are held to their papers in test_transformer.py)."""
FAMILIES = ("gpt3-", "llama2-", "megatron-", "mixtral-", "deepseek-", "bloom-", "llama3-", "mpt-")
"""Name prefixes of the large-model presets, registered after the four above."""


def preset(name: str) -> Model:
    return build_model(ModelSpec(preset=name))


def within(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * target


def test_resnet50_parameters_match_torchvision() -> None:
    """ResNet-50: 25,557,032 parameters (torchvision.models.resnet50, ResNet50_Weights.IMAGENET1K_V1 num_params)."""
    assert within(preset("resnet50").params, 25_557_032, 0.01)


def test_vgg16_parameters_match_torchvision() -> None:
    """VGG-16: 138,357,544 parameters (torchvision.models.vgg16, VGG16_Weights.IMAGENET1K_V1 num_params)."""
    assert within(preset("vgg16").params, 138_357_544, 0.01)


def test_bert_large_parameters_match_hugging_face() -> None:
    """BERT-large: 335,141,888 parameters (Hugging Face BertModel bert-large-uncased; Devlin et al. 2019 round it to 340M)."""
    assert within(preset("bert-large").params, 335_141_888, 0.01)


def test_gpt2_xl_parameters_match_published() -> None:
    """GPT-2 XL: 1,557,611,200 parameters (Radford et al. 2019 "1.5B"; Hugging Face gpt2-xl)."""
    assert within(preset("gpt2-1.5b").params, 1.558e9, 0.01)


def test_resnet50_forward_flops_are_twice_the_published_macs() -> None:
    """ResNet-50 forward: 4.09 GMACs per 224x224 image (torchvision "GFLOPS" 4.09), so ~8.18 GFLOPs."""
    assert within(preset("resnet50").forward_flops, 2 * 4.09e9, 0.05)


def test_vgg16_forward_flops_are_twice_the_published_macs() -> None:
    """VGG-16 forward: 15.47 GMACs per 224x224 image (torchvision "GFLOPS" 15.47), so ~30.9 GFLOPs."""
    assert within(preset("vgg16").forward_flops, 2 * 15.47e9, 0.05)


def test_resnet50_has_one_layer_per_conv_and_fc() -> None:
    """ResNet-50: conv1, 16 bottlenecks x 3 convs, 4 downsample shortcuts, fc: 54 layers."""
    names = [layer.name for layer in preset("resnet50").layers]
    assert len(names) == 1 + 3 * 16 + 4 + 1
    assert names[0] == "conv1" and names[-1] == "fc"
    assert "layer3.5.conv3" in names and "layer4.0.downsample" in names


def test_conv_activation_bytes_are_output_elements_in_fp32() -> None:
    """ResNet-50 conv1 keeps its 64 x 112 x 112 output at 4 bytes per value."""
    conv1 = preset("resnet50").layers[0]
    assert conv1.activation_bytes == 64 * 112 * 112 * 4


def test_transformer_block_flops_follow_megatron_formula() -> None:
    """GPT-2 XL block forward = 24 s h^2 + 4 s^2 h FLOPs per sequence (Narayanan et al. 2021)."""
    s, h = 1024, 1600
    layers = {layer.name: layer for layer in preset("gpt2-1.5b").layers}
    block = layers["layer7.attention"].forward_flops + layers["layer7.mlp"].forward_flops
    assert block == 24 * s * h**2 + 4 * s**2 * h


@pytest.mark.parametrize(
    ("name", "s", "h", "a"), [("gpt2-1.5b", 1024, 1600, 25), ("bert-large", 512, 1024, 16)]
)
def test_transformer_block_activations_are_korthikanti_16bit_bytes(
    name: str, s: int, h: int, a: int
) -> None:
    """A block keeps s h (34 + 5 a s / h) bytes per sequence (Korthikanti et al. 2022, eq. 1):
    16-bit tensors and 1-byte dropout masks, no longer the fp32 values of the old convention.

    GPT-2 XL: 1024 x 1600 x (34 + 5 x 25 x 1024 / 1600) = 186.7 MB per block and sequence.
    """
    layers = {layer.name: layer for layer in preset(name).layers}
    block = layers["layer3.attention"].activation_bytes + layers["layer3.mlp"].activation_bytes
    assert block == pytest.approx(s * h * (34 + 5 * a * s / h), rel=1e-12)
    assert layers["embedding"].activation_bytes == s * h  # the dropout mask of its output


def test_tied_lm_head_costs_flops_but_no_parameters() -> None:
    """GPT-2's LM head shares the token embedding: 2 s h V FLOPs, only the final norm's 2h parameters."""
    head = preset("gpt2-1.5b").layers[-1]
    assert head.name == "head"
    assert head.params == 2 * 1600
    assert head.forward_flops == 2 * 1024 * 1600 * 50257


def test_transformer_builder_counts_gated_untied_model() -> None:
    """A LLaMA-style shape (gated FFN, no biases, RMS norm, untied head, no learned positions)."""
    h, f, v, n = 64, 172, 100, 2
    model = transformer_model(
        "tiny", layers=n, hidden=h, heads=4, ffn=f, vocab=v, seq=16,
        max_positions=0, bias=False, gated_ffn=True, norm_params=1, head="untied",
    )  # fmt: skip
    expected = v * h + n * (4 * h * h + 3 * h * f + 2 * h) + h + v * h
    assert model.params == expected


def test_transformer_rejects_heads_not_dividing_hidden() -> None:
    """hidden must be a multiple of heads."""
    with pytest.raises(ValueError, match="multiple of heads"):
        Transformer(layers=1, hidden=10, heads=3, ffn=40, vocab=10, seq=4)


def test_layer_list_with_repeat_expands_into_numbered_layers() -> None:
    """repeat: 3 gives three layers block#1..block#3, each with the full cost."""
    spec = ModelSpec.model_validate(
        {
            "layers": [
                {"name": "stem", "params": 100, "flops": "1GFLOP"},
                {"name": "block", "params": 2e6, "flops": 5e9, "activations": "1MB", "repeat": 3},
            ]
        }
    )
    model = build_model(spec)
    assert [layer.name for layer in model.layers] == ["stem", "block#1", "block#2", "block#3"]
    assert model.params == 100 + 3 * 2e6
    assert model.layers[2].activation_bytes == 1e6


def test_backward_flops_default_to_twice_forward() -> None:
    """A layer without backward_flops costs 2 x its forward FLOPs backward."""
    model = build_model(
        ModelSpec.model_validate({"layers": [{"name": "a", "params": 1, "flops": 3e9}]})
    )
    assert model.layers[0].backward_flops == 6e9


def test_explicit_backward_flops_are_kept() -> None:
    """A layer's own backward_flops overrides the 2x default."""
    spec = {"layers": [{"name": "a", "params": 1, "flops": 3e9, "backward_flops": 4e9}]}
    assert build_model(ModelSpec.model_validate(spec)).layers[0].backward_flops == 4e9


def test_presets_default_to_twice_forward_backward() -> None:
    """Every preset layer's backward is 2 x its forward."""
    for layer in preset("bert-large").layers:
        assert layer.backward_flops == 2 * layer.forward_flops


def test_unknown_preset_names_key_path_hint_and_choices() -> None:
    """A misspelt preset: error at model.preset, a did-you-mean, the list of presets."""
    with pytest.raises(ScenarioError) as info:
        build_model(ModelSpec(preset="resnet5"), path="model")
    problem = info.value.problems[0]
    assert problem.path == "model.preset"
    assert "did you mean 'resnet50'" in problem.message
    assert problem.allowed.startswith("resnet50, vgg16, bert-large, gpt2-1.5b, gpt3-125m")
    assert problem.allowed == ", ".join(registered_presets())


def test_alias_builds_the_same_preset() -> None:
    """gpt2-xl is another name of gpt2-1.5b."""
    assert preset("gpt2-xl").params == preset("gpt2-1.5b").params


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_every_preset_is_registered_and_sane(name: str) -> None:
    """Each listed preset builds, named after itself, with its published parameters, positive
    FLOPs and activations in every convolution, attention and MLP layer.

    Some transformer end layers keep nothing: BERT's head is its pooler only (no final norm,
    no LM head), whose few h values Korthikanti's count leaves out.
    """
    model = preset(name)
    assert model.name == name
    assert model.params == PUBLISHED_PARAMS[name]
    assert model.forward_flops > 0 and model.backward_flops == 2 * model.forward_flops
    assert all(layer.activation_bytes >= 0 for layer in model.layers)
    assert all(
        layer.activation_bytes > 0
        for layer in model.layers
        if layer.kind in ("", "attention", "mlp")
    )


def test_registry_is_filled_by_the_decorator() -> None:
    """@preset registers by name, in order; registering a taken name is refused."""
    names = list(registered_presets())
    assert names[:4] == list(PUBLISHED_PARAMS)
    assert all(name.startswith(FAMILIES) for name in names[4:])
    # GPT-3 family, LLaMA-2, Narayanan et al. Table 1, mixtures of experts, the measured
    # runs' models (BLOOM, Llama 3 x 3, MPT-7B)
    assert len(names) == 4 + 8 + 3 + 10 + 3 + 5
    with pytest.raises(ValueError, match="already registered"):
        models.preset("vgg16", "again")(dense_presets.vgg16)


def test_the_order_does_not_depend_on_which_catalogue_is_imported_first() -> None:
    """The registry imports its catalogues on its first lookup; catalogues imported directly
    before it register first, and still list in their place (dense, experts, published runs)."""
    code = (
        "import clustersim.model.llm_presets, clustersim.model.moe_presets\n"
        "from clustersim.model import registered_presets\n"
        "print(' '.join(registered_presets()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == list(registered_presets())
    assert {p.module for p in registered_presets().values()} == set(models.CATALOGUES)


def test_cli_lists_models(capsys: pytest.CaptureFixture[str]) -> None:
    """`clustersim list models` prints each preset with parameters and forward GFLOPs per sample."""
    assert main(["list", "models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(registered_presets())
    assert "25.6 M params" in lines[0] and "8.18 GFLOPs/sample" in lines[0]
