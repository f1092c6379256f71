"""Pipeline stages on mixed hardware (issue 32): tensor groups of one GPU type, memory
checked per type.

Held to: each device against its own type's memory (an A100 40GB over capacity, an H100
80GB with the same peak within it); and exit 2 with key paths for what is refused.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from clustersim.api import memory_block, prepare
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.model.memory import over_capacity_message
from clustersim.scenario import parse_scenario

A100 = {"preset": "dgx-a100"}
H100 = {"preset": "dgx-h100"}
SHAPE = {"layers": 12, "hidden": 1024, "heads": 16, "seq": 1024, "vocab": 2048}
"""A small GPT-like transformer; its head (2 h V FLOPs per token) is a fifth of a block's."""


def doc(
    groups: list[dict[str, Any]],
    *,
    layers: int = 12,
    stages: str = "even",
    micro_batches: int = 8,
    workers: str = "rack0/node*/gpu0",
    **parallelism: Any,
) -> dict[str, Any]:
    """One rack of one node per group (in order); the workers are GPU 0 of each node, so with
    ``pp`` = the nodes each stage is one GPU of its node's type."""
    return {
        "name": "balanced-stages",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": len(groups),
            "rack_uplink": {"oversubscription": 1},
            "node_groups": [{**group, "count": 1} for group in groups],
        },
        "model": {"transformer": {**SHAPE, "layers": layers}},
        "training": {
            "global_batch": 2 * micro_batches,
            "micro_batch": 2,
            "iterations": 1,
            "precision": "bf16",
        },
        "parallelism": {"pp": len(groups), **parallelism},
        "data_parallel": {"workers": workers},
        "pipeline": {"schedule": "1f1b", **({"stages": stages} if stages != "even" else {})},
        "network": {"model": "analytical"},
    }


def with_gpu(group: dict[str, Any], **gpu: Any) -> dict[str, Any]:
    """A node group whose GPU preset is kept and ``gpu`` keys set beside it."""
    preset = "a100-sxm4-80gb" if group["preset"] == "dgx-a100" else "h100-sxm5-80gb"
    return {**group, "gpu": {"preset": preset, **gpu}}


def test_each_device_is_checked_against_its_own_memory() -> None:
    """H100 80 GB then A100 40 GB, tp 8 x dp 2: every GPU needs the same 44 GB, which fits
    the H100s only; the check names the A100s (``fullest_device``, the warning), not the first
    device with the peak."""
    document = {
        **doc([H100, with_gpu(A100, preset="a100-sxm4-40gb")], stages="even"),
        "model": {
            "transformer": {"layers": 40, "hidden": 8192, "heads": 64, "seq": 2048, "vocab": 32000}
        },
        "training": {"global_batch": 16, "micro_batch": 1, "iterations": 1, "precision": "bf16"},
        "parallelism": {"tp": 8, "dp": 2},
        "data_parallel": {"workers": "*/gpu*"},
    }
    del document["pipeline"]
    memory = memory_block(prepare(parse_scenario(document)))
    rows = memory.per_device
    assert rows["rack0/node0/gpu3"].fits and rows["rack0/node0/gpu3"].capacity_bytes == 80e9
    assert not rows["rack0/node1/gpu3"].fits and rows["rack0/node1/gpu3"].capacity_bytes == 40e9
    assert 40e9 < rows["rack0/node1/gpu3"].peak_bytes == rows["rack0/node0/gpu3"].peak_bytes
    assert memory.devices_over_capacity == 8 and not memory.fits
    assert memory.peak_device == "rack0/node0/gpu0" and memory.fullest_device == "rack0/node1/gpu0"
    assert "rack0/node1/gpu0 needs" in over_capacity_message(memory)


BAD = [
    (
        lambda d: (
            d["parallelism"].update(pp=1, tp=16, allow_cross_node_tp=True),
            d["data_parallel"].update(workers="*/gpu*"),
        ),
        "parallelism.tp",
        "one GPU type",
    ),
]


@pytest.mark.parametrize("change,path,allowed", BAD, ids=["tp"])
def test_bad_input_names_its_key(change: Any, path: str, allowed: str) -> None:
    document = doc([A100, H100])
    change(document)
    with pytest.raises(ScenarioError) as raised:
        prepare(parse_scenario(document))
    problems = {p.path: p for p in raised.value.problems}
    assert path in problems, problems
    assert allowed in (problems[path].allowed or "")


def test_a_tensor_group_across_types_is_exit_2_naming_devices_and_types(
    tmp_path: Any, capsys: Any
) -> None:
    """A custom-width group over an A100 node and an H100 node (allow_cross_node_tp): exit 2
    at parallelism.tp, naming both types and the devices of each."""
    document = doc([A100, H100], workers="*/gpu[0-3]")
    document["parallelism"] = {"pp": 1, "tp": 8, "allow_cross_node_tp": True}
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "parallelism.tp" in err
    assert "4 x a100-sxm4-80gb (rack0/node0/gpu0 .. rack0/node0/gpu3)" in err
    assert "4 x h100-sxm5-80gb (rack0/node1/gpu0 .. rack0/node1/gpu3)" in err
    within = copy.deepcopy(document)
    within["parallelism"] = {"pp": 2, "tp": 4}  # one group per node: one type each
    path.write_text(yaml.safe_dump(within))
    assert main(["validate", str(path)]) == 0
    assert "stages [" in capsys.readouterr().out
