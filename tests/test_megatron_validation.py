"""Megatron-LM's throughput table from the catalog's DGX A100 and one A100 calibration.

Narayanan et al. 2021, Table 1 (GPT models on Selene's A100s, tensor x pipeline
x data parallel, full activation recomputation): achieved TFLOP/s per GPU.
scenarios/megatron/ builds each row from the catalog (``node: {preset: dgx-a100}``) with
NCCL's defaults under the roofline compute model; the A100's one efficiency (0.754, the
catalog's) is the fit to the eight rows 1.7B to 310.1B together: their mean signed error
(on the log) is within 1% of zero and every row within 10% of the paper.  The 529.6B and
1T rows (slower to simulate) are held by ``clustersim reproduce``
(clustersim/validation/megatron.py) instead of this suite.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from clustersim import load_scenario, simulate

from . import shared_runs

FOLDER = Path(__file__).resolve().parent.parent / "scenarios" / "megatron"
A100_EFFICIENCY = 0.754
"""The catalog's A100 efficiency (clustersim/hardware/gpus/a100-sxm4-80gb.yaml)."""
TABLE_1 = {
    # row: (tp, pp, dp, global batch, TFLOP/s per GPU in the paper, parameters in billions)
    "1.7b": (1, 1, 32, 512, 137.0, 1.7),
    "3.6b": (2, 1, 32, 512, 138.0, 3.6),
    "7.5b": (4, 1, 32, 512, 142.0, 7.5),
    "18.4b": (8, 1, 32, 1024, 135.0, 18.4),
    "39.1b": (8, 2, 32, 1536, 138.0, 39.1),
    "76.1b": (8, 4, 32, 1792, 140.0, 76.1),
    "145.6b": (8, 8, 24, 2304, 148.0, 145.6),
    "310.1b": (8, 16, 15, 2160, 155.0, 310.1),
}


def _path(row: str) -> Path:
    return FOLDER / f"table1_{row}.yaml"


@pytest.fixture(scope="module")
def summaries() -> dict[str, dict]:
    return {row: shared_runs.summary(_path(row)) for row in TABLE_1}


@pytest.mark.parametrize("row", list(TABLE_1))
def test_scenario_is_the_tables_row(row: str, summaries: dict[str, dict]) -> None:
    tp, pp, dp, batch, _, billions = TABLE_1[row]
    s = summaries[row]
    assert (s["tp"], s["pp"], s["dp"], s["global_batch"]) == (tp, pp, dp, batch)
    # the paper rounds to 2 significant digits: 1.65B is its "1.7B"
    assert s["model"]["params"] / 1e9 == pytest.approx(billions, rel=0.03)
    assert s["recompute_mode"] == "full"
    assert s["memory"]["fits"]


def test_larger_models_reach_more_of_the_peak(summaries: dict[str, dict]) -> None:
    """Section 5.1: larger GEMMs give higher utilisation; from 18.4B on, each row's
    prediction rises with the model, as the paper's 135 -> 155 TFLOP/s do."""
    rows = ["18.4b", "76.1b", "145.6b", "310.1b"]
    predicted = [summaries[r]["tflops_per_gpu"] for r in rows]
    assert predicted == sorted(predicted) and predicted[-1] > 1.1 * predicted[0], predicted


def test_every_row_is_the_catalogs_dgx_a100() -> None:
    """No row sets an efficiency (or any GPU number) of its own: each is the catalog's node."""
    for row in TABLE_1:
        node = yaml.safe_load(_path(row).read_text())["cluster"]["node"]
        assert node == {"preset": "dgx-a100"}, (row, node)
        gpu = load_scenario(_path(row)).cluster.node.gpu
        assert gpu.efficiency == A100_EFFICIENCY


def test_the_calibration_is_the_fit_to_the_table(summaries: dict[str, dict]) -> None:
    """0.754 is the least-squares fit of the eight rows: their errors (on the log) average to
    within 1% of zero, so it neither over- nor under-predicts the table."""
    logs = [math.log(summaries[r]["tflops_per_gpu"] / TABLE_1[r][4]) for r in TABLE_1]
    assert abs(sum(logs) / len(logs)) < 0.01, logs


@pytest.mark.parametrize("row", list(TABLE_1))
def test_every_row_is_within_10_percent(row: str, summaries: dict[str, dict]) -> None:
    paper = TABLE_1[row][4]
    assert summaries[row]["tflops_per_gpu"] == pytest.approx(paper, rel=0.10)


def test_gpt3_175b_worked_example() -> None:
    """Section 5.1's GPT-3 175B on 1024 A100s, batch 1536: 140 TFLOP/s per GPU, so 300B
    tokens take about 34 days (8 T P / (n X))."""
    summary = simulate(FOLDER / "gpt3_175b_1024.yaml").summary
    assert summary["tflops_per_gpu"] == pytest.approx(140.0, rel=0.15)  # 147.6
    assert summary["memory"]["fits"]
    tokens_per_iteration = 1536 * 2048
    days = 300e9 / tokens_per_iteration * summary["iteration_time_s"] / 86400
    assert days == pytest.approx(34, rel=0.15)
