"""The pipeline bubble formulas (cases B1-B5 of ``shared/validation/cases.md``) on the
reference pipeline of ``tests/test_pipeline.py``: p = 4 GPUs on one switch, one layer per
virtual stage with t_f = 1 ms forward and t_b = 2 ms backward per micro-batch, no
parameters and no activation bytes (free optimizer step and inter-stage transfers)."""

from __future__ import annotations

from functools import partial
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


def _summary(schedule: str, **options: Any) -> dict[str, Any]:
    return simulate(parse_scenario(pipeline_document(schedule, **options))).summary


def measure(schedule: str, metric: str, options: dict[str, Any]) -> Value:
    """``metric`` of ``schedule``: a summary key, ``peak_microbatches`` (of stage 0, with
    1 MB of activations per sample so that they count) or ``bubble_s`` (iteration time
    less the m v (t_f + t_b) of work each GPU does)."""
    if metric == "peak_microbatches":
        memory = _summary(schedule, activations="1MB", **options)["activation_memory"]
        return float(memory["0"]["peak_microbatches"])
    summary = _summary(schedule, **options)
    if metric == "bubble_s":
        chunks = options.get("chunks", 1)
        return summary["iteration_time_s"] - M * chunks * (T_F + T_B)
    return summary[metric]


ROWS: tuple[tuple[str, str, str, float, str, float, str, str, dict[str, Any]], ...] = (
    # id, title, source, expected, unit, relative tolerance, schedule, metric, options
    ("B1-time", "naive, m = 1: iteration p(t_f + t_b)", NAIVE, P * (T_F + T_B), "s", 1e-3,
     "naive", "iteration_time_s", {"m": 1}),
    ("B1-idle", "naive, m = 1: idle fraction (p-1)/p", NAIVE, (P - 1) / P, "", 1e-3,
     "naive", "bubble_fraction", {"m": 1}),
    ("B2-time", "GPipe: iteration (m+p-1)(t_f + t_b)", GPIPE, (M + P - 1) * (T_F + T_B), "s", 1e-3,
     "gpipe", "iteration_time_s", {}),
    ("B2-bubble", "GPipe: bubble (p-1)/(m+p-1) = 3/11", GPIPE, 3 / 11, "", 1e-3,
     "gpipe", "bubble_fraction", {}),
    ("B3-time", "1F1B: the same iteration as GPipe", ONE_F_ONE_B, (M + P - 1) * (T_F + T_B), "s", 1e-3,
     "1f1b", "iteration_time_s", {}),
    ("B3-memory", "1F1B: stage 0 holds min(p, m) micro-batches", ONE_F_ONE_B, float(min(P, M)),
     "micro-batches", 0.0, "1f1b", "peak_microbatches", {}),
    ("B3-gpipe-memory", "GPipe: stage 0 holds all m micro-batches", GPIPE, float(M),
     "micro-batches", 0.0, "gpipe", "peak_microbatches", {}),
    ("B4-bubble", "interleaved, v = 2: bubble time (p-1)(t_f + t_b)/v, per-GPU t_f, t_b",
     INTERLEAVED, (P - 1) * V * (T_F + T_B) / V, "s", 1e-2, "interleaved", "bubble_s", {"chunks": V}),
    ("B5-time", "GPipe + recomputation: iteration (m+p-1)(2 t_f + t_b)", RECOMPUTE,
     (M + P - 1) * (2 * T_F + T_B), "s", 1e-3, "gpipe", "iteration_time_s", {"recompute": True, "activations": "1MB"}),
)  # fmt: skip


def _case(
    cid: str,
    title: str,
    source: str,
    expected: float,
    unit: str,
    rel: float,
    schedule: str,
    metric: str,
    options: dict[str, Any],
) -> Case:
    shown = [f"{k} = {v}" for k, v in options.items() if k != "m"]
    if metric == "peak_microbatches":
        shown.append("activations = 1MB")
    how = ", ".join([f"{schedule} schedule", f"p = {P}", f"m = {options.get('m', M)}", *shown])
    compute = partial(measure, schedule, metric, options)
    return Case(cid, FAMILY, title, source, expected, unit, Tolerance(rel=rel), compute, how)


CASES = tuple(_case(*row) for row in ROWS)
