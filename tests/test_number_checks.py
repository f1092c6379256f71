"""Every number is range-checked: bad input exits 2 with one line naming the file, the key
path (or the flag), what was wrong and what is allowed, never a traceback; numbers that are
each in range but overflow together stop the run with an error naming the quantity.

The sweep over the scenario keys is closed: :func:`test_every_numeric_key_is_swept` fails
when a model gains a numeric key that :data:`KEYS` does not sweep.
"""

from __future__ import annotations

import copy
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from clustersim import scenario as scenario_module
from clustersim.api import _check_finite, simulate
from clustersim.cli import main
from clustersim.devices import Stragglers, _RandomSlowdown
from clustersim.errors import ScenarioError, SimulationError
from clustersim.scenario import MAX_SEED, parse_scenario
from clustersim.scenario.cluster import FlatCluster
from clustersim.scenario.validation import _unwrap
from clustersim.strategies import registered_strategies
from clustersim.topology import FABRICS

from .conftest import SCENARIOS, compute, flat_topology, transfer

# --------------------------------------------------------------------------- base documents

PLUGIN_FABRIC = "numbers_switch"
"""A fabric registered from outside (below): a switch whose keys the builder reads itself."""


def _build_plugin_switch(spec: Any) -> Any:
    """The switch of ``spec``'s own keys (a plugin fabric checks them as it builds)."""
    flat = FlatCluster.model_validate({"kind": "switch", **(spec.model_extra or {})})
    return FABRICS.lookup("switch")(flat)


@pytest.fixture(autouse=True, scope="module")
def _plugin_fabric() -> Any:
    """The plugin fabric registered while this module's tests run."""
    FABRICS.add(PLUGIN_FABRIC, _build_plugin_switch)
    yield
    FABRICS.remove(PLUGIN_FABRIC)


_LAYERS = [{"name": "block", "params": 1e6, "flops": 1e9, "activations": "1MB", "repeat": 2}]
_SWITCH = {
    "kind": "switch",
    "devices": 4,
    "device": {
        "flops": "100TFLOPS",
        "memory": "80GB",
        "memory_bandwidth": "1TB/s",
        "peaks": {"fp32": "50TFLOPS"},
        "compute": {"curve": {"e_max": 0.8, "kernel_time": "5us"}},
    },
    "link": {"bandwidth": "100GB/s", "latency": "1us"},
}
_NODE = {
    "gpus": 4,
    "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
    "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
    "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
}


def _training(cluster: dict[str, Any], **sections: Any) -> dict[str, Any]:
    doc = {
        "name": "numbers",
        "seed": 0,
        "cluster": copy.deepcopy(cluster),
        "model": {"layers": copy.deepcopy(_LAYERS)},
        "training": {"global_batch": 16, "iterations": 2},
    }
    doc.update(copy.deepcopy(sections))
    return doc


