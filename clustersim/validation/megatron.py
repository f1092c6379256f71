"""Megatron-LM's throughput table (Narayanan et al. 2021, Table 1: achieved TFLOP/s per GPU
with full recomputation on Selene's A100s), one case per row of ``scenarios/megatron/``.

The scenarios are built from the catalog (``node: {preset: dgx-a100}``) with NCCL's defaults;
the A100's efficiency (0.754, the catalog's) is fitted to the eight rows 1.7B-310.1B together
(mean signed error -0.3% at the fit, +0.7% since the ring took NCCL's latency), so every row is held within 10% (as in
``tests/test_megatron_validation.py``, which leaves the 529.6B and 1T rows to this list)."""

from __future__ import annotations

from ..api import simulate
from .case import Case, Tolerance, Value, scenario

FAMILY = "megatron"
TABLE_1 = "Narayanan et al. 2021, Table 1"
_TABLE = (
    # id, params, tp, pp, GPUs, paper TFLOP/s per GPU
    ("1.7b", "1.7B", 1, 1, 32, 137.0),
    ("3.6b", "3.6B", 2, 1, 64, 138.0),
    ("7.5b", "7.5B", 4, 1, 128, 142.0),
    ("39.1b", "39.1B", 8, 2, 512, 138.0),
    ("76.1b", "76.1B", 8, 4, 1024, 140.0),
    ("145.6b", "145.6B", 8, 8, 1536, 148.0),
    ("310.1b", "310.1B", 8, 16, 1920, 155.0),
    ("529.6b", "529.6B", 8, 35, 2520, 163.0),
    ("1t", "1008B", 8, 64, 3072, 163.0),
)
ROWS = (
    # id, file, title, source, paper TFLOP/s per GPU, relative tolerance
    (
        "18.4b",
        "table1_18.4b.yaml",
        "18.4B, 8 x 1 x 32, 256 GPUs",
        "row 18.4B",
        135.0,
        0.10,
    ),
    *(
        (
            row,
            f"table1_{row}.yaml",
            f"{params}, {tp} x {pp} x {gpus // (tp * pp)}, {gpus} GPUs",
            f"row {params}",
            paper,
            0.10,
        )
        for row, params, tp, pp, gpus, paper in _TABLE
    ),
    ("175b", "gpt3_175b_1024.yaml", "GPT-3 175B, 8 x 8 x 16, 1024 GPUs", "", 140.0, 0.15),
)


def _tflops(name: str) -> Value:
    return simulate(scenario("megatron", name)).summary["tflops_per_gpu"] * 1e12


def _case(row: str, name: str, title: str, where: str, paper: float, rel: float) -> Case:
    source = f"{TABLE_1}, {where}" if where else "Narayanan et al. 2021, Section 5.1 estimate"
    return Case(
        f"megatron-{row}",
        FAMILY,
        title,
        source,
        paper * 1e12,
        "FLOP/s",
        Tolerance(rel=rel),
        lambda: _tflops(name),
        f"scenarios/megatron/{name}",
    )


CASES = tuple(_case(*row) for row in ROWS)
