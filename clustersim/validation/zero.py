"""The ZeRO memory table (cases Z0-Z3): model states per device of a 7.5e9-parameter model
with mixed-precision Adam on 64 data-parallel GPUs, from the memory model the simulator
uses for every ZeRO run (``tests/test_zero.py`` holds the same numbers)."""

from __future__ import annotations

from ..model.memory import model_states
from .case import Case, Tolerance, Value

FAMILY = "zero"
SOURCE = "Rajbhandari et al. 2020 (ZeRO), Figure 1: Psi = 7.5B, N_d = 64, K = 12"
PSI = 7.5e9
N_D = 64
STAGES = (
    # stage, title, expected bytes per device
    (0, "plain data parallel: (2 + 2 + K) Psi", 120e9),
    (1, "ZeRO-1: 4 Psi + K Psi / N_d", 31.4e9),
    (2, "ZeRO-2: 2 Psi + (2 + K) Psi / N_d", 16.6e9),
    (3, "ZeRO-3: (2 + 2 + K) Psi / N_d", 1.875e9),
)


def _states(stage: int) -> Value:
    return model_states(PSI, zero_stage=stage, dp=N_D, precision="fp16", optimizer="adam").total


def _case(stage: int, title: str, expected: float) -> Case:
    return Case(
        f"Z{stage}",
        FAMILY,
        title,
        SOURCE,
        expected,
        "B",
        Tolerance(rel=5e-3),
        lambda: _states(stage),
        f"model states, zero stage {stage}, fp16, adam",
    )


CASES = tuple(_case(*row) for row in STAGES)