def _workload(cluster: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    return {"name": "numbers", "cluster": copy.deepcopy(cluster), "workload": workload}


BASES: dict[str, dict[str, Any]] = {
    "flat": _training(
        _SWITCH,
        data_parallel={"allreduce": {"bucket": "25MB", "channels": 2}, "balance": {"*": 1}},
        network={"channels": 2},
        stragglers=[
            {"devices": "gpu1", "slowdown": 2},
            {"random": {"fraction": 0.5, "slowdown": {"dist": "lognormal", "sigma": 0.3}}},
            {"random": {"slowdown": {"dist": "exponential", "scale": 0.5}}},
            {"random": {"slowdown": {"dist": "uniform", "low": 1, "high": 2}}},
            {"links": "*", "bandwidth_factor": 0.5, "start": "1ms", "end": "2ms"},
        ],
    ),
    "ps": _training(
        _SWITCH,
        data_parallel={
            "sync": "ps",
            "ps": {
                "placement": "gpu",
                "servers": 1,
                "mode": "backup",
                "backup_k": 2,
                "staleness": 2,
                "geo_period": 4,
                "partition_bytes": "4MB",
                "credit": 2,
                "key_distribution": {"zipf": 0.5},
                "keys": 8,
                "sharding": "hash",
                "replicas": 1,
                "failover_timeout": "1s",
            },
        },
    ),
    "embedding": _training(
        _SWITCH,
        model={
            "layers": copy.deepcopy(_LAYERS),
            "embedding": {
                "rows": 1000,
                "dim": 8,
                "lookups_per_sample": 3,
                "distribution": {"zipf": 1.05},
                "tables": 2,
            },
        },
        data_parallel={"sync": "ps", "ps": {"placement": "gpu", "servers": 2}},
    ),
    "two_tier": _workload(
        {
            "racks": 2,
            "nodes_per_rack": 2,
            "spines": 2,
            "node": {**_NODE, "nvlink_domain": 1, "nics": 1},
            "rack_uplink": {"oversubscription": 2, "latency": "1us"},
        },
        {"program": [transfer("t", "rack0/node0/gpu0", "rack1/node0/gpu0", "1MB")]},
    ),
    "two_tier_tcp": _workload(
        {
            "racks": 1,
            "nodes_per_rack": 2,
            "node": {
                **_NODE,
                "nic": {**_NODE["nic"], "transport": "tcp", "tcp": {"share": 0.5}},
            },
        },
        {"program": [transfer("t", "rack0/node0/gpu0", "rack0/node1/gpu0", "1MB")]},
    ),
    "jobs": {
        "name": "numbers",
        "cluster": copy.deepcopy(_SWITCH),
        "jobs": [
            {
                "name": "a",
                "start": "1ms",
                "placement": "packed",
                "gpus": 2,
                "workload": {"collective": "allreduce", "bytes": "1MB"},
            },
            {
                "name": "b",
                "devices": "gpu3",
                "workload": {"program": [compute("c", "gpu3", flops=1e9)]},
            },
        ],
    },
    "mixed": _workload(
        {
            "racks": 2,
            "nodes_per_rack": 1,
            "node_groups": [
                {**_NODE, "count": 1, "gpu_hour_price": 2.0, "nvlink_domain": 1, "nics": 1},
                {**_NODE, "count": 1, "nic": {"bandwidth": "400Gb/s", "latency": "2us"}},
            ],
        },
        {"program": [transfer("t", "rack0/node0/gpu0", "rack1/node0/gpu0", "1MB")]},
    ),
    "uplink_bandwidth": _workload(
        {"racks": 2, "node": _NODE, "rack_uplink": {"bandwidth": "400Gb/s"}},
        {"program": [transfer("t", "rack0/node0/gpu0", "rack1/node0/gpu0", "1MB")]},
    ),
    "nvlink_pairs": _workload(
        {"node": {**_NODE, "nvlink": {"bandwidth": "300GB/s", "pairs": [[0, 1], [2, 3]]}}},
        {"program": [transfer("t", "rack0/node0/gpu0", "rack0/node0/gpu1", "1MB")]},
    ),
    "three_tier": _workload(
        {
            "kind": "three_tier",
            "pods": 2,
            "racks_per_pod": 2,
            "nodes_per_rack": 1,
            "spines": 1,
            "cores": 1,
            "node": _NODE,
        },
        {"program": [transfer("t", "pod0/rack0/node0/gpu0", "pod1/rack0/node0/gpu0", "1MB")]},
    ),
    "rail": _workload(
        {
            "kind": "rail_optimized",
            "groups": 2,
            "nodes_per_group": 1,
            "spines": 1,
            "node": {**_NODE, "nics": 4},
        },
        {"program": [transfer("t", "group0/node0/gpu0", "group1/node0/gpu0", "1MB")]},
    ),
    "plugin": _workload(
        {"kind": PLUGIN_FABRIC, "devices": 2, "link": {"bandwidth": "10GB/s"}},
        {"program": [transfer("t", "gpu0", "gpu1", "1MB")]},
    ),
    "custom": _workload(
        {
            "kind": "custom",
            "devices": [
                {
                    "name": "a",
                    "flops": "1TFLOPS",
                    "efficiency": 0.5,
                    "memory": "1GB",
                    "peaks": {"fp32": "1TFLOPS"},
                },
                {"name": "b", "memory_bandwidth": "1TB/s"},
            ],
            "links": [{"src": "a", "dst": "b", "bandwidth": "10GB/s", "latency": "1us"}],
        },
        {
            "program": [
                transfer("t", "a", "b", "1MB"),
                compute("f", "a", flops=1e9),
                compute("s", "a", seconds="1ms"),
                compute("m", "b", bytes="1MB"),
            ]
        },
    ),
    "collective": _workload(
        _SWITCH,
        {"collective": "broadcast", "bytes": "1MB", "root": 1, "chunk": "256kB", "iterations": 2},
    ),
    "trace": _workload(
        _SWITCH, {"trace": str(Path(__file__).parent / "data" / "kineto_step.json")}
    ),
    "transformer": _training(
        {"racks": 1, "nodes_per_rack": 2, "node": {**_NODE, "nvlink": {"bandwidth": "300GB/s"}}},
        model={
            "transformer": {
                "layers": 4,
                "hidden": 256,
                "heads": 4,
                "seq": 128,
                "vocab": 1000,
                "ffn": 1024,
                "kv_heads": 2,
            }
        },
        training={"global_batch": 16, "micro_batch": 1, "iterations": 1},
        parallelism={"tp": 2, "pp": 2, "dp": 2},
        pipeline={"schedule": "1f1b", "micro_batches": 8, "chunks": 1, "stage_layers": [5, 5]},
    ),
    "moe": _training(
        _SWITCH,
        model={
            "transformer": {"layers": 4, "hidden": 64, "heads": 2, "seq": 16, "vocab": 100},
            "moe": {
                "experts": 4,
                "top_k": 2,
                "capacity_factor": 1.25,
                "expert_ffn": 128,
                "shared_experts": 1,
                "expert_layers": [0, 2],
                "skew": {"zipf": 1.0},
            },
        },
        training={"global_batch": 16, "micro_batch": 1, "iterations": 1},
        parallelism={"dp": 4, "ep": 2},
    ),
    "moe_rule": _training(
        _SWITCH,
        model={
            "transformer": {"layers": 4, "hidden": 64, "heads": 2, "seq": 16, "vocab": 100},
            "moe": {
                "experts": 4,
                "expert_layers": {"every": 2, "first_dense": 1},
                "skew": {"max_load": 2.0},
            },
        },
        training={"global_batch": 16, "micro_batch": 1, "iterations": 1},
        parallelism={"dp": 4, "ep": 2},
    ),
    "failures": _training(
        _SWITCH,
        training={"global_batch": 16, "iterations": 2, "duration": "30d"},
        failures=[
            {"devices": "gpu1", "at": "1h", "repair": "10min"},
            {"links": "gpu0->*", "at": "2h", "repair": "1min"},
            {
                "devices": "gpu*",
                "mtbf": "1000h",
                "distribution": "weibull",
                "shape": 1.5,
                "seed": 3,
                "repair": "1h",
            },
        ],
        recovery={"restart_time": "5min", "elastic": True},
        checkpoint={
            "every": {"iterations": 10},
            "storage": {"bandwidth": "10GB/s", "latency": "5us"},
            "async": True,
        },
    ),
    "checkpoint_time": _training(
        _SWITCH,
        model={"transformer": {"layers": 2, "hidden": 64, "heads": 2, "seq": 16, "vocab": 100}},
        training={"global_batch": 16, "iterations": 2, "tokens": "2T"},
        checkpoint={"every": {"time": "30min"}},
    ),
    "backward": _training(
        _SWITCH,
        model={"layers": [{"name": "l", "params": 10, "flops": 10, "backward_flops": 20}]},
    ),
}
"""Valid documents (each is checked below) holding every numeric key at least once."""


@dataclass(frozen=True)
class Key:
    """One numeric key of a scenario model, where it is swept and what it allows."""

    model: str
    key: str
    base: str
    path: tuple[str | int, ...]
    zero_ok: bool = False
    negative_ok: bool = False

    @property
    def yaml_path(self) -> str:
        text = ""
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
        return text


def _keys(model: str, base: str, zero: tuple[str, ...] = (), **paths: Any) -> list[Key]:
    """The keys of ``model`` in document ``base``; ``paths`` maps key -> path in the document;
    ``zero`` lists the keys for which 0 is valid."""
    return [Key(model, key, base, tuple(path), zero_ok=key in zero) for key, path in paths.items()]


_DEVICE = ("cluster", "device")
_STRAGGLERS = ("stragglers",)
KEYS: list[Key] = [
    Key("Scenario", "seed", "flat", ("seed",), zero_ok=True),
    *_keys(
        "DeviceSpec",
        "flat",
        zero=("memory",),
        flops=(*_DEVICE, "flops"),
        efficiency=(*_DEVICE, "efficiency"),
        memory=(*_DEVICE, "memory"),
        memory_bandwidth=(*_DEVICE, "memory_bandwidth"),
        peaks=(*_DEVICE, "peaks", "fp32"),
    ),
    *_keys(
        "CurveSpec",
        "flat",
        zero=("kernel_time",),
        e_max=(*_DEVICE, "compute", "curve", "e_max"),
        kernel_time=(*_DEVICE, "compute", "curve", "kernel_time"),
    ),
    *_keys(
        "ProductRateSpec",
        "flat",
        peak=(*_DEVICE, "compute", "attention", "peak"),
    ),
    *_keys(
        "ComputeSpec",
        "flat",
        memory_efficiency=(*_DEVICE, "compute", "memory_efficiency"),
    ),
    *_keys(
        "LinkSpec",
        "flat",
        zero=("latency",),
        bandwidth=("cluster", "link", "bandwidth"),
        latency=("cluster", "link", "latency"),
    ),
    Key("FlatCluster", "devices", "flat", ("cluster", "devices")),
    *[
        Key(model, "sharp", base, ("cluster", "sharp"))
        for model, base in (
            ("TwoTierCluster", "two_tier"),
            ("ThreeTierCluster", "three_tier"),
            ("RailOptimizedCluster", "rail"),
        )
    ],
    *[
        Key(model, "gpu_hour_price", base, ("cluster", "gpu_hour_price"))
        for model, base in (
            ("FlatCluster", "flat"),
            ("TwoTierCluster", "two_tier"),
            ("ThreeTierCluster", "three_tier"),
            ("RailOptimizedCluster", "rail"),
            ("CustomCluster", "custom"),
            ("PluginCluster", "plugin"),
        )
    ],
    *_keys(
        "LayerSpec",
        "flat",
        zero=("params", "flops", "activations"),
        params=("model", "layers", 0, "params"),
        flops=("model", "layers", 0, "flops"),
        activations=("model", "layers", 0, "activations"),
        repeat=("model", "layers", 0, "repeat"),
    ),
    Key("LayerSpec", "backward_flops", "backward", ("model", "layers", 0, "backward_flops"), True),
    *_keys(
        "TrainingSpec",
        "flat",
        global_batch=("training", "global_batch"),
        iterations=("training", "iterations"),
    ),
    Key("TrainingSpec", "micro_batch", "transformer", ("training", "micro_batch")),
    Key("DataParallelSpec", "balance", "flat", ("data_parallel", "balance", "*")),
    Key("MemorySpec", "fragmentation", "flat", ("training", "memory", "fragmentation"), True),
    Key("MemorySpec", "context", "flat", ("training", "memory", "context"), True),
    *_keys(
        "AllreduceSyncSpec",
        "flat",
        zero=("bucket",),
        bucket=("data_parallel", "allreduce", "bucket"),
        channels=("data_parallel", "allreduce", "channels"),
    ),
    Key("NetworkSpec", "channels", "flat", ("network", "channels")),
    Key("EngineSpec", "max_events", "flat", ("engine", "max_events")),
    Key("EngineSpec", "max_memory", "flat", ("engine", "max_memory")),
    Key("JobSpec", "start", "jobs", ("jobs", 0, "start"), zero_ok=True),
    Key("JobSpec", "gpus", "jobs", ("jobs", 0, "gpus")),
    Key("FixedStraggler", "slowdown", "flat", (*_STRAGGLERS, 0, "slowdown")),
    Key("RandomStragglerSpec", "fraction", "flat", (*_STRAGGLERS, 1, "random", "fraction")),
    Key(
        "LognormalSlowdown", "sigma", "flat", (*_STRAGGLERS, 1, "random", "slowdown", "sigma"), True
    ),
    Key(
        "LognormalSlowdown",
        "mu",
        "flat",
        (*_STRAGGLERS, 1, "random", "slowdown", "mu"),
        zero_ok=True,
        negative_ok=True,
    ),
    Key("ExponentialSlowdown", "scale", "flat", (*_STRAGGLERS, 2, "random", "slowdown", "scale")),
    Key("UniformSlowdown", "low", "flat", (*_STRAGGLERS, 3, "random", "slowdown", "low")),
    Key("UniformSlowdown", "high", "flat", (*_STRAGGLERS, 3, "random", "slowdown", "high")),
    *_keys(
        "LinkStraggler",
        "flat",
        zero=("start", "bandwidth_factor"),
        bandwidth_factor=(*_STRAGGLERS, 4, "bandwidth_factor"),
        start=(*_STRAGGLERS, 4, "start"),
        end=(*_STRAGGLERS, 4, "end"),
    ),
    Key("TrainingSpec", "duration", "failures", ("training", "duration")),
    Key("TrainingSpec", "tokens", "checkpoint_time", ("training", "tokens")),
    *_keys(
        "ScheduledDeviceFailure",
        "failures",
        zero=("at",),
        at=("failures", 0, "at"),
        repair=("failures", 0, "repair"),
    ),
    *_keys(
        "ScheduledLinkFailure",
        "failures",
        zero=("at",),
        at=("failures", 1, "at"),
        repair=("failures", 1, "repair"),
    ),
    *_keys(
        "RandomFailure",
        "failures",
        zero=("seed", "repair"),
        mtbf=("failures", 2, "mtbf"),
        shape=("failures", 2, "shape"),
        seed=("failures", 2, "seed"),
        repair=("failures", 2, "repair"),
    ),
    Key("RecoverySpec", "restart_time", "failures", ("recovery", "restart_time"), True),
    Key("RecoverySpec", "samples", "failures", ("recovery", "samples")),
    Key("CheckpointInterval", "iterations", "failures", ("checkpoint", "every", "iterations")),
    Key("CheckpointInterval", "time", "checkpoint_time", ("checkpoint", "every", "time")),
    *_keys(
        "StorageSpec",
        "failures",
        zero=("latency",),
        bandwidth=("checkpoint", "storage", "bandwidth"),
        latency=("checkpoint", "storage", "latency"),
    ),
    *_keys(
        "ParameterServerSpec",
        "ps",
        zero=("staleness", "failover_timeout"),
        servers=("data_parallel", "ps", "servers"),
        backup_k=("data_parallel", "ps", "backup_k"),
        staleness=("data_parallel", "ps", "staleness"),
        geo_period=("data_parallel", "ps", "geo_period"),
        partition_bytes=("data_parallel", "ps", "partition_bytes"),
        credit=("data_parallel", "ps", "credit"),
        keys=("data_parallel", "ps", "keys"),
        replicas=("data_parallel", "ps", "replicas"),
        failover_timeout=("data_parallel", "ps", "failover_timeout"),
    ),
    Key("ZipfKeys", "zipf", "ps", ("data_parallel", "ps", "key_distribution", "zipf"), True),
    *_keys(
        "EmbeddingSpec",
        "embedding",
        rows=("model", "embedding", "rows"),
        dim=("model", "embedding", "dim"),
        lookups_per_sample=("model", "embedding", "lookups_per_sample"),
        tables=("model", "embedding", "tables"),
    ),
    *_keys(
        "TwoTierCluster",
        "two_tier",
        racks=("cluster", "racks"),
        nodes_per_rack=("cluster", "nodes_per_rack"),
        spines=("cluster", "spines"),
    ),
    *_keys(
        "NodeSpec",
        "two_tier",
        zero=("gpus",),
        gpus=("cluster", "node", "gpus"),
        nvlink_domain=("cluster", "node", "nvlink_domain"),
        nics=("cluster", "node", "nics"),
    ),
    *_keys(
        "NodeGroupSpec",
        "mixed",
        zero=("gpus",),
        gpus=("cluster", "node_groups", 0, "gpus"),
        nvlink_domain=("cluster", "node_groups", 0, "nvlink_domain"),
        nics=("cluster", "node_groups", 0, "nics"),
        count=("cluster", "node_groups", 1, "count"),
        gpu_hour_price=("cluster", "node_groups", 0, "gpu_hour_price"),
    ),
    *_keys(
        "NicSpec",
        "two_tier",
        zero=("latency", "plugin_latency"),
        bandwidth=("cluster", "node", "nic", "bandwidth"),
        latency=("cluster", "node", "nic", "latency"),
        plugin_latency=("cluster", "node", "nic", "plugin_latency"),
    ),
    *_keys(
        "TcpSpec",
        "two_tier_tcp",
        zero=("message_latency",),
        share=("cluster", "node", "nic", "tcp", "share"),
        message_latency=("cluster", "node", "nic", "tcp", "message_latency"),
    ),
    *_keys(
        "NvlinkSpec",
        "two_tier",
        zero=("latency",),
        bandwidth=("cluster", "node", "nvlink", "bandwidth"),
        latency=("cluster", "node", "nvlink", "latency"),
        generation=("cluster", "node", "nvlink", "generation"),
        sharp=("cluster", "node", "nvlink", "sharp"),
    ),
    Key("NvlinkSpec", "pairs", "nvlink_pairs", ("cluster", "node", "nvlink", "pairs", 1, 0), True),
    *_keys(
        "UplinkSpec",
        "two_tier",
        zero=("latency",),
        oversubscription=("cluster", "rack_uplink", "oversubscription"),
        latency=("cluster", "rack_uplink", "latency"),
    ),
    Key("UplinkSpec", "bandwidth", "uplink_bandwidth", ("cluster", "rack_uplink", "bandwidth")),
    *_keys(
        "ThreeTierCluster",
        "three_tier",
        pods=("cluster", "pods"),
        racks_per_pod=("cluster", "racks_per_pod"),
        nodes_per_rack=("cluster", "nodes_per_rack"),
        spines=("cluster", "spines"),
        cores=("cluster", "cores"),
    ),
    *_keys(
        "RailOptimizedCluster",
        "rail",
        groups=("cluster", "groups"),
        nodes_per_group=("cluster", "nodes_per_group"),
        spines=("cluster", "spines"),
    ),
    *_keys(
        "CustomDevice",
        "custom",
        zero=("memory",),
        flops=("cluster", "devices", 0, "flops"),
        efficiency=("cluster", "devices", 0, "efficiency"),
        memory=("cluster", "devices", 0, "memory"),
        memory_bandwidth=("cluster", "devices", 1, "memory_bandwidth"),
        peaks=("cluster", "devices", 0, "peaks", "fp32"),
    ),
    *_keys(
        "CustomLink",
        "custom",
        zero=("latency",),
        bandwidth=("cluster", "links", 0, "bandwidth"),
        latency=("cluster", "links", 0, "latency"),
    ),
    Key("TransferOp", "bytes", "custom", ("workload", "program", 0, "transfer", "bytes"), True),
    *_keys(
        "ComputeOp",
        "custom",
        zero=("flops", "seconds", "bytes"),
        flops=("workload", "program", 1, "compute", "flops"),
        seconds=("workload", "program", 2, "compute", "seconds"),
        bytes=("workload", "program", 3, "compute", "bytes"),
    ),
    *_keys(
        "CollectiveWorkload",
        "collective",
        zero=("bytes", "root"),
        bytes=("workload", "bytes"),
        root=("workload", "root"),
        chunk=("workload", "chunk"),
        iterations=("workload", "iterations"),
    ),
    Key("TraceWorkload", "compute_scale", "trace", ("workload", "compute_scale")),
    *_keys(
        "TransformerSpec",
        "transformer",
        **{
            k: ("model", "transformer", k)
            for k in ("layers", "hidden", "heads", "seq", "vocab", "ffn", "kv_heads")
        },
    ),
    *_keys(
        "ParallelismSpec",
        "transformer",
        dp=("parallelism", "dp"),
        pp=("parallelism", "pp"),
        tp=("parallelism", "tp"),
        tp_depth=("parallelism", "tp_depth"),
        cp=("parallelism", "cp"),
    ),
    Key("OffloadSpec", "resident", "transformer", ("training", "offload", "resident")),
    *_keys(
        "PipelineSpec",
        "transformer",
        micro_batches=("pipeline", "micro_batches"),
        chunks=("pipeline", "chunks"),
        stage_layers=("pipeline", "stage_layers", 0),
    ),
    Key("ParallelismSpec", "ep", "moe", ("parallelism", "ep")),
    *_keys(
        "MoESpec",
        "moe",
        zero=("shared_experts", "expert_layers"),
        **{
            k: ("model", "moe", k)
            for k in ("experts", "top_k", "capacity_factor", "expert_ffn", "shared_experts")
        },
        expert_layers=("model", "moe", "expert_layers", 0),
    ),
    Key("ZipfSkew", "zipf", "moe", ("model", "moe", "skew", "zipf"), zero_ok=True),
    *_keys(
        "ExpertLayersSpec",
        "moe_rule",
        zero=("first_dense",),
        every=("model", "moe", "expert_layers", "every"),
        first_dense=("model", "moe", "expert_layers", "first_dense"),
    ),
    Key("MaxLoadSkew", "max_load", "moe_rule", ("model", "moe", "skew", "max_load")),
]
"""Every numeric key of every scenario model and workload, and where it is swept."""

BAD_TEXTS = {
    "zero": "0",
    "negative": "-1",
    "nan": ".nan",
    "inf": ".inf",
    "minus inf": "-.inf",
    "1e400": "1e400",
    "1.0e+400": "1.0e+400",
}
"""Bad values as written in the YAML file (``1e400`` is text to YAML, ``1.0e+400`` a float)."""


def _numeric_keys() -> set[tuple[str, str]]:
    """(model, YAML key) of every numeric field below Scenario and the built-in workloads'
    configs."""
    seen: set[type] = set()

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.add(annotation)
                for field in annotation.model_fields.values():
                    walk(field.annotation)
            return
        for arg in typing.get_args(annotation):
            walk(arg)

    walk(scenario_module.Scenario)
    for cls in registered_strategies().values():  # the built-in ones, not test plugins
        if cls.owns_workload_key() and cls.__module__.startswith("clustersim."):
            walk(cls.config_model)

    def numeric(annotation: Any) -> bool:
        annotation = _unwrap(annotation)
        if annotation in (int, float):
            return True
        return any(numeric(a) for a in typing.get_args(annotation) if a is not type(None))

    return {
        (model.__name__, field.alias or name)
        for model in seen
        for name, field in model.model_fields.items()
        if numeric(field.annotation)
    }


def test_every_numeric_key_is_swept() -> None:
    """A numeric key added to a model must be added to KEYS (the sweep closes the class)."""
    assert {(k.model, k.key) for k in KEYS} == _numeric_keys()


def _write(tmp_path: Path, doc: dict[str, Any], key: Key | None = None, text: str = "") -> Path:
    """``doc`` as a YAML file, with ``text`` written as is at ``key``'s place."""
    doc = copy.deepcopy(doc)
    if key is not None:
        node: Any = doc
        for part in key.path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[key.path[-1]] = "__VALUE__"
    body, count = re.subn(r"'?__VALUE__'?", text, yaml.safe_dump(doc, sort_keys=False))
    assert count == (key is not None)
    path = tmp_path / "scenario.yaml"
    path.write_text(body)
    return path


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr); argparse's own errors exit too."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    return code, capsys.readouterr().err


