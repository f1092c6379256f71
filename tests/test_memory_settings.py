"""Device memory beyond model states and activations: ``training.memory`` (fragmentation
allowance, communication buffers, CUDA context, how model states are kept), and a published
per-GPU figure.

Published figure: Rajbhandari et al. 2020 (ZeRO), Table 1: a 7.5B-parameter model with
mixed-precision Adam on 64 data-parallel GPUs holds 120 GB of model states per GPU
without ZeRO and 1.88 GB with P_os+g+p (stage 3), i.e. 16 Psi / 64.  With tensor
parallelism ZeRO-3 shards each tensor rank's 1/t slice over dp = 64 / t, so every
(t, dp) split of the same 64 GPUs must hold the same 1.88 GB (tolerance 3%: the preset
has 7.6e9 parameters, the paper rounds Psi to 7.5e9).
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import api
from clustersim.errors import ScenarioError
from clustersim.model.memory import (
    DEFAULT_FRAGMENTATION,
    MEGATRON,
    STATE_ACCOUNTINGS,
    model_states,
)
from clustersim.scenario import parse_scenario
from clustersim.scenario.training import MemorySpec

from .test_hybrid import doc, run


def memory_of(document: dict[str, Any]) -> Any:
    """The memory block of a scenario, from its plan (no simulation)."""
    return api.memory_block(api.prepare(parse_scenario(document)))


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_zero3_with_tp_holds_the_zero_papers_7_5b_states_on_64_gpus(tp: int) -> None:
    document = doc(tp=tp, dp=64 // tp, nodes=8, batch=64, zero=3)
    document["model"] = {"preset": "megatron-7.5b"}
    block = memory_of(document)
    row = next(iter(block.per_device.values()))
    states = row.weights_bytes + row.gradients_bytes + row.optimizer_states_bytes
    assert states == pytest.approx(1.88e9, rel=0.03)
    document["zero"] = {"stage": 0}
    document["training"]["memory"] = {"states": "zero"}  # the paper's accounting, pinned
    row = next(iter(memory_of(document).per_device.values()))
    states = row.weights_bytes + row.gradients_bytes + row.optimizer_states_bytes
    assert states * tp == pytest.approx(120e9, rel=0.03)  # the paper's baseline, / t
    del document["training"]["memory"]  # Megatron's own: fp32 main gradients, 18 Psi
    row = next(iter(memory_of(document).per_device.values()))
    megatron = row.weights_bytes + row.gradients_bytes + row.optimizer_states_bytes
    assert megatron == pytest.approx(states * 18 / 16, rel=1e-12)


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.3])
@pytest.mark.parametrize("zero", [0, 3])
def test_fragmentation_is_a_fraction_of_the_parts_and_counts_in_fits(
    fraction: float, zero: int
) -> None:
    base = doc(tp=2, dp=4, batch=8, zero=zero, recompute="none")  # auto would recompute to fit
    base["training"]["memory"] = {"fragmentation": 0}
    plain = memory_of(base)
    base["training"]["memory"] = {"fragmentation": fraction}
    with_allowance = memory_of(base)
    for name, row in plain.per_device.items():
        other = with_allowance.per_device[name]
        assert other.fragmentation_bytes == pytest.approx(fraction * row.peak_bytes, rel=1e-12)
        assert other.peak_bytes == pytest.approx((1 + fraction) * row.peak_bytes, rel=1e-12)
        assert row.fragmentation_bytes is None  # not written without an allowance
    # a capacity between the two peaks: fits without the allowance, not with it
    capacity = plain.peak_bytes * (1 + fraction / 2)
    base["cluster"]["node"]["gpu"]["memory"] = f"{capacity:.0f}B"
    assert memory_of(base).fits is False
    base["training"]["memory"] = {"fragmentation": 0}
    assert memory_of(base).fits is True


def test_the_default_allowance_is_ten_percent_of_the_parts() -> None:
    """Without ``training.memory`` the documented default applies (scenario and model agree)."""
    base = doc(tp=2, dp=4, batch=8)
    default = memory_of(base)
    base["training"]["memory"] = {"fragmentation": 0}
    bare = memory_of(base)
    assert MemorySpec().fragmentation == DEFAULT_FRAGMENTATION == 0.10
    for name, row in bare.per_device.items():
        assert default.per_device[name].peak_bytes == pytest.approx(1.1 * row.peak_bytes, rel=1e-12)


def test_buffers_false_leaves_the_communication_buffers_out() -> None:
    base = doc(tp=2, dp=4, batch=8, zero=3)
    base["training"]["memory"] = {"fragmentation": 0}
    counted = next(iter(memory_of(base).per_device.values()))
    assert counted.communication_buffers_bytes > 0
    base["training"]["memory"] = {"buffers": False, "fragmentation": 0}
    left_out = next(iter(memory_of(base).per_device.values()))
    assert left_out.communication_buffers_bytes == 0
    assert left_out.peak_bytes == pytest.approx(
        counted.peak_bytes - counted.communication_buffers_bytes, rel=1e-12
    )


def test_summary_shows_the_allowance_as_its_own_part() -> None:
    base = doc(tp=2, dp=4, batch=8)
    base["training"]["memory"] = {"fragmentation": 0.1}
    row = run(base).summary["memory"]["per_device"]["rack0/node0/gpu0"]
    parts = sum(
        row[k]
        for k in (
            "weights_bytes",
            "gradients_bytes",
            "optimizer_states_bytes",
            "activations_bytes",
            "communication_buffers_bytes",
        )
    )
    assert row["fragmentation_bytes"] == pytest.approx(0.1 * parts, rel=1e-12)
    assert row["peak_bytes"] == pytest.approx(1.1 * parts, rel=1e-12)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fragmentation", 1.0),
        ("fragmentation", -0.1),
        ("fragmentation", 2),
        ("context", "-1GB"),
        ("context", "lots"),
        ("states", "deepspeed"),
    ],
)
def test_a_memory_setting_out_of_its_range_is_refused(key: str, value: object) -> None:
    """A fragmentation outside [0, 1), a context that is no size, an accounting that is not
    named: refused at the key's path."""
    base = doc(tp=2, dp=4, batch=8)
    base["training"]["memory"] = {key: value}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base)
    assert info.value.problems[0].path == f"training.memory.{key}"


