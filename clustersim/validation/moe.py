"""A published mixture-of-experts training throughput: DeepSeek-V3 on 2048 H800 GPUs.

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), Section 1 and
Table 1: 180K H800 GPU-hours per trillion tokens, on 2048 H800s with pipeline parallelism
16, expert parallelism 64 and ZeRO-1 data parallelism.  ``scenarios/moe/deepseek_v3_2048.yaml``
says what it takes from elsewhere (the GPU efficiency is Megatron-LM's A100 calibration,
not fitted here) and what differs from the report; held within 20%, as in
``tests/test_moe_validation.py``."""

from __future__ import annotations

from ..api import simulate
from .case import Case, Tolerance, Value, scenario

FAMILY = "moe"
GPUS = 2048
SEQUENCE = 4096
"""DeepSeek-V3's pre-training sequence length (tokens)."""


def _gpu_hours_per_trillion_tokens() -> Value:
    summary = simulate(scenario("moe", "deepseek_v3_2048.yaml")).summary
    tokens = summary["global_batch"] * SEQUENCE
    return GPUS * summary["iteration_time_s"] / 3600 * 1e12 / tokens


CASES = (
    Case(
        "moe-deepseek-v3",
        FAMILY,
        "DeepSeek-V3, 2048 H800s, pp 16 x ep 64, GPU-hours per 1e12 tokens",
        "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Section 1 and Table 1",
        180e3,
        "GPU-h",
        Tolerance(rel=0.20),
        _gpu_hours_per_trillion_tokens,
        "scenarios/moe/deepseek_v3_2048.yaml",
    ),
)
