"""The pipeline bubble formulas (cases B1-B5 of ``shared/validation/cases.md``) on the
reference pipeline of ``tests/test_pipeline.py``: p = 4 GPUs on one switch, one layer per
virtual stage with t_f = 1 ms forward and t_b = 2 ms backward per micro-batch, no
parameters and no activation bytes (free optimizer step and inter-stage transfers)."""

from __future__ import annotations

from typing import Any

from ..api import simulate
from ..scenario import parse_scenario
from .case import Case, Tolerance, Value

FAMILY = "bubbles"
GPIPE = "Huang et al. 2019 (GPipe), Section 2.3: bubble (p-1)/(m+p-1)"
ONE_F_ONE_B = "Narayanan et al. 2021 (Megatron-LM), Section 2.2.1: 1F1B"
INTERLEAVED = "Narayanan et al. 2021 (Megatron-LM), Section 2.2.2: interleaved, bubble / v"
NAIVE = "cases.md B1: naive model parallelism, idle (p-1)/p"
RECOMPUTE = "Chen et al. 2016 / GPipe: recomputation adds one forward per backward"
T_F = 1e-3
T_B = 2e-3
SAMPLES = 100
P = 4
M = 8
V = 2


def pipeline_document(
    schedule: str, m: int = M, *, chunks: int = 1, recompute: bool = False, activations: str = "0"
) -> dict[str, Any]:
    """``schedule`` over p = 4 stages, ``m`` micro-batches of 100 samples, ``chunks`` per GPU."""
    return {
        "name": f"bubble-{schedule}",
        "cluster": {
            "kind": "switch",
            "devices": P,
            "device": {"flops": "100TFLOPS"},
            "link": {"bandwidth": "1000PB/s", "latency": "0"},
        },
        "model": {
            "layers": [
                {
                    "name": "block",
                    "params": 0,
                    "flops": 1e9,
                    "activations": activations,
                    "repeat": P * chunks,
                }
            ]
        },
        "training": {"global_batch": SAMPLES * m, "iterations": 2},
        "parallelism": {"pp": P},
        "pipeline": {
            "schedule": schedule,
            "micro_batches": m,
            "chunks": chunks,
            "recompute": recompute,
        },
    }


def _summary(schedule: str, **kw: Any) -> dict[str, Any]:
    return simulate(parse_scenario(pipeline_document(schedule, **kw))).summary


def _peak_micro_batches(schedule: str) -> Value:
    """Micro-batches of activations stage 0 holds at once (1 MB per sample so they count)."""
    memory = _summary(schedule, activations="1MB")["activation_memory"]
    return float(memory["0"]["peak_microbatches"])


def _interleaved_bubble_s() -> Value:
    summary = _summary("interleaved", chunks=V)
    return summary["iteration_time_s"] - M * V * (T_F + T_B)


def _case(
    cid: str,
    title: str,
    source: str,
    expected: float,
    unit: str,
    rel: float,
    compute: Any,
    how: str,
) -> Case:
    return Case(cid, FAMILY, title, source, expected, unit, Tolerance(rel=rel), compute, how)


CASES = (
    _case(
        "B1-time",
        "naive, p = 4, m = 1: iteration p(t_f + t_b)",
        NAIVE,
        P * (T_F + T_B),
        "s",
        1e-3,
        lambda: _summary("naive", m=1)["iteration_time_s"],
        "naive schedule, p = 4, m = 1",
    ),
    _case(
        "B1-idle",
        "naive, p = 4, m = 1: idle fraction (p-1)/p",
        NAIVE,
        (P - 1) / P,
        "",
        1e-3,
        lambda: _summary("naive", m=1)["bubble_fraction"],
        "naive schedule, p = 4, m = 1",
    ),
    _case(
        "B2-time",
        "GPipe, p = 4, m = 8: iteration (m+p-1)(t_f + t_b)",
        GPIPE,
        (M + P - 1) * (T_F + T_B),
        "s",
        1e-3,
        lambda: _summary("gpipe")["iteration_time_s"],
        "gpipe schedule, p = 4, m = 8",
    ),
    _case(
        "B2-bubble",
        "GPipe, p = 4, m = 8: bubble 3/11",
        GPIPE,
        3 / 11,
        "",
        1e-3,
        lambda: _summary("gpipe")["bubble_fraction"],
        "gpipe schedule, p = 4, m = 8",
    ),
    _case(
        "B3-time",
        "1F1B, p = 4, m = 8: same iteration as GPipe",
        ONE_F_ONE_B,
        (M + P - 1) * (T_F + T_B),
        "s",
        1e-3,
        lambda: _summary("1f1b")["iteration_time_s"],
        "1f1b schedule, p = 4, m = 8",
    ),
    _case(
        "B3-memory",
        "1F1B: stage 0 holds min(p, m) micro-batches",
        ONE_F_ONE_B,
        float(min(P, M)),
        "micro-batches",
        0.0,
        lambda: _peak_micro_batches("1f1b"),
        "1f1b schedule, p = 4, m = 8, 1 MB of activations per sample",
    ),
    _case(
        "B3-gpipe-memory",
        "GPipe: stage 0 holds all m micro-batches",
        GPIPE,
        float(M),
        "micro-batches",
        0.0,
        lambda: _peak_micro_batches("gpipe"),
        "gpipe schedule, p = 4, m = 8, 1 MB of activations per sample",
    ),
    _case(
        "B4-bubble",
        "interleaved, v = 2: bubble time (p-1)(t_f + t_b)/v",
        INTERLEAVED,
        (P - 1) * V * (T_F + T_B) / V,
        "s",
        1e-2,
        _interleaved_bubble_s,
        "interleaved schedule, p = 4, m = 8, 2 chunks per GPU (t_f, t_b per GPU: 2 ms, 4 ms)",
    ),
    _case(
        "B5-time",
        "GPipe + recomputation: iteration (m+p-1)(2 t_f + t_b)",
        RECOMPUTE,
        (M + P - 1) * (2 * T_F + T_B),
        "s",
        1e-3,
        lambda: _summary("gpipe", recompute=True, activations="1MB")["iteration_time_s"],
        "gpipe schedule with recompute, p = 4, m = 8",
    ),
)