@pytest.mark.parametrize("base", sorted(BASES))
def test_base_documents_are_valid(base: str, tmp_path: Path, capsys) -> None:
    """Each base document validates: the errors below come from the swept value alone."""
    code, err = _cli(["validate", str(_write(tmp_path, BASES[base]))], capsys)
    assert code == 0, err


def _cases() -> list[Any]:
    cases = []
    for key in KEYS:
        for name, text in BAD_TEXTS.items():
            if (name == "zero" and key.zero_ok) or (name == "negative" and key.negative_ok):
                continue
            cases.append(pytest.param(key, text, id=f"{key.model}.{key.key}={name}"))
    return cases


@pytest.mark.parametrize("key, text", _cases())
def test_bad_number_exits_2_naming_file_and_key_path(
    key: Key, text: str, tmp_path: Path, capsys
) -> None:
    """0 (where meaningless), -1, NaN, +-infinity and 1e400 at any numeric key: exit 2, one
    message naming the file and the key path, no traceback."""
    path = _write(tmp_path, BASES[key.base], key, text)
    code, err = _cli(["validate", str(path)], capsys)
    assert code == 2
    assert f"{path}: {key.yaml_path}: " in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "key, text",
    [
        ("sigma", "3.5"),
        ("sigma", "1000"),
        ("mu", "-4"),
        ("mu", "4"),
    ],
)
def test_lognormal_parameters_are_bounded(key: str, text: str, tmp_path: Path, capsys) -> None:
    """sigma 0 .. 3 and mu -3 .. 3, so that a drawn slowdown stays finite and above 0 (sigma
    1000 used to give iteration times of 0)."""
    entry = Key("LognormalSlowdown", key, "flat", (*_STRAGGLERS, 1, "random", "slowdown", key))
    code, err = _cli(["validate", str(_write(tmp_path, BASES["flat"], entry, text))], capsys)
    assert code == 2
    assert f"{entry.yaml_path}: must be at " in err
    assert "(allowed: at least " in err and "at most 3)" in err


