"""The production family of ``clustersim reproduce``: published measurements of real runs,
rebuilt from the hardware catalog and the published layout only.

The family's numbers are held by ``make test``'s ``clustersim reproduce`` (every case within
20%, the mean within 10%; about 30 s).  Here: what the family is made of (at least 12 cases,
at least 6 independent sources, no hardware number of a case's own), the family target's gate
in the reproduce command, and the pricing fp8 cases rely on (the attention core in 16 bits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import load_scenario, validation
from clustersim.compute import ProductRate, compute_model, curve_at
from clustersim.compute.models import Operation
from clustersim.validation import production
from clustersim.validation.case import CALIBRATION, HELD_OUT, Case, Outcome, Tolerance

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "scenarios" / "production"
HARDWARE_NUMBERS = {"flops", "efficiency", "peaks", "compute", "memory", "memory_bandwidth"}
"""Keys that would set a GPU's speed by hand."""


def _runs() -> dict[str, Any]:
    """Case id -> the scenario document of each training case."""
    return {
        case.id: yaml.safe_load((ROOT / case.how).read_text(encoding="utf-8"))
        for case in production.CASES
        if case.how.startswith("scenarios/")
    }


def _gpus(doc: dict[str, Any]) -> int:
    """GPUs of a run: its tp x pp x cp x dp, or every GPU of its nodes (8 per catalog node)."""
    par = doc.get("parallelism")
    if par and "dp" in par:
        return int(par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1) * par["dp"])
    cluster = doc["cluster"]
    return int(cluster["racks"] * cluster["nodes_per_rack"] * 8)


def _shares_nics(doc: dict[str, Any]) -> bool:
    """Its nodes have fewer NICs than GPUs (the catalog's DGX nodes have one per GPU)."""
    return int(doc["cluster"]["node"].get("nics", 8)) < 8


def test_the_family_is_as_wide_as_the_issue_asks() -> None:
    """Issue 41's floors: at least 30 measured cases, at least half of them held out, at least
    6 runs on 2,048 GPUs or more and 3 on nodes whose GPUs share NICs; every case of a
    publisher, within 20%."""
    cases = validation.FAMILIES[production.FAMILY]
    assert len(cases) >= 30
    assert set(production.PUBLISHERS) == {case.id for case in cases}
    assert all(case.tolerance.rel == 0.20 for case in cases)
    assert all(case.split in (HELD_OUT, CALIBRATION) for case in cases)
    assert 2 * sum(case.split == HELD_OUT for case in cases) >= len(cases)
    runs = _runs()
    assert sum(_gpus(doc) >= 2048 for doc in runs.values()) >= 6
    assert sum(_shares_nics(doc) for doc in runs.values()) >= 3


def test_the_family_has_ten_independent_sources() -> None:
    assert len(set(production.PUBLISHERS.values())) >= 10


@pytest.mark.xfail(
    strict=True,
    reason="issue 41: the expressible published MoE runs are 4-67% too fast (docs/accuracy.md, "
    "Known gaps); they join the family when MoE pricing reproduces them",
)
def test_the_family_has_three_moe_runs() -> None:
    runs = _runs()
    assert (
        sum("moe" in doc["model"] or "mixtral" in str(doc["model"]) for doc in runs.values()) >= 3
    )


