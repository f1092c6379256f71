"""Megatron-LM's throughput table (Narayanan et al. 2021, Table 1: achieved TFLOP/s per GPU
with full recomputation on Selene's A100s), one case per row of ``scenarios/megatron/``.

The GPU efficiency of that folder is calibrated on the 18.4B row, held within 1%; the other
rows are predictions, held within 15% (as in ``tests/test_megatron_validation.py``)."""

from __future__ import annotations

from ..api import simulate
from .case import Case, Tolerance, Value, scenario

FAMILY = "megatron"
TABLE_1 = "Narayanan et al. 2021, Table 1"
ROWS = (
    # id, file, title, source, paper TFLOP/s per GPU, relative tolerance
    (
        "18.4b",
        "table1_18.4b.yaml",
        "18.4B, 8 x 1 x 32, 256 GPUs (calibration)",
        "row 18.4B",
        135.0,
        0.01,
    ),
    ("39.1b", "table1_39.1b.yaml", "39.1B, 8 x 2 x 32, 512 GPUs", "row 39.1B", 138.0, 0.15),
    ("76.1b", "table1_76.1b.yaml", "76.1B, 8 x 4 x 32, 1024 GPUs", "row 76.1B", 140.0, 0.15),
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