@pytest.mark.parametrize(
    "path, text, message",
    [
        ((*_STRAGGLERS, 0, "slowdown"), "2.0e+6", "must be at most 1e+06"),
        ((*_STRAGGLERS, 0, "slowdown"), "1.0e-7", "must be at least 1e-06"),
        ((*_STRAGGLERS, 2, "random", "slowdown", "scale"), "1001", "must be at most 1000"),
        ((*_STRAGGLERS, 3, "random", "slowdown", "high"), "2.0e+6", "must be at most 1e+06"),
        (
            (*_STRAGGLERS, 4, "bandwidth_factor"),
            "1.0e-9",
            "must be 0 (the link is down) or at least 1e-06",
        ),
        ((*_STRAGGLERS, 4, "bandwidth_factor"), "2.0e+6", "must be at most 1e+06"),
        (("cluster", "device", "efficiency"), "1.5", "must be at most 1"),
        (("seed",), str(MAX_SEED + 1), "must be at most 4294967295"),
        (("network", "channels"), "65", "must be at most 64"),
    ],
)
def test_upper_and_lower_bounds_state_the_range(
    path: tuple[str | int, ...], text: str, message: str, tmp_path: Path, capsys
) -> None:
    """A number past a bound names the bound it broke and, for two-sided ranges, both."""
    key = Key("", "", "flat", path)
    code, err = _cli(["validate", str(_write(tmp_path, BASES["flat"], key, text))], capsys)
    assert code == 2 and f"{key.yaml_path}: {message}, got " in err


