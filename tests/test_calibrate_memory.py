"""``compute.memory_efficiency``.

The roofline prices a memory-bound kernel at bytes / (bandwidth x memory_efficiency), the
default 1 giving the numbers of before; a GPU file or a scenario giving a value outside
(0, 1] is refused (exit 2, the file and the key named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare
from clustersim.cli import main
from clustersim.compute import DEFAULT_CURVE, Operation, compute_model
from clustersim.strategies.kernel_times import DeviceModels

H100_BANDWIDTH = 3.35e12
"""The H100 SXM's memory bandwidth, B/s (its catalog file)."""
EFFICIENCIES = (0.3, 0.6, 0.9)
"""The memory efficiencies the traces are generated at."""


def run_doc(**training: Any) -> dict[str, Any]:
    """A run of a 2-block transformer on 2 H100s (dgx-h100's GPU), tp 2: 2 micro-batches of
    2 sequences per GPU by default."""
    train = {"global_batch": 4, "micro_batch": 2, "iterations": 1, "precision": "bf16"}
    return {
        "name": "profiled",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {"preset": "dgx-h100", "gpus": 2, "nics": 2},
        },
        "model": {
            "transformer": {"layers": 2, "hidden": 1024, "heads": 8, "seq": 512, "vocab": 32000}
        },
        "training": train | {"recompute": "none"} | training,
        "parallelism": {"tp": 2, "pp": 1},
        "pipeline": {"schedule": "1f1b"},
    }


def write_run(folder: Path, doc: dict[str, Any], name: str = "run.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# -- the key: the roofline, its default and its refusals ----------------------------------


def test_memory_bound_kernel_takes_bytes_over_bandwidth_times_memory_efficiency() -> None:
    """Default 1: exactly bytes / bandwidth (3 GB at 2 TB/s: 1.5 ms), a product exactly
    F / (peak x efficiency x eff(F)); memory_efficiency m divides the memory time by m and
    leaves the product's alone."""
    softmax = Operation("softmax", 0, 0, 0, 0, 0.0, 3e9)
    mm = Operation("fc1", 4096, 4096, 4096, 1, 2.0 * 4096**3, 3 * 2.0 * 4096**2)
    default = compute_model("roofline", 312e12, 0.8, 2e12)
    assert default.memory_efficiency == 1.0
    assert default.operation_seconds(softmax) == 1.5e-3
    product_s = 2.0 * 4096**3 / (312e12 * 0.8 * DEFAULT_CURVE(2.0 * 4096**3))
    assert default.operation_seconds(mm) == product_s
    for m in EFFICIENCIES:
        model = compute_model("roofline", 312e12, 0.8, 2e12, memory_efficiency=m)
        assert model.operation_seconds(softmax) == pytest.approx(1.5e-3 / m, rel=1e-12)
        assert model.operation_seconds(mm) == product_s


def test_a_scenario_without_the_key_prices_at_the_full_bandwidth(tmp_path: Path) -> None:
    """The catalog's H100 has no memory_efficiency: its device's model takes 1, so the run's
    memory-bound operations cost their bytes over 3.35 TB/s, as before the key."""
    prepared = prepare(write_run(tmp_path, run_doc()))
    device = prepared.topology.devices[prepared.strategy.placement.workers[0]]
    model = DeviceModels(tmp_path).of(device)
    assert model.memory_efficiency == 1.0 and model.bandwidth_Bps == H100_BANDWIDTH
    softmax = Operation("softmax", 0, 0, 0, 0, 0.0, 3.35e9)
    assert model.operation_seconds(softmax) == 1e-3


@pytest.mark.parametrize("value", [0, -0.5, 1.5, "fast", True])
def test_bad_memory_efficiency_in_a_gpu_file_exits_2_naming_file_and_key(
    value: Any, tmp_path: Path, capsys
) -> None:
    gpu = {"kind": "gpu", "name": "mine", "spec": {"compute": {"memory_efficiency": value}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(gpu))
    doc = run_doc()
    doc["cluster"]["node"]["gpu"] = {"preset": "./mine.yaml"}
    assert main(["validate", str(write_run(tmp_path, doc))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cluster.node.gpu.preset" in err and "mine.yaml" in err
    assert "compute.memory_efficiency" in err and "a number > 0 and <= 1" in err


@pytest.mark.parametrize("value", [0, 1.5, "fast"])
def test_bad_memory_efficiency_in_a_scenario_exits_2_at_its_key_path(
    value: Any, tmp_path: Path, capsys
) -> None:
    doc = run_doc()
    doc["cluster"]["node"]["gpu"] = {"preset": "h100-sxm", "compute": {"memory_efficiency": value}}
    assert main(["validate", str(write_run(tmp_path, doc))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "run.yaml" in err
    assert "cluster.node.gpu.compute.memory_efficiency" in err
