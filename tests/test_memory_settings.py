"""Device memory beyond model states and activations: ``training.memory`` (fragmentation
allowance, communication buffers), and a published per-GPU figure.

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
from clustersim.model.memory import DEFAULT_FRAGMENTATION
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
    row = next(iter(memory_of(document).per_device.values()))
    states = row.weights_bytes + row.gradients_bytes + row.optimizer_states_bytes
    assert states * tp == pytest.approx(120e9, rel=0.03)  # the paper's baseline, / t


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


@pytest.mark.parametrize("value", [1.0, -0.1, 2])
def test_fragmentation_outside_zero_to_one_is_refused(value: float) -> None:
    base = doc(tp=2, dp=4, batch=8)
    base["training"]["memory"] = {"fragmentation": value}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base)
    assert info.value.problems[0].path == "training.memory.fragmentation"