def test_largest_seed_is_accepted_and_reproducible() -> None:
    """Seeds run 0 .. 2**32 - 1: the largest one drives NumPy's generator as any other."""
    doc = {**copy.deepcopy(BASES["flat"]), "seed": MAX_SEED}
    first = simulate(parse_scenario(doc)).summary["iteration_time_s"]
    assert first == simulate(parse_scenario(doc)).summary["iteration_time_s"]


# --------------------------------------------------------------------------- flags


_FLAT = ["collective", "-q", "--op", "allreduce", "--bytes", "1MB", "--devices", "4"]
_TWO_TIER = ["collective", "-q", "--op", "allreduce", "--bytes", "1MB", "--topology", "two_tier"]
_BAD_FLAG_VALUES = ["0", "-1", "nan", "inf", "1e400"]


def _flag_cases() -> list[Any]:
    cases = []
    for flag, base, bad in [
        ("--bandwidth", _FLAT, _BAD_FLAG_VALUES),
        ("--latency", _FLAT, ["-1", "nan", "inf", "1e400s"]),
        ("--bytes", _FLAT, ["-1", "nan", "inf", "1e400B", "1MB:1GB:x1", "1MB:1GB:+0"]),
        ("--chunk", _FLAT, _BAD_FLAG_VALUES),
        ("--channels", _FLAT, ["0", "-1", "65", "nan"]),
        ("--iterations", _FLAT, ["0", "-1", "nan"]),
        ("--root", _FLAT, ["-1", "4", "99", "nan"]),
        ("--devices", ["collective", "-q", "--op", "allreduce"], ["0", "-1", "1", "nan"]),
        ("--racks", _TWO_TIER, _BAD_FLAG_VALUES),
        ("--nodes-per-rack", _TWO_TIER, _BAD_FLAG_VALUES),
        ("--gpus-per-node", _TWO_TIER, _BAD_FLAG_VALUES),
        ("--oversubscription", _TWO_TIER, [*_BAD_FLAG_VALUES, "1e7"]),
        ("--pcie", _TWO_TIER, _BAD_FLAG_VALUES),
        ("--nvlink", _TWO_TIER, _BAD_FLAG_VALUES),
    ]:
        for value in bad:
            cases.append(pytest.param([*base, flag, value], flag, id=f"{flag}={value}"))
    return cases


