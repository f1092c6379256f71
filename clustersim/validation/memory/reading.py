"""How the memory family reads memory: through the path a user's run takes.

A case builds a scenario (a shipped file or a document made in code), prepares it as
:func:`clustersim.simulate` does (:func:`clustersim.api.prepare`: topology, strategy, the
checks) and reads the ``memory`` block that run writes into summary.json
(:func:`clustersim.api.memory_block`), without playing the iterations: the memory plan
depends on the layout and the schedule, not on simulated time.  Units: bytes.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ...api import memory_block, prepare, scenario_topology
from ...metrics import MemoryBlock, MemoryRow
from ...scenario import Scenario, parse_scenario
from ...topology import Topology

FAMILY = "memory"
GB = 1e9
"""Bytes in a gigabyte: cases of several values give them in GB (1 GB = 1e9 bytes)."""
GPUS_PER_NODE = 8


def memory_of(scenario: Scenario | Path, topology: Topology | None = None) -> MemoryBlock:
    """The summary's ``memory`` block of ``scenario`` (a path, or a scenario built in code),
    prepared on ``topology`` if given (the same cluster built once for several cases)."""
    block = memory_block(prepare(scenario, topology))
    if block is None:
        raise ValueError(f"{scenario}: its strategy reports no memory")
    return block


def device(block: MemoryBlock, name: str | None = None) -> MemoryRow:
    """The row of device ``name`` (default: the device with the largest peak)."""
    return block.per_device[name or block.peak_device]


def model_states_bytes(row: MemoryRow) -> float:
    """Weights, gradients and optimizer states of one device (bytes)."""
    return row.weights_bytes + row.gradients_bytes + row.optimizer_states_bytes


def cluster_section(gpus: int) -> dict[str, Any]:
    """The ``cluster`` section of ``gpus`` GPUs of 80 GB, 8 to a node (one node of fewer):
    the cases that only count bytes need no particular hardware."""
    per_node = min(gpus, GPUS_PER_NODE)
    node = {
        "gpus": per_node,
        "gpu": {"flops": "100TFLOPS", "memory": "80GB"},
        "pcie": {"bandwidth": "16GB/s"},
        "nic": {"bandwidth": "100Gb/s"},
    }
    return {"kind": "two_tier", "racks": 1, "nodes_per_rack": gpus // per_node, "node": node}


@cache
def cluster(gpus: int) -> Topology:
    """The topology of :func:`cluster_section` ``(gpus)``, built once per size: a pure
    function of ``gpus``, shared by the cases as :func:`clustersim.api.prepare` allows (a
    run does not change its topology); ZeRO's table asks 9 times for 1,024 GPUs."""
    document = {
        "name": f"cluster-{gpus}",
        "cluster": cluster_section(gpus),
        "model": {"layers": [{"name": "layer", "params": 1.0, "flops": 1.0}]},
        "training": {"global_batch": gpus},
    }
    return scenario_topology(parse_scenario(document))