@pytest.mark.parametrize("context", ["1343MiB", "500MB"])
def test_context_is_its_own_part_outside_the_fragmentation(context: str) -> None:
    """``training.memory.context``: the CUDA context's bytes on every GPU, in the peak and in
    ``fits`` but not in the fragmentation allowance (the allocator does not hold it); the row
    leaves it out when 0."""
    base = doc(tp=2, dp=4, batch=8)
    plain = memory_of(base)
    bytes_ = {"1343MiB": 1343 * 2**20, "500MB": 500e6}[context]
    base["training"]["memory"] = {"context": context}
    with_context = memory_of(base)
    for name, row in plain.per_device.items():
        other = with_context.per_device[name]
        assert row.context_bytes is None and other.context_bytes == bytes_
        assert other.fragmentation_bytes == row.fragmentation_bytes
        assert other.peak_bytes == pytest.approx(row.peak_bytes + bytes_, rel=1e-12)
    base["cluster"]["node"]["gpu"]["memory"] = f"{plain.peak_bytes + bytes_ / 2:.0f}B"
    assert memory_of(base).fits is False


MEGATRON_TABLE = {
    # precision: (bytes per parameter, distributed optimizer: bytes + sharded bytes / d), from
    # Megatron-LM docs/user-guide/features/dist_optimizer.md
    "fp16": (20, 4, 16),
    "bf16": (18, 6, 12),
    "fp32": (16, 8, 8),
}


@pytest.mark.parametrize("precision", sorted(MEGATRON_TABLE))
@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_megatrons_accounting_is_its_table(precision: str, d: int) -> None:
    """Megatron-LM's bytes per parameter with Adam: fp16 20 (4 + 16/d distributed), bf16 18
    (6 + 12/d), fp32 16 (8 + 8/d); ZeRO's accounting keeps (2 + 2 + 12) in 16 bits."""
    whole, kept, sharded = MEGATRON_TABLE[precision]
    psi = 7.5e9
    plain = model_states(psi, precision=precision, optimizer="adam", accounting=MEGATRON)
    assert plain.total == pytest.approx(whole * psi, rel=1e-12)
    distributed = model_states(
        psi, zero_stage=1, dp=d, precision=precision, optimizer="adam", accounting=MEGATRON
    )
    assert distributed.total == pytest.approx((kept + sharded / d) * psi, rel=1e-12)
    zero = model_states(psi, zero_stage=1, dp=d, precision=precision, optimizer="adam")
    bytes_ = 4 if precision == "fp32" else 2
    k = 8 if precision == "fp32" else 12
    assert zero.total == pytest.approx((2 * bytes_ + k / d) * psi, rel=1e-12)


def test_states_setting_names_an_accounting() -> None:
    """``training.memory.states`` takes the names of the accountings."""
    assert set(STATE_ACCOUNTINGS) == {"zero", "megatron"}
    for name in STATE_ACCOUNTINGS:
        base = doc(tp=2, dp=4, batch=8)
        base["training"]["memory"] = {"states": name}
        assert parse_scenario(base).training.memory.states == name