@pytest.mark.parametrize("argv, flag", _flag_cases())
def test_bad_collective_flag_exits_2_naming_the_flag(
    argv: list[str], flag: str, capsys, monkeypatch
) -> None:
    """Every numeric flag of ``clustersim collective`` refuses 0 (where meaningless), negative,
    NaN and infinite values, with the flag named; nothing runs."""
    monkeypatch.setattr("clustersim.studies.collective_sweep.run_point", _never_runs)
    code, err = _cli(argv, capsys)
    assert code == 2 and flag in err and "Traceback" not in err


def _never_runs(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a bad flag must be refused before the first point runs")


@pytest.mark.parametrize("seed", ["-1", str(MAX_SEED + 1), "nan", "1e400"])
def test_bad_seed_flag_exits_2(seed: str, tmp_path: Path, capsys) -> None:
    """``run --seed`` takes 0 .. 2**32 - 1, as the ``seed`` key (``--seed -1`` used to crash
    NumPy's seeding with a traceback)."""
    scenario = SCENARIOS / "parameter_server" / "async.yaml"
    out = tmp_path / "out"
    code, err = _cli(["run", "-q", str(scenario), "--seed", seed, "-o", str(out)], capsys)
    assert code == 2 and "--seed" in err and "Traceback" not in err
    assert not out.exists()
    if seed.lstrip("-").isdigit():
        assert "(allowed: 0 .. 4294967295)" in err


_TRAINING = SCENARIOS / "data_parallel" / "overlap.yaml"


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["golden", "check", "x.yaml", "--rtol", "nan"], "--rtol"),
        (["golden", "check", "x.yaml", "--rtol", "inf"], "--rtol"),
        (["golden", "check", "x.yaml", "--rtol", "-0.5"], "--rtol"),
        (["golden", "record", "x.yaml", "--rtol", "inf"], "--rtol"),
        (["golden", "check", "x.yaml", "-j", "0"], "-j"),
        (["compare", "x.yaml", "-o", "out", "-j", "0"], "-j"),
        (["plan", str(_TRAINING), "--devices", "0"], "--devices"),
        (["plan", str(_TRAINING), "--iterations", "0"], "--iterations"),
        (["plan", "x.yaml", "--top", "0"], "--top"),
        (["plan", "x.yaml", "--verify", "-1"], "--verify"),
        (["plan", "x.yaml", "-j", "0"], "-j"),
    ],
)
def test_other_numeric_flags_exit_2_naming_the_flag(
    argv: list[str], flag: str, capsys, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = _cli(argv, capsys)
    assert code == 2 and flag in err and "Traceback" not in err


@pytest.mark.parametrize(
    "setting, key_path",
    [
        ("cluster.device.flops=0", "cluster.device.flops"),
        ("cluster.device.memory_bandwidth=0", "cluster.device.memory_bandwidth"),
        ("seed=-1", "seed"),
        ("training.iterations=.nan", "training.iterations"),
        ("cluster.link.bandwidth=1e400GB/s", "cluster.link.bandwidth"),
        ("stragglers[0].slowdown=.inf", "stragglers[0].slowdown"),
    ],
)
def test_compare_set_errors_name_the_set_value(
    setting: str, key_path: str, tmp_path: Path, capsys
) -> None:
    """``compare --set`` values go through the scenario's checks; the error names the file,
    the ``--set`` that made the value and the key path (``flops=0`` used to divide by 0)."""
    path = _write(tmp_path, BASES["flat"])
    argv = ["compare", "-q", str(path), "--set", setting, "-o", str(tmp_path / "cmp")]
    code, err = _cli(argv, capsys)
    key = setting.partition("=")[0]
    assert code == 2 and f"{path} with --set {key}=" in err and f": {key_path}: " in err
    assert not (tmp_path / "cmp").exists()


# --------------------------------------------------------------------------- overflow


def test_compute_that_overflows_names_the_compute(tmp_path: Path, capsys) -> None:
    """Two computes of 1e308 s on one device end past the largest float: a simulation error
    naming the compute, never a deadlock at t = nan."""
    doc = copy.deepcopy(BASES["custom"])
    doc["workload"] = {
        "program": [
            compute("first", "a", seconds="1e308s"),
            compute("second", "a", seconds="1e308s", after=["first"]),
        ]
    }
    code, err = _cli(["run", "-q", str(_write(tmp_path, doc)), "-o", str(tmp_path / "o")], capsys)
    assert code == 2
    assert "simulation error: compute 'second' on a overflowed" in err
    assert "nan" not in err and "deadlock" not in err
    assert not (tmp_path / "o").exists()


def test_flops_over_a_slow_device_overflow_at_the_compute() -> None:
    """FLOPs / (FLOP/s x efficiency) past the largest float: the compute is named."""
    doc = copy.deepcopy(BASES["custom"])
    doc["cluster"]["devices"][0].update(flops="1e-300FLOPS", efficiency=1e-5)
    doc["workload"] = {"program": [compute("big", "a", flops=1e10)]}
    with pytest.raises(SimulationError, match=r"compute 'big' on a overflowed.*1e\+10 FLOPs"):
        simulate(parse_scenario(doc))


def test_transfer_that_overflows_names_the_transfer() -> None:
    """1e300 bytes over a link of 1e-10 B/s would end at t = inf: the transfer is named."""
    doc = copy.deepcopy(BASES["custom"])
    doc["cluster"]["links"][0]["bandwidth"] = "1e-10B/s"
    doc["workload"] = {"program": [transfer("t", "a", "b", "1e300B")]}
    with pytest.raises(SimulationError) as info:
        simulate(parse_scenario(doc))
    text = str(info.value)
    assert "a transfer of 1e+300 bytes over a->b overflowed" in text and "nan" not in text


def test_uplink_bandwidth_that_overflows_is_a_scenario_error(tmp_path: Path, capsys) -> None:
    """A rack uplink computed from NIC bandwidths too large for a float: exit 2, the link named."""
    doc = copy.deepcopy(BASES["two_tier"])
    doc["cluster"]["node"]["nic"]["bandwidth"] = "1e305B/s"
    doc["cluster"]["rack_uplink"] = {"oversubscription": 1e-6}
    code, err = _cli(["validate", str(_write(tmp_path, doc))], capsys)
    assert code == 2 and "cluster: link rack0/tor->spine0 would have inf B/s" in err


def test_flops_times_efficiency_that_underflows_is_refused(tmp_path: Path, capsys) -> None:
    """A FLOP rate x efficiency of 0 (underflow) would divide by zero: refused at the key."""
    doc = copy.deepcopy(BASES["flat"])
    doc["cluster"]["device"]["flops"] = "1e-300FLOPS"
    doc["cluster"]["device"]["efficiency"] = 1e-300
    code, err = _cli(["validate", str(_write(tmp_path, doc))], capsys)
    assert code == 2 and "cluster.device.efficiency: flops x efficiency is 0.0 FLOP/s" in err


def test_fixed_slowdowns_whose_product_overflows_name_the_entry(tmp_path: Path, capsys) -> None:
    """Fixed slowdowns multiply; 60 entries of 1e6 overflow at the 52nd: its key path."""
    doc = copy.deepcopy(BASES["flat"])
    doc["stragglers"] = [{"devices": "gpu0", "slowdown": 1e6} for _ in range(60)]
    code, err = _cli(["validate", str(_write(tmp_path, doc))], capsys)
    assert code == 2
    assert "stragglers[51].slowdown: the slowdowns of gpu0 multiply to inf" in err


def test_drawn_slowdown_that_overflows_names_the_device() -> None:
    """A draw that is not finite and above 0 (possible only past the validated bounds) stops
    the run naming the device, the iteration and the entry; it is never replaced by 1."""
    topology = flat_topology("switch", 2)
    device = topology.device("gpu0")
    entry = _RandomSlowdown(0, frozenset({"gpu0"}), 1.0, "lognormal", {"sigma": 1000.0})
    stragglers = Stragglers(random=[entry])
    with pytest.raises(SimulationError, match=r"straggler slowdown of gpu0 in iteration \d+"):
        for iteration in range(50):
            stragglers.factor(device, iteration)


def test_summary_value_that_overflows_is_named() -> None:
    """The last net: a summary number that is not finite names its key."""
    _check_finite({"makespan_s": 1.0, "devices": {"gpu0": {"idle_s": 0.5}}})
    with pytest.raises(SimulationError, match=r"summary value devices.gpu0.idle_s overflowed"):
        _check_finite({"makespan_s": 1.0, "devices": {"gpu0": {"idle_s": math.nan}}})
    with pytest.raises(SimulationError, match=r"summary value times_s\[1\] overflowed \(inf\)"):
        _check_finite({"times_s": [1.0, math.inf]})


def test_straggler_glob_errors_name_the_file(tmp_path: Path, capsys) -> None:
    """A straggler glob matching nothing is found by validate and run alike, with the file and
    the key path."""
    doc = copy.deepcopy(BASES["flat"])
    doc["stragglers"][1]["random"]["devices"] = "rack9/*"
    doc["stragglers"][4]["links"] = "nowhere->*"
    path = _write(tmp_path, doc)
    for argv in (["validate", str(path)], ["run", "-q", str(path), "-o", str(tmp_path / "o")]):
        code, err = _cli(argv, capsys)
        assert code == 2
        assert f"{path}: stragglers[1].random.devices: no device matches 'rack9/*'" in err
    with pytest.raises(ScenarioError) as info:
        simulate(parse_scenario(doc, str(path)))
    assert info.value.source == str(path)


def test_analytical_collective_that_overflows_names_the_collective(tmp_path: Path, capsys) -> None:
    """The analytical model prices 1e300 bytes over links of 1e-300 B/s as a phase of inf s:
    the collective is named (it used to be a bare "transfer size ... got inf")."""
    doc = _workload(
        {"kind": "switch", "devices": 4, "link": {"bandwidth": "1e-300B/s"}},
        {"collective": "allreduce", "algorithm": "ring", "bytes": "1e300B"},
    )
    doc["network"] = {"model": "analytical", "protocol": "none"}
    code, err = _cli(["run", "-q", str(_write(tmp_path, doc)), "-o", str(tmp_path / "o")], capsys)
    assert code == 2
    assert "simulation error: collective 'allreduce/ring' (allreduce of 1e+300 B) overflowed" in err


@pytest.mark.parametrize("devices", [3, 5000])  # one call per device, and in lists of 4,096
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_summary_number_that_overflowed_is_named_by_its_key(devices: int, bad: float) -> None:
    """The summary check names the key of a non-finite number wherever it sits, also inside
    a per-device dict checked in batches (the 131,072-GPU summaries); a finite one passes."""
    from clustersim.api import _check_finite

    per_device = {f"gpu{i}": {"peak_bytes": float(i), "fits": True} for i in range(devices)}
    summary = {"makespan_s": 1.0, "memory": {"per_device": per_device, "fits": True}}
    _check_finite(summary)
    per_device[f"gpu{devices - 2}"]["peak_bytes"] = bad
    with pytest.raises(SimulationError, match=rf"memory\.per_device\.gpu{devices - 2}\.peak_bytes"):
        _check_finite(summary)