def _node(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["cluster"]["node"]


@pytest.mark.parametrize("path", sorted(FOLDER.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_case_is_the_catalog_and_the_published_layout(path: Path) -> None:
    """A case's node is a catalog preset; what it may change beside it is the network the
    source describes (NICs), never a GPU number: no efficiency, peak, curve or memory."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    node = _node(doc)
    assert "preset" in node
    assert set(node) <= {"preset", "nics", "nic"}, node
    text = path.read_text(encoding="utf-8")
    assert "efficiency:" not in text and "flops:" not in text
    scenario = load_scenario(path)
    assert scenario.cluster.node.gpu.preset is not None


def test_every_scenario_is_a_case() -> None:
    """No scenario of scenarios/production is left out of the family, nor a case without one."""
    files = {p.name for p in FOLDER.glob("*.yaml")}
    runs = {c.how.split("/")[-1] for c in production.CASES if c.how.startswith("scenarios/")}
    assert runs == files


def _outcome(
    error: float, family: str = production.FAMILY, split: str | None = None, gap: str = ""
) -> Outcome:
    case = Case("x", family, "t", "s", 1.0, "s", Tolerance(rel=0.2), lambda: 1.0, "", split, gap)
    return Outcome(case, 1.0 + error, error, error <= 0.2)


@pytest.mark.parametrize(
    ("errors", "ok"),
    [((0.05, 0.15, 0.05), True), ((0.09, 0.10, 0.09), True), ((0.15, 0.15, 0.05), False)],
)
def test_the_mean_target_gates_the_family(
    errors: tuple[float, ...], ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every case may pass its 20% and the family still fail: its mean |error| must stay
    within 10% (means 8.3% and 9.3%: pass; 11.7%: fails)."""
    monkeypatch.setattr(validation, "MEAN_GAPS", {})  # the means as if no gap were known
    outcomes = [_outcome(e) for e in errors]
    assert all(o.passed for o in outcomes)
    assert validation.passed(outcomes) is ok
    line = validation.family_lines(outcomes)[0]
    assert line.startswith(f"production: {len(errors)} cases, mean |error| ")
    assert ("target <= 10%: pass" in line) is ok


@pytest.mark.parametrize(
    ("held_out", "ok"),
    [((0.05, 0.15), True), ((0.10, 0.10), True), ((0.12, 0.09), False), ((0.19, 0.19), False)],
)
def test_the_held_out_mean_gates_the_family_on_its_own(
    held_out: tuple[float, ...], ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The accuracy users can expect is the held-out cases': their mean |error| must stay
    within 10% even where calibration cases pull the family's mean down (three at 1%)."""
    monkeypatch.setattr(validation, "MEAN_GAPS", {})  # the means as if no gap were known
    outcomes = [_outcome(e, split=HELD_OUT) for e in held_out]
    outcomes += [_outcome(0.01, split=CALIBRATION) for _ in range(3)]
    assert validation.family_lines(outcomes)[0].count("pass") == 1  # the family's mean passes
    assert validation.passed(outcomes) is ok
    held = next(line for line in validation.family_lines(outcomes) if "held out" in line)
    assert held.startswith(f"production, held out: {len(held_out)} cases, mean |error| ")
    assert ("target <= 10%: pass" in held) is ok


@pytest.mark.parametrize(
    ("error", "gap", "verdict", "ok"),
    [
        (0.25, "", "FAIL", False),
        (0.25, "fp8 priced too fast", "known gap", True),
        (0.05, "fp8 priced too fast", "FIXED", False),
        (0.05, "", "pass", True),
    ],
)
def test_a_known_gap_is_a_strict_expected_failure(
    error: float, gap: str, verdict: str, ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case marked with the gap it shows passes reproduce only while it misses; once it is
    within its tolerance reproduce fails until the mark goes. Its error counts in the means."""
    monkeypatch.setattr(validation, "MEAN_GAPS", {})  # the means as if no gap were known
    outcomes = [_outcome(error, split=HELD_OUT, gap=gap)]
    outcomes += [_outcome(0.01, split=HELD_OUT) for _ in range(4)]  # the mean stays within 10%
    assert outcomes[0].verdict == verdict
    assert validation.passed(outcomes) is ok
    held = next(line for line in validation.family_lines(outcomes) if "held out" in line)
    assert held.startswith("production, held out: 5 cases, mean |error| ")
    assert f"largest {validation.format_error(error)}" in held
    if verdict == "known gap":
        assert "1 known gap misses" in validation.verdict(outcomes)


def test_every_known_gap_says_why() -> None:
    """A known gap names what the model misses, and only measured (held-out or calibration)
    cases carry one."""
    for case in validation.all_cases():
        if case.known_gap:
            assert case.split is not None and len(case.known_gap) > 40, case.id


@pytest.mark.parametrize(
    ("held_out", "verdict", "ok"),
    [((0.15, 0.15), "known gap", True), ((0.05, 0.05), "FIXED, remove the mark", False)],
)
def test_a_known_gap_of_a_mean_is_a_strict_expected_failure(
    held_out: tuple[float, ...], verdict: str, ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mean marked as a known gap (validation.MEAN_GAPS) passes reproduce only while it
    misses its target, and says so on its line."""
    monkeypatch.setattr(validation, "MEAN_GAPS", {(production.FAMILY, HELD_OUT): "why"})
    outcomes = [_outcome(e, split=HELD_OUT) for e in held_out]
    outcomes += [_outcome(0.0, split=CALIBRATION) for _ in range(8)]  # the family's mean passes
    held = next(line for line in validation.family_lines(outcomes) if "held out" in line)
    assert f"(target <= 10%: {verdict})" in held
    assert validation.passed(outcomes) is ok


def test_the_shipped_mean_gaps_say_why() -> None:
    for (family, split), why in validation.MEAN_GAPS.items():
        assert family in validation.MEAN_TARGETS and len(why) > 40, (family, split)


def test_families_without_a_target_only_report() -> None:
    """A family without a mean target (the formulas') is reported, never gated by its mean."""
    outcomes = [_outcome(0.15, "nccl"), _outcome(0.15, "nccl")]
    assert validation.passed(outcomes)
    assert "target" not in validation.family_lines(outcomes)[0]


@pytest.mark.parametrize("flops", [1e9, 3e10, 4e11, 5e12])
def test_fp8_keeps_the_attention_core_in_16_bits(flops: float) -> None:
    """An H100 priced at fp8 runs its products at the fp8 peak and curve, and its attention
    core (scores, context, the fused kernel), forward and backward, at the bf16 ones
    (Transformer Engine's fp8 recipes keep attention in 16 bits: its DotProductAttention runs
    in fp8 only when fp8_dpa is asked for): each kernel's seconds against the roofline by
    hand."""
    doc = {
        "name": "fp8",
        "cluster": {"kind": "two_tier", "node": {"preset": "dgx-h100"}},
        "model": {"preset": "gpt3-125m"},
        "training": {"global_batch": 8, "precision": "fp8"},
    }
    from clustersim.scenario import parse_scenario

    gpu = parse_scenario(doc).cluster.node.gpu
    assert gpu.flops_per_s == 1979e12
    attention = gpu.compute.attention
    assert attention is not None and attention.peak_flops == 989e12
    bf16 = attention.curve
    fp8 = gpu.compute.curve
    model = compute_model(
        "roofline",
        gpu.flops_per_s,
        gpu.efficiency,
        gpu.memory_bandwidth_Bps,
        curve_at(fp8.e_max, fp8.kernel_time_s, 1979e12),
        attention=ProductRate(989e12, curve_at(bf16.e_max, bf16.kernel_time_s, 989e12)),
    )
    for name, peak, curve in (("qkv", 1979e12, fp8), ("scores", 989e12, bf16),
                              ("flash_attention", 989e12, bf16), ("fc1", 1979e12, fp8),
                              ("flash_attention.backward", 989e12, bf16),
                              ("scores.dgrad", 989e12, bf16), ("context.wgrad", 989e12, bf16),
                              ("fc1.dgrad", 1979e12, fp8), ("qkv.wgrad", 1979e12, fp8)):  # fmt: skip
        op = Operation(name, 1, 1, 1, 1, flops, 0.0)
        half = curve.kernel_time_s * curve.e_max * peak
        expected = flops / (peak * gpu.efficiency * curve.e_max * flops / (flops + half))
        assert model.operation_seconds(op) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("flash", [True, False])
def test_the_attention_core_names_every_attention_kernel_and_its_backward(flash: bool) -> None:
    """Every kernel of a layer's attention core and each of its backward kernels is in
    ATTENTION_CORE, and no other kernel is (the products and memory-bound kernels keep the
    products' rate): the backward of an fp8 run's attention stays in 16 bits too."""
    from clustersim.compute.models import ATTENTION_CORE
    from clustersim.model.operators import backward_operations, forward_operations
    from clustersim.model.transformer import transformer_model

    model = transformer_model(
        "core", layers=2, hidden=1024, heads=16, ffn=4096, vocab=32000, seq=2048,
        flash_attention=flash,
    )  # fmt: skip
    layer = next(x for x in model.layers if x.kind == "attention")
    forward = forward_operations(layer, model.transformer, 1, 1)
    core = [op for op in forward if op.name in ("scores", "context", "flash_attention")]
    assert core and all(op.name in ATTENTION_CORE for op in core)
    backward = backward_operations(core)
    assert backward and all(op.name in ATTENTION_CORE for op in backward)
    others = [op for op in forward if op not in core]
    assert not any(op.name in ATTENTION_CORE for op in others + backward_operations(others))


def test_bf16_has_no_attention_rate_of_its_own() -> None:
    """At bf16 (or on a GPU described by hand) every kernel runs at the one peak and curve."""
    doc = {
        "name": "bf16",
        "cluster": {"kind": "two_tier", "node": {"preset": "dgx-h100"}},
        "model": {"preset": "gpt3-125m"},
        "training": {"global_batch": 8, "precision": "bf16"},
    }
    from clustersim.scenario import parse_scenario

    assert parse_scenario(doc).cluster.node.gpu.compute.attention is None


@pytest.mark.parametrize(
    ("preset", "published"),
    [
        ("bloom-176b", 176_247e6),  # Le Scao et al. 2022, Table 3 (176,247M)
        ("llama3-8b", 8_030_261_248),  # Hugging Face meta-llama/Meta-Llama-3-8B
        ("llama3-70b", 70_553_706_496),  # Hugging Face meta-llama/Meta-Llama-3-70B
        ("llama3-405b", 405_853_388_800),  # Hugging Face meta-llama/Llama-3.1-405B
    ],
)
def test_the_runs_model_presets_have_their_published_size(preset: str, published: float) -> None:
    """The presets the measured runs train have the parameters their authors publish."""
    from clustersim.model.presets import build_preset

    assert build_preset(preset).params == pytest.approx(published, rel=2e-4)


def test_the_accuracy_page_lists_every_measured_case_with_its_split() -> None:
    """docs/accuracy.md has a row for every case of the production family and every measured
    mixture-of-experts run, saying whether it is held out or calibration."""
    from clustersim.validation import moe

    rows = {
        line.split("|")[1].strip(): line
        for line in (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `")
    }
    for case in (*production.CASES, *(c for c in moe.CASES if c.split)):
        row = rows.get(f"`{case.id}`")
        assert row is not None, case.id
        assert case.split.replace("-", " ") in row, case.id  # type: ignore[union-attr]
