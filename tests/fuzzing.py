"""The fuzzing harness: generators, the runner and the oracle, in one place.

* **Scenario documents** of every strategy (program and collective workloads,
  data_parallel, zero, parameter_server in every mode, pipeline with every
  schedule, tensor parallel), kept tiny so that a valid one runs in well under
  a second (:data:`DOCUMENTS`, :func:`valid_documents`), and the same documents
  mutated: keys dropped or unknown, wrong types, out-of-range numbers, huge
  counts (:func:`mutated_documents`, :func:`broken_documents`).
* **Command lines** of every command, read from the argparse parser itself
  (:func:`clustersim.cli.build_parser`): each flag gets valid and invalid values
  of its domain (numbers with 0, negatives, nan, inf and huge ones, unit strings,
  paths that are files, folders, missing or FIFOs), plus unknown flags
  (:func:`invocations`).
* **The runner** (:func:`run_cli`) runs ``clustersim.cli.main(argv)`` in a forked
  child, in a fresh copy of a workspace of fixture files (:class:`Workspace`),
  with stdin from /dev/null, stdout and stderr captured and a wall-clock limit:
  a child still running then is killed with its process group and counted as a
  hang.
* **The oracle** (:func:`findings_of`): the exit code is 0, 1 or 2
  (:mod:`clustersim.cli.base`), stderr never holds a Python traceback, the run
  ends within the limit, and exit code 2 comes with a message naming the file or
  flag at fault.

``tests/test_fuzz.py`` and ``tests/test_fuzz_cli.py`` run a small derandomised
sample in ``make test``; ``bench/fuzz.py`` (``make fuzz``) runs thousands of
examples through :func:`campaign` and prints the tally.
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import json
import os
import re
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from clustersim.calibrate.log_text import format_log
from clustersim.cli import build_parser, main
from clustersim.cli.base import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from clustersim.collectives.algorithm import registered_algorithms
from clustersim.collectives.ops import OPERATIONS
from clustersim.parallel.schedules import Schedule

Doc = dict[str, Any]

# =========================================================================== clusters


@dataclass(frozen=True)
class Cluster:
    """A generated ``cluster:`` section and what the workloads need to know of it."""

    doc: Doc
    gpus: tuple[str, ...]
    """GPU names, in the order the strategies rank them."""
    cpus: tuple[str, ...] = ()
    """Node CPUs (clusters with nodes)."""
    gpus_per_node: int | None = None
    """None: a flat cluster, without nodes."""
    switched: bool = True
    """False: devices cabled to each other (ring, fully connected), no switch."""

    @property
    def nodes(self) -> int:
        return len(self.cpus)


def _bandwidth() -> st.SearchStrategy[str]:
    return st.builds(lambda v, u: f"{v}{u}", st.integers(1, 400), st.sampled_from(["GB/s", "Gb/s"]))


def _latency() -> st.SearchStrategy[Any]:
    return st.one_of(st.just(0), st.builds(lambda v: f"{v}us", st.integers(0, 20)))


@st.composite
def flat_clusters(draw: st.DrawFn, max_devices: int = 8) -> Cluster:
    """A switch, ring or fully connected cluster of 2 to ``max_devices`` GPUs."""
    n = draw(st.integers(2, max_devices))
    kind = draw(st.sampled_from(["switch", "ring", "fully_connected"]))
    doc: Doc = {
        "kind": kind,
        "devices": n,
        "link": {"bandwidth": draw(_bandwidth()), "latency": draw(_latency())},
    }
    if draw(st.booleans()):
        doc["device"] = {"flops": f"{draw(st.integers(1, 400))}TFLOPS", "memory": "16GB"}
        if draw(st.booleans()):  # a catalog GPU (every precision), priced by the training's
            doc["device"] = {"preset": "h100-sxm", "memory": "16GB"}
    return Cluster(doc, tuple(f"gpu{i}" for i in range(n)), switched=kind == "switch")


@st.composite
def _node(draw: st.DrawFn, gpus: int) -> Doc:
    node: Doc = {
        "gpus": gpus,
        "pcie": {"bandwidth": draw(_bandwidth())},
        "nic": {"bandwidth": draw(_bandwidth()), "latency": draw(_latency())},
    }
    if gpus > 1 and draw(st.booleans()):
        node["nvlink"] = {"bandwidth": draw(_bandwidth())}
    if draw(st.booleans()):
        node["gpu"] = {"flops": "100TFLOPS", "efficiency": draw(st.sampled_from([0.3, 0.5, 1]))}
        if draw(st.booleans()):
            node["gpu"] = {"preset": "b200", "efficiency": node["gpu"]["efficiency"]}
    return node


@st.composite
def two_tier_clusters(draw: st.DrawFn) -> Cluster:
    """Racks of nodes of 1-2 GPUs (2 to 8 GPUs in all)."""
    racks, nodes, gpus = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    gpus = 2 if racks * nodes == 1 else gpus  # at least 2 GPUs in all
    doc: Doc = {
        "racks": racks,
        "nodes_per_rack": nodes,
        "node": draw(_node(gpus)),
        "rack_uplink": {"oversubscription": draw(st.sampled_from([1, 2, 4.5]))},
    }
    if draw(st.booleans()):
        doc["kind"] = "two_tier"
    prefixes = [f"rack{r}/node{n}" for r in range(racks) for n in range(nodes)]
    return _with_nodes(doc, prefixes, gpus)


@st.composite
def three_tier_clusters(draw: st.DrawFn) -> Cluster:
    """Pods of racks of nodes (2 to 8 GPUs in all)."""
    pods, racks, gpus = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    gpus = 2 if pods * racks == 1 else gpus
    doc: Doc = {
        "kind": "three_tier",
        "pods": pods,
        "racks_per_pod": racks,
        "nodes_per_rack": 1,
        "node": draw(_node(gpus)),
        "pod_uplink": {"oversubscription": draw(st.sampled_from([1, 2]))},
    }
    prefixes = [f"pod{p}/rack{r}/node0" for p in range(pods) for r in range(racks)]
    return _with_nodes(doc, prefixes, gpus)


@st.composite
def rail_clusters(draw: st.DrawFn) -> Cluster:
    """Rail-optimised groups of nodes with one NIC per GPU (4 to 8 GPUs in all)."""
    groups, nodes = draw(st.integers(1, 2)), 2
    gpus = draw(st.integers(1, 2))
    node = draw(_node(gpus))
    node["nics"] = gpus
    doc: Doc = {"kind": "rail_optimized", "groups": groups, "nodes_per_group": nodes, "node": node}
    prefixes = [f"group{g}/node{n}" for g in range(groups) for n in range(nodes)]
    return _with_nodes(doc, prefixes, gpus)


def _with_nodes(doc: Doc, prefixes: list[str], gpus: int) -> Cluster:
    names = tuple(f"{p}/gpu{g}" for p in prefixes for g in range(gpus))
    return Cluster(doc, names, tuple(f"{p}/cpu" for p in prefixes), gpus)


node_clusters = st.one_of(two_tier_clusters(), three_tier_clusters(), rail_clusters())
"""Clusters whose GPUs sit in nodes with a CPU."""
clusters = st.one_of(flat_clusters(), node_clusters)
"""Every cluster kind but custom, 2 to 8 GPUs."""


# =========================================================================== workloads


@st.composite
def program_documents(draw: st.DrawFn) -> Doc:
    """1-5 transfers and computes between random devices, each after some earlier ones."""
    cluster = draw(clusters)
    devices = list(cluster.gpus + cluster.cpus)
    ops: list[Doc] = []
    for i in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            src, dst = draw(st.permutations(devices))[:2]
            size = f"{draw(st.integers(0, 500))}{draw(st.sampled_from(['kB', 'MB', 'KiB']))}"
            op: Doc = {"transfer": {"src": src, "dst": dst, "bytes": size}}
        else:
            amount = draw(
                st.sampled_from(
                    [
                        {"flops": f"{draw(st.integers(0, 900))}GFLOP"},
                        {"seconds": f"{draw(st.integers(0, 900))}us"},
                        {"bytes": f"{draw(st.integers(0, 900))}MB"},
                    ]
                )
            )
            op = {"compute": {"device": draw(st.sampled_from(devices)), **amount}}
        after = (
            draw(st.lists(st.sampled_from([f"op{j}" for j in range(i)]), unique=True)) if i else []
        )
        ops.append({"id": f"op{i}", **op, **({"after": after} if after else {})})
    return _document("program", cluster, draw, workload={"program": ops})


TRACES = Path(__file__).resolve().parent / "data"
"""The small Kineto and Chakra traces of tests/test_trace_import.py."""


@st.composite
def trace_documents(draw: st.DrawFn) -> Doc:
    """A trace replayed on every GPU: the Chakra one (no group size), or the Kineto one
    (groups of 4) when the GPUs come in fours."""
    cluster = draw(clusters)
    names = ["chakra_step.json"] + (["kineto_step.json"] if len(cluster.gpus) % 4 == 0 else [])
    workload: Doc = {"trace": str(TRACES / draw(st.sampled_from(names)))}
    if draw(st.booleans()):
        workload["compute_scale"] = draw(st.sampled_from([0.5, 1.0, 3.0]))
    if draw(st.booleans()):
        workload["order"] = draw(st.sampled_from(["recorded", "streams"]))
    return _document("trace", cluster, draw, workload=workload)


def _algorithms(op: str, cluster: Cluster) -> list[str]:
    """Registered algorithms that implement ``op`` and apply to ``cluster``."""
    names = [name for name, cls in registered_algorithms().items() if op in cls.ops]
    if cluster.gpus_per_node is None:
        names = [n for n in names if n != "hierarchical"]
    # in_network sums in switches: not without one, nor where a node's GPUs meet in its PCIe
    # switch first (it does not reduce; hierarchical with inter: in_network is the way there)
    if not cluster.switched or (cluster.gpus_per_node or 1) > 1:
        names = [n for n in names if n != "in_network"]
    return names


@st.composite
def collective_documents(draw: st.DrawFn) -> Doc:
    """One collective of any operation and any algorithm that applies to it."""
    cluster = draw(clusters)
    op = draw(st.sampled_from(sorted(OPERATIONS)))
    workload: Doc = {
        "collective": op,
        "algorithm": draw(st.sampled_from(_algorithms(op, cluster))),
        "bytes": f"{draw(st.integers(1, 64))}{draw(st.sampled_from(['MB', 'KiB', 'B']))}",
        "iterations": draw(st.integers(1, 2)),
    }
    if OPERATIONS[op].rooted:
        workload["root"] = draw(st.integers(0, len(cluster.gpus) - 1))
    optional = {
        "chunk": st.sampled_from(["256KB", "1MB"]),
        "bidirectional": st.booleans(),
        "reduce_cost": st.booleans(),
        "protocol": st.sampled_from(["LL", "LL128", "Simple", "auto"]),
    }
    for key, values in optional.items():
        if draw(st.integers(0, 3)) == 0:
            workload[key] = draw(values)
    return _document("collective", cluster, draw, workload=workload)


# =========================================================================== training


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _transformer(draw: st.DrawFn, heads_of: int = 1, blocks_of: int = 1) -> Doc:
    """A tiny transformer: heads a multiple of ``heads_of``, blocks of ``blocks_of``."""
    heads = heads_of * draw(st.integers(1, 2))
    spec: Doc = {
        "layers": blocks_of * draw(st.integers(1, 2)),
        "hidden": heads * draw(st.sampled_from([8, 16])),
        "heads": heads,
        "seq": draw(st.sampled_from([8, 32])),
        "vocab": draw(st.sampled_from([64, 512])),
    }
    optional = {
        "ffn": st.sampled_from([32, 64]),
        "gated_ffn": st.booleans(),
        "norm": st.sampled_from(["layernorm", "rmsnorm"]),
        "bias": st.booleans(),
        "head": st.sampled_from(["tied", "untied", "none"]),
        "positions": st.sampled_from(["learned", "rotary"]),
        "dropout": st.booleans(),
    }
    for key, values in optional.items():
        if draw(st.integers(0, 3)) == 0:
            spec[key] = draw(values)
    return spec


@st.composite
def _layers(draw: st.DrawFn, at_least: int = 1) -> list[Doc]:
    """1-3 hand-written layers, repeats included at least ``at_least`` layers in all."""
    layers: list[Doc] = []
    for i in range(draw(st.integers(1, 3))):
        layer: Doc = {
            "name": f"l{i}",
            "params": f"{draw(st.integers(1, 50))}e5",
            "flops": f"{draw(st.integers(1, 50))}e8",
            "repeat": draw(st.integers(1, 3)),
        }
        if draw(st.booleans()):
            layer["activations"] = f"{draw(st.integers(0, 64))}kB"
        layers.append(layer)
    short = at_least - sum(layer["repeat"] for layer in layers)
    if short > 0:
        layers[-1]["repeat"] += short
    return layers


@st.composite
def _model(draw: st.DrawFn, tp: int = 1, parts: int = 1) -> Doc:
    """A model splittable into ``parts`` stages and, if ``tp`` > 1, ``tp`` tensor shards."""
    if tp > 1 or draw(st.booleans()):
        return {"transformer": draw(_transformer(tp, parts))}
    return {"layers": draw(_layers(parts))}


@st.composite
def _training(draw: st.DrawFn, global_batch: int) -> Doc:
    training: Doc = {"global_batch": global_batch, "iterations": draw(st.integers(1, 2))}
    for key, values in {
        "precision": ["fp32", "tf32", "fp16", "bf16", "fp8"],
        "optimizer": ["sgd", "momentum", "adam"],
    }.items():
        if draw(st.booleans()):
            training[key] = draw(st.sampled_from(values))
    return training


@st.composite
def _allreduce(draw: st.DrawFn, cluster: Cluster, sharded: bool = False) -> Doc:
    """``data_parallel.allreduce``; ``sharded`` (ZeRO): an algorithm that also runs the
    reduce-scatter and all-gather of sharded states."""
    sync: Doc = {"bucket": f"{draw(st.integers(1, 20))}MB", "overlap": draw(st.booleans())}
    if draw(st.booleans()):
        ops = ("allreduce", "reducescatter", "allgather") if sharded else ("allreduce",)
        names = [
            n
            for n in _algorithms(ops[0], cluster)
            if all(n in _algorithms(op, cluster) for op in ops)
        ]
        sync["algorithm"] = draw(st.sampled_from(names))
    return sync


@st.composite
def _stragglers(draw: st.DrawFn) -> list[Doc]:
    """0-2 stragglers of the three forms."""
    forms = [
        {"devices": "*gpu0", "slowdown": draw(st.sampled_from([1.5, 3]))},
        {
            "random": {
                "fraction": 0.5,
                "slowdown": draw(
                    st.sampled_from(
                        [
                            {"dist": "lognormal", "sigma": 0.2},
                            {"dist": "exponential", "scale": 0.5},
                            {"dist": "uniform", "low": 1, "high": 2},
                        ]
                    )
                ),
            }
        },
        {"links": "*", "bandwidth_factor": 0.5, "start": "1us", "end": "1s"},
    ]
    return draw(st.lists(st.sampled_from(forms), max_size=2))


@st.composite
def _resilience(draw: st.DrawFn, cluster: Cluster) -> Doc:
    """Maybe failures (the three forms), a recovery and a checkpoint section (storage only on
    a cluster with switches)."""
    sections: Doc = {}
    forms = [
        {"devices": "*gpu0", "at": draw(st.sampled_from(["1h", 0, "30d"]))},
        {"links": "*", "at": "1s", "repair": draw(st.sampled_from(["1min", "2h"]))},
        {"devices": "*", "mtbf": "1000h", "distribution": "exponential", "seed": 1},
        {"devices": "*gpu*", "mtbf": "50d", "distribution": "weibull", "shape": 0.8},
    ]
    if draw(st.booleans()):
        sections["failures"] = draw(st.lists(st.sampled_from(forms), min_size=1, max_size=2))
    if draw(st.booleans()):
        sections["recovery"] = {"restart_time": "5min", "elastic": draw(st.booleans())}
    if draw(st.booleans()):
        checkpoint: Doc = {"every": draw(st.sampled_from([10, "100 iterations", "30min"]))}
        if cluster.switched and draw(st.booleans()):
            checkpoint["storage"] = {"bandwidth": draw(_bandwidth()), "latency": draw(_latency())}
            checkpoint["async"] = draw(st.booleans())
        sections["checkpoint"] = checkpoint
    return sections


def _document(name: str, cluster: Cluster, draw: st.DrawFn, **sections: Any) -> Doc:
    """A scenario named ``fuzz-NAME`` on ``cluster`` with ``sections``, maybe a network
    section and a seed."""
    doc: Doc = {"name": f"fuzz-{name}", "cluster": cluster.doc, **sections}
    if draw(st.booleans()):
        doc["seed"] = draw(st.integers(0, 9))
    if draw(st.integers(0, 2)) == 0:
        network: Doc = {"model": draw(st.sampled_from(["flow", "analytical"]))}
        if draw(st.booleans()):
            network["channels"] = draw(st.sampled_from([1, 2, 4, "auto"]))
        if draw(st.booleans()):
            network["protocol"] = draw(st.sampled_from(["LL", "LL128", "Simple", "auto", "none"]))
        doc["network"] = network
    return doc


@st.composite
def data_parallel_documents(draw: st.DrawFn, zero: bool = False) -> Doc:
    """Data-parallel training (all-reduce of gradient buckets); with ``zero``, a ZeRO stage."""
    cluster = draw(clusters)
    doc = _document(
        "zero" if zero else "data_parallel",
        cluster,
        draw,
        model=draw(_model()),
        training=draw(_training(len(cluster.gpus) * draw(st.integers(1, 4)))),
        data_parallel={"allreduce": draw(_allreduce(cluster, sharded=zero))},
    )
    if zero:
        doc["zero"] = {"stage": draw(st.sampled_from([1, 2, 3, "fsdp"]))}
        if draw(st.booleans()):
            doc["zero"]["prefetch"] = draw(st.booleans())
    if draw(st.integers(0, 2)) == 0:
        doc["stragglers"] = draw(_stragglers())
    if draw(st.integers(0, 2)) == 0:
        doc.update(draw(_resilience(cluster)))
        if draw(st.booleans()):
            doc["training"]["duration"] = draw(st.sampled_from(["30d", "12h"]))
    if draw(st.integers(0, 2)) == 0:
        doc["data_parallel"]["balance"] = draw(_balance())
    return doc


def _balance() -> st.SearchStrategy[Any]:
    """``data_parallel.balance``: a name, or weights by device pattern (every GPU matched)."""
    weights = st.fixed_dictionaries({"*": st.sampled_from([1, 2.5])})
    return st.one_of(st.sampled_from(["even", "speed"]), weights)


PS_MODES = ("sync", "backup", "async", "ssp", "geo")
PS_PLACEMENTS = ("cpu", "gpu", "dedicated", "sharded")


@st.composite
def parameter_server_documents(draw: st.DrawFn, mode: str | None = None) -> Doc:
    """Training with parameter servers: any placement, ``mode`` (default: any)."""
    placement = draw(st.sampled_from(PS_PLACEMENTS))
    needs_nodes = placement in ("cpu", "dedicated")
    cluster = draw(node_clusters if needs_nodes else clusters)
    if placement == "dedicated" and cluster.nodes < 2:
        placement = "cpu"
    ps: Doc = {"placement": placement, "mode": mode or draw(st.sampled_from(PS_MODES))}
    workers = len(cluster.gpus)
    if placement == "gpu":
        ps["servers"] = draw(st.integers(1, workers))
    elif placement == "cpu":
        ps["servers"] = draw(st.integers(1, cluster.nodes))
    elif placement == "dedicated":
        ps["servers"] = draw(st.integers(1, cluster.nodes - 1))
        workers -= ps["servers"] * (cluster.gpus_per_node or 0)
    if ps["mode"] == "backup" and draw(st.booleans()):
        ps["backup_k"] = draw(st.integers(1, workers))
    if ps["mode"] == "ssp":
        ps["staleness"] = draw(st.integers(0, 3))
    if ps["mode"] == "geo":
        ps["geo_period"] = draw(st.integers(1, 3))
    return _document(
        f"ps-{ps['mode']}",
        cluster,
        draw,
        model=draw(_model()),
        training=draw(_training(len(cluster.gpus) * draw(st.integers(1, 4)))),
        data_parallel={"sync": "ps", "ps": ps},
    )


@st.composite
def pipeline_documents(
    draw: st.DrawFn, schedule: str | None = None, tensor: bool | None = None
) -> Doc:
    """Hybrid training (pipeline x tensor x data parallel) with ``schedule`` (default: any
    registered) and, if ``tensor``, a tensor-parallel degree above 1."""
    cluster = draw(clusters)
    workers = len(cluster.gpus)
    node = cluster.gpus_per_node or workers
    tps = [d for d in _divisors(workers) if d <= node and node % d == 0]
    if tensor:
        tps = [d for d in tps if d > 1] or [d for d in _divisors(workers) if d > 1]
    elif tensor is False:
        tps = [1]
    tp = draw(st.sampled_from(tps))
    pp = draw(st.sampled_from(_divisors(workers // tp)))
    dp = workers // (tp * pp)
    schedule = schedule or draw(st.sampled_from(Schedule.registry.names()))
    kind = Schedule.registry.lookup(schedule, "pipeline.schedule")
    chunks = kind.default_chunks
    if kind.multi_chunk and chunks == 1:  # interleaved: any v
        chunks = draw(st.integers(1, 2))
    multiple = pp if kind.micro_batch_per_stage else 1
    micro_batches = multiple * draw(st.integers(1, 3))
    samples = draw(st.integers(1, 2))
    parallelism: Doc = {"pp": pp, "tp": tp}
    if tp > 1 and node % tp:
        parallelism["allow_cross_node_tp"] = True
    if draw(st.booleans()):
        parallelism["dp"] = dp
    if tp > 1 and draw(st.booleans()):
        parallelism["sequence_parallel"] = True
    pipeline: Doc = {"schedule": schedule, "micro_batches": micro_batches}
    if chunks > 1 or draw(st.booleans()):
        pipeline["chunks"] = chunks
    if draw(st.booleans()):
        pipeline["recompute"] = draw(st.booleans())
    model = draw(_model(tp, pp * chunks))
    if "layers" in model and draw(st.booleans()):
        total = sum(layer["repeat"] for layer in model["layers"])
        pipeline["stage_layers"] = _split(total, pp * chunks)
    elif draw(st.integers(0, 2)) == 0:
        pipeline["stages"] = "balanced"  # by each stage's GPUs (whole blocks)
    doc = _document(
        "tensor_parallel" if tp > 1 else f"pipeline-{schedule}",
        cluster,
        draw,
        model=model,
        training=draw(_training(dp * micro_batches * samples)),
        parallelism=parallelism,
        pipeline=pipeline,
    )
    zero = draw(st.integers(0, 2)) == 0
    if zero:
        doc["zero"] = {"stage": draw(st.sampled_from([0, 1]))}
    if dp > 1 and draw(st.booleans()):
        doc["data_parallel"] = {"allreduce": draw(_allreduce(cluster, sharded=zero))}
    if draw(st.integers(0, 3)) == 0:
        doc["parallelism"]["simulate_replicas"] = "one"
    elif draw(st.integers(0, 3)) == 0:
        doc["stragglers"] = draw(_stragglers())
    if kind.flush and draw(st.integers(0, 3)) == 0:  # flush-free schedules take even shares
        doc.setdefault("data_parallel", {})["balance"] = draw(_balance())
    return doc


def _split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` counts of at least 1, the first ones larger."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


DOCUMENTS: dict[str, st.SearchStrategy[Doc]] = {
    "program": program_documents(),
    "collective": collective_documents(),
    "trace": trace_documents(),
    "data_parallel": data_parallel_documents(),
    "zero": data_parallel_documents(zero=True),
    **{f"parameter_server/{mode}": parameter_server_documents(mode) for mode in PS_MODES},
    **{
        f"pipeline/{name}": pipeline_documents(name, tensor=False)
        for name in Schedule.registry.names()
    },
    "tensor_parallel": pipeline_documents(tensor=True),
}
"""Valid documents of every strategy, every parameter-server mode and every pipeline
schedule, by label."""

STRATEGY_OF = {label: label.split("/")[0] for label in DOCUMENTS} | {
    "tensor_parallel": "pipeline",
}
"""The strategy (``clustersim list strategies``) that runs each label's documents."""

valid_documents = st.one_of(*DOCUMENTS.values())
"""A valid document of any strategy."""


# =========================================================================== mutations


def leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths (keys and indices) of every scalar in ``doc``."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in leaves(v, (*path, i))]
    return [path]


def mappings(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every mapping in ``doc`` (the document itself included)."""
    found = [path] if isinstance(doc, dict) else []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    return found + [p for k, v in items for p in mappings(v, (*path, k))]


def key_path(path: tuple[Any, ...]) -> str:
    """``('cluster', 'link', 'bandwidth')`` as the CLI writes it: ``cluster.link.bandwidth``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def at(doc: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in ``doc``."""
    for part in path:
        doc = doc[part]
    return doc


def has(doc: Any, path: tuple[Any, ...]) -> bool:
    """Whether ``doc`` has mappings all along ``path`` and the key at its end."""
    for part in path:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and isinstance(part, int) and part < len(doc):
            doc = doc[part]
        else:
            return False
    return True


UNIT_KEYS = {"bandwidth", "latency", "bytes", "seconds", "memory", "bucket", "chunk"}
"""Keys whose values are quantities with units (none of them a bare number)."""

NULLABLE = {"ffn", "kv_heads", "dp", "protocol", "backup_k", "chunk", "recompute", "micro_batch"}
"""Keys whose schema accepts null (null there is no error)."""

REQUIRED = [
    ("name",),
    ("cluster",),
    ("cluster", "link"),
    ("cluster", "node"),
    ("cluster", "node", "pcie"),
    ("cluster", "node", "nic"),
    ("cluster", "link", "bandwidth"),
    ("cluster", "node", "nic", "bandwidth"),
    ("workload", "bytes"),
    ("workload", "program", 0, "id"),
    ("model",),
    ("model", "transformer", "hidden"),
    ("model", "transformer", "heads"),
    ("model", "layers", 0, "flops"),
    ("training",),
    ("training", "global_batch"),
]
"""Keys that a valid document cannot do without (those present in it are dropped)."""

ALWAYS_BAD = [float("nan"), -1, -2.5, ["x"], {"bogus": 1}, None]
"""Values that no scalar of a generated document accepts (None: unless :data:`NULLABLE`)."""
BAD_QUANTITIES = ["1e308GB/s", "1e400B", "", "12 parsecs", 1e308, "-3MB", "nanGB/s"]
"""Values that no quantity accepts (a size given a bandwidth, a bandwidth a size ...)."""


@st.composite
def broken_documents(draw: st.DrawFn) -> tuple[Doc, str]:
    """A valid document of any strategy with one thing surely broken, and the key path
    the error must name."""
    doc = copy.deepcopy(draw(valid_documents))
    mutation = draw(st.sampled_from(["drop", "unknown", "value"]))
    if mutation == "drop":
        path = draw(st.sampled_from([p for p in REQUIRED if has(doc, p)]))
        del at(doc, path[:-1])[path[-1]]
        return doc, key_path(path)
    if mutation == "unknown":
        parent = draw(st.sampled_from(mappings(doc)))
        at(doc, parent)["zz_unknown"] = 1
        return doc, key_path((*parent, "zz_unknown"))
    path = draw(st.sampled_from([p for p in leaves(doc) if p not in (("name",), ("seed",))]))
    key = next((part for part in reversed(path) if isinstance(part, str)), "")
    bad = [v for v in ALWAYS_BAD if v is not None or key not in NULLABLE]
    bad += BAD_QUANTITIES if path[-1] in UNIT_KEYS else []
    at(doc, path[:-1])[path[-1]] = copy.deepcopy(draw(st.sampled_from(bad)))
    return doc, key_path(path)


WRONG_TYPES: list[Any] = [None, True, "abc", "", ["x"], {"bogus": 1}, 1.5, [], {}]
"""Values of the wrong type for most keys."""
OUT_OF_RANGE: list[Any] = [0, -1, -2.5, 0.5, float("nan"), float("inf"), -float("inf"), 1e308]
"""Numbers outside most keys' ranges."""
HUGE_COUNTS: list[Any] = [10**4, 10**6, 10**9, 2**31, 2**63, 10**30]
"""Counts of absurd work: refused or run, but never a hang."""
ODD_QUANTITIES: list[Any] = [
    *BAD_QUANTITIES,
    "0B",
    "0GB/s",
    "0us",
    "1e-300B",
    "1e-300GB/s",
    "1e30MB",
    "1e300us",
    "1 MB",
    "1mb",
    "inf",
    "1e999GB/s",
    "1,000MB",
    "0x10MB",
    "\u0661MB",
]
"""Quantities that are wrong, extreme or oddly written."""
ODD_NAMES: list[Any] = [
    "bogus",
    "",
    "*",
    "gpu99",
    "../etc/passwd",
    "a" * 300,
    "r\u00e9seau",
    "\x00",
]
"""Names and patterns that match nothing, everything or are odd text."""


@st.composite
def mutated_documents(draw: st.DrawFn, documents: st.SearchStrategy[Doc] = valid_documents) -> Doc:
    """A valid document with 1-3 mutations: a key dropped or unknown, a value of the
    wrong type, out of range, huge, an odd quantity or name, a section replaced.

    The result may still be valid (a count made 10**9 is); what it must never do is
    make clustersim print a traceback or hang.
    """
    doc = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(1, 3))):
        _mutate(doc, draw)
    return doc


def _mutate(doc: Doc, draw: st.DrawFn) -> None:
    kind = draw(st.sampled_from(["drop", "unknown", "value", "value", "value", "section"]))
    if kind == "drop":
        parent = at(doc, draw(st.sampled_from(mappings(doc))))
        if parent:
            del parent[draw(st.sampled_from(sorted(parent, key=str)))]
        return
    if kind == "unknown":
        parent = at(doc, draw(st.sampled_from(mappings(doc))))
        parent[draw(st.sampled_from(["zz_unknown", "iteration", "Bandwidth", "1", ""]))] = 1
        return
    if kind == "section":
        paths = [p for p in mappings(doc) if p]
        if paths:
            path = draw(st.sampled_from(paths))
            at(doc, path[:-1])[path[-1]] = copy.deepcopy(
                draw(st.sampled_from(WRONG_TYPES + [5, "x" * 10]))
            )
        return
    paths = leaves(doc)
    if not paths or paths == [()]:
        return
    path = draw(st.sampled_from(paths))
    if not path:
        return
    old = at(doc, path)
    pools = [WRONG_TYPES, OUT_OF_RANGE]
    if isinstance(old, int) and not isinstance(old, bool):
        pools += [HUGE_COUNTS, HUGE_COUNTS]
    if isinstance(old, str):
        pools += [ODD_QUANTITIES, ODD_NAMES] if any(c.isdigit() for c in old) else [ODD_NAMES]
    bad = draw(st.sampled_from(draw(st.sampled_from(pools))))
    at(doc, path[:-1])[path[-1]] = copy.deepcopy(bad)  # later mutations must not change a pool


def document_text(doc: Any) -> str:
    """``doc`` as YAML (nan and inf as YAML's .nan and .inf)."""
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# =========================================================================== workspace

_TWO_GPUS = {"kind": "switch", "devices": 2, "link": {"bandwidth": "10GB/s", "latency": "1us"}}
_FOUR_GPUS = {**_TWO_GPUS, "devices": 4}
_NODES = {
    "racks": 1,
    "nodes_per_rack": 2,
    "node": {"gpus": 2, "pcie": {"bandwidth": "16GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
}
_LAYERS = {"layers": [{"name": "l", "params": "1e6", "flops": "1e9", "repeat": 2}]}
_TRANSFORMER = {"transformer": {"layers": 2, "hidden": 32, "heads": 2, "seq": 16, "vocab": 64}}
_TRAINING = {"global_batch": 8, "iterations": 1}

FIXTURE_DOCUMENTS: dict[str, Doc] = {
    "ok/program.yaml": {
        "name": "ok-program",
        "cluster": _TWO_GPUS,
        "workload": {
            "program": [
                {"id": "t", "transfer": {"src": "gpu0", "dst": "gpu1", "bytes": "1MB"}},
                {"id": "c", "compute": {"device": "gpu1", "flops": "1GFLOP"}, "after": ["t"]},
            ]
        },
    },
    "ok/collective.yaml": {
        "name": "ok-collective",
        "cluster": _FOUR_GPUS,
        "workload": {"collective": "allreduce", "bytes": "1MB"},
    },
    "ok/data_parallel.yaml": {
        "name": "ok-data-parallel",
        "cluster": _TWO_GPUS,
        "model": _LAYERS,
        "training": _TRAINING,
    },
    "ok/zero.yaml": {
        "name": "ok-zero",
        "cluster": _TWO_GPUS,
        "model": _TRANSFORMER,
        "training": _TRAINING,
        "zero": {"stage": 3},
    },
    "ok/parameter_server.yaml": {
        "name": "ok-ps",
        "cluster": _NODES,
        "model": _LAYERS,
        "training": _TRAINING,
        "data_parallel": {"sync": "ps", "ps": {"placement": "cpu", "mode": "ssp"}},
    },
    "ok/pipeline.yaml": {
        "name": "ok-pipeline",
        "cluster": _FOUR_GPUS,
        "model": _TRANSFORMER,
        "training": _TRAINING,
        "parallelism": {"pp": 2},
        "pipeline": {"schedule": "1f1b", "micro_batches": 2},
    },
    "ok/tensor_parallel.yaml": {
        "name": "ok-tp",
        "cluster": _NODES,
        "model": _TRANSFORMER,
        "training": _TRAINING,
        "parallelism": {"tp": 2},
    },
    "cluster.yaml": {"cluster": _FOUR_GPUS},
    "bad/invalid.yaml": {"name": "bad", "cluster": {**_TWO_GPUS, "devices": -1}},
    "choose/ok.yaml": {
        "workload": "../ok/tensor_parallel.yaml",
        "tokens": "1M",
        "search": {"micro_batch": [1], "zero": [1], "chunks": [1]},
        "clusters": [
            {"name": "two", "gpu_hour_price": 2.0, "gpu_power": "700W", "cluster": _TWO_GPUS},
            {"name": "four", "gpu_hour_price": 1.5, "cluster": "../cluster.yaml"},
        ],
    },
    "choose/no_price.yaml": {
        "workload": "../ok/tensor_parallel.yaml",
        "clusters": [{"name": "two", "cluster": _TWO_GPUS}],
    },
}
"""Small fixed scenario files of every strategy, a cluster section and a broken one; two
candidates files of ``clustersim choose`` (one without a price)."""

FIXTURE_FILES: dict[str, str | bytes] = {
    "bad/not_yaml.yaml": "name: [unclosed\n",
    "bad/empty.yaml": "",
    "bad/binary.yaml": b"\xff\xfe\x00n\x00a",
    "bad/list.yaml": "- just\n- a list\n",
    "file.txt": "not a scenario\n",
    "golden_bad/x.json": "{not json",
    "astra/ring.yml": "topology: [Ring]\nnpus_count: [4]\nbandwidth: [50.0]\nlatency: [500.0]\n",
    "astra/ring_switch.yml": (
        "topology: [Ring, Switch]\nnpus_count: [4, 2]\nbandwidth: [50.0, 10.0]\n"
        "latency: [500.0, 2500.0]\n"
    ),
    "astra/bad.yml": "topology: [Torus]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n",
    "astra/system.json": '{"all-reduce-implementation": ["ring"], "scheduling-policy": "LIFO"}',
    "astra/bad.json": '{"all-reduce-implementation": "ring"',
    "nccl/box_all_reduce.log": format_log(
        "all_reduce", 1, 8, [(1024, 2.5e-5), (1048576, 6e-5), (67108864, 6e-4)], 1.75
    ),
    "nccl/one_size_all_reduce.log": format_log("all_reduce", 1, 8, [(1048576, 6e-5)], 1.75),
    "profile/step.json": json.dumps(
        {
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "traceEvents": [
                event
                for i, size in enumerate((256, 512, 1024))
                for event in (
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::mm",
                        "pid": 1,
                        "tid": 1,
                        "ts": 100 * i,
                        "dur": 50,
                        "args": {"Input Dims": [[size, size]] * 2, "Input type": ["float"] * 2},
                    },
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernel",
                        "pid": 1,
                        "tid": 1,
                        "ts": 100 * i + 5,
                        "dur": 4,
                        "args": {"correlation": i + 1},
                    },
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "gemm",
                        "pid": 0,
                        "tid": 7,
                        "ts": 100 * i + 10,
                        "dur": 2 * size**3 / 2e7 + 5,
                        "args": {"correlation": i + 1, "device": 0},
                    },
                )
            ],
        }
    ),
}
"""Other fixture files (text or bytes); two nccl-tests logs (``calibrate nccl-tests``) and a
profiler trace of three products (``calibrate profile``)."""

RUN_DIR = "runs/done"
"""A finished run folder (``clustersim run ok/data_parallel.yaml -o runs/done``)."""
GOLDEN_DIR = "golden"
"""Golden files of ok/collective.yaml and ok/program.yaml."""
FIFO = "fifo"
"""A named pipe with no writer: reading it blocks."""
SYMLINKS = {"devnull": "/dev/null", "devzero": "/dev/zero"}
"""Special files, reached through links inside the workspace (never written through:
an atomic write replaces the link, not the device)."""


WARM_MODULES = (
    "clustersim.api",
    "clustersim.studies.collective_sweep",
    "clustersim.outputs.gantt",
    "clustersim.outputs.html",
    "clustersim.outputs.plots",
    "clustersim.outputs.run_folder",
    "clustersim.studies.golden",
    "clustersim.studies.plan",
    "clustersim.studies.sweep",
    "matplotlib.backends.backend_agg",
    "matplotlib.figure",
    "matplotlib.patches",
    "matplotlib.pyplot",
)
"""Modules the commands import when they run: imported once here, before the runs fork."""


def warm_up() -> None:
    """Import :data:`WARM_MODULES` so that forked runs do not each import them again."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    _draw_once()


def _draw_once() -> None:
    """Draw a figure with text as PNG and SVG: matplotlib's font caches fill once, here."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.barh([0], [1], label="x")
    ax.set_title("warm up")
    ax.legend()
    for fmt in ("png", "svg"):
        fig.savefig(io.BytesIO(), format=fmt)


def _nan_times(folder: Path) -> None:
    lines = (folder / "timeline.csv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    cells = [line.split(",") for line in lines[1:]]
    for row in cells:
        row[header.index("start_s")] = row[header.index("end_s")] = "nan"
    _write(folder / "timeline.csv", "\n".join([lines[0], *map(",".join, cells)]) + "\n")


def _odd_summary(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary.update(devices=3, makespan_s="soon", busiest_links={"x": 1})
    _write(folder / "summary.json", json.dumps(summary))


def _folder_for(name: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).mkdir()

    return damage


BROKEN_RUNS: dict[str, Callable[[Path], None]] = {
    "runs/bad_json": lambda d: _write(d / "summary.json", "{"),
    "runs/bad_csv": lambda d: _write(d / "timeline.csv", "a,b\n1\n"),
    "runs/no_links": lambda d: (d / "links.csv").unlink(),
    "runs/nan_times": _nan_times,
    "runs/odd_summary": _odd_summary,
    "runs/gantt_is_a_folder": _folder_for("gantt.png"),
    "runs/report_is_a_folder": _folder_for("report.html"),
}
"""Run folders broken in one way each: bad JSON, a CSV without its columns, a missing
file, NaN times, values of the wrong type, an output name taken by a folder."""


class Workspace:
    """A folder of fixture files, built once, copied afresh for every run.

    Every path a generated command line names is relative to the copy (its working
    folder), or a link in it: no run reads or writes outside it.
    """

    def __init__(self, root: Path, limit_s: float) -> None:
        self.root = root
        self.template = root / "template"
        self.limit_s = limit_s
        self._count = 0
        self._build()

    def _build(self) -> None:
        warm_up()
        t = self.template
        for name, doc in FIXTURE_DOCUMENTS.items():
            _write(t / name, document_text(doc))
        for name, data in FIXTURE_FILES.items():
            _write(t / name, data)
        (t / "empty_dir").mkdir()
        for name, target in SYMLINKS.items():
            (t / name).symlink_to(target)
        for argv in (
            ["run", "ok/data_parallel.yaml", "-o", RUN_DIR, "-q"],
            ["golden", "record", "ok/collective.yaml", "ok/program.yaml", "--dir", GOLDEN_DIR],
        ):
            outcome = run_cli(argv, t, self.limit_s)
            if outcome.exit_code != 0:
                raise RuntimeError(f"workspace: {argv} failed:\n{outcome.stderr}")
        self._break_run_folders()

    def _break_run_folders(self) -> None:
        """Copies of the finished run folder, each broken in one way (:data:`BROKEN_RUNS`)."""
        t = self.template
        for name, damage in BROKEN_RUNS.items():
            shutil.copytree(t / RUN_DIR, t / name)
            damage(t / name)

    def fresh(self, files: dict[str, str | bytes]) -> Path:
        """A new copy of the template with ``files`` added and a FIFO; its path."""
        self._count += 1
        cwd = self.root / f"run{self._count}"
        shutil.copytree(self.template, cwd, symlinks=True)
        os.mkfifo(cwd / FIFO)
        for name, data in files.items():
            _write(cwd / name, data)
        return cwd

    def run(self, invocation: Invocation) -> Outcome:
        """Run ``invocation`` in a fresh copy, then remove the copy."""
        cwd = self.fresh(invocation.files)
        try:
            return run_cli(list(invocation.argv), cwd, self.limit_s)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")


# =========================================================================== command lines

SCENARIO_PATHS = [
    *(name for name in FIXTURE_DOCUMENTS if name.startswith("ok/")),
    "cluster.yaml",
    "bad/invalid.yaml",
    *FIXTURE_FILES,
    "missing.yaml",
    "missing_dir/x.yaml",
    "file.txt/x.yaml",
    "empty_dir",
    ".",
    "",
    "-",
    FIFO,
    *SYMLINKS,
    f"{RUN_DIR}/summary.json",
]
"""Scenario files to read: valid, broken, missing, folders, a FIFO, special files."""
OUT_DIRS = [
    "out",
    "out/a/b",
    RUN_DIR,
    "empty_dir",
    ".",
    "",
    "file.txt",
    "ok/program.yaml",
    "file.txt/sub",
    FIFO,
    "devnull",
]
"""Output folders: new, nested, existing, a file, under a file, a FIFO, a device."""
OUT_FILES = [
    "out.csv",
    "out.png",
    "out.svg",
    "out.txt",
    "out/nested/x.csv",
    "empty_dir",
    "file.txt",
    "file.txt/x.csv",
    "",
    FIFO,
    "devnull",
]
"""Output files: new (several suffixes), nested, a folder, under a file, a FIFO, a device."""
INTS = ["0", "1", "2", "3", "-1", "nan", "inf", "1e3", "1.5", "", "x", "99999999999999999999"]
"""Whole numbers for int flags: valid, 0, negative, not numbers, huge."""
FLOATS = ["0", "0.01", "0.5", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "1e400", "x", ""]
"""Real numbers for float flags."""
COUNTS = ["1", "2", "0", "-2", "1.5", "nan", "x", "", "1000", "100000000", " 2"]
"""Counts given as text (two_tier topology flags)."""
BANDWIDTHS = ["100Gb/s", "10GB/s", "0", "0GB/s", "-1GB/s", "1e400GB/s", "nan", "10GB", "none", ""]
TIMES = ["1us", "0", "2.5ms", "-1us", "1e400s", "nan", "1GB/s", "", "1e-300s"]
SIZES = ["1MB", "4KiB", "0", "0B", "-1MB", "1e400B", "nanB", "1e15B", "1 parsec", ""]
SIZE_RANGES = [
    *SIZES,
    "1MB:4MB:x2",
    "1KB:1MB:+256KB",
    "4MB:1MB:x2",
    "1MB:4MB:x1",
    "1MB:4MB:x0.5",
    "1MB:4MB:+0",
    "1MB:4MB:+-1MB",
    "1B:1PB:x1.0001",
    "1B:1GB:+1B",
    "0:1MB:x2",
    "1MB:4MB",
    "1MB:4MB:y2",
    "1MB:4MB:xnan",
]
"""nccl-tests sizes and ranges: valid, reversed, factors <= 1, zero steps, huge counts."""
LISTS = ["1", "1,2", "2,4", "0", "-1", "1,,2", "", "x", "1e9", "99999999999999999999", "1,1,1"]
ZERO_STAGES = ["0", "1", "0,1", "2,3", "fsdp", "0,1,2,3,fsdp", "4", "-1", "", "x"]
SETTINGS = [
    "seed=0,1",
    "cluster.devices=2,4",
    "training.iterations=1,2",
    "workload.bytes=1MB,2MB",
    "cluster.link.bandwidth=1GB/s,nan",
    "training.iterations=0",
    "training.iterations=1000000000",
    "workload.bytes=1e300B",
    "cluster.devices=100000000",
    "nokey",
    "=1",
    "seed=",
    "a.b[99]=1",
    "cluster.link[0]=1",
    "[0]=1",
    "workload.program[7].id=x",
    "seed=1,,2",
    "name=\u00e9",
    "seed=0",
    "network.model=flow",
    "+network.channels=2",
    "network.modle=flow",
    "recovery=null",
    "stragglers[0].slowdown=2",
    "cluster.racks=-1",
]
"""``--set`` values: good keys and values, bad values, huge values, malformed keys; one
value (run, plan, golden record) or several (compare sweeps them; elsewhere an error)."""
METRICS = ["makespan_s", "iteration_time_s", "throughput_samples_per_s", "devices", "x", ""]
OPS = ["allreduce", "all-reduce", "alltoall", "broadcast", "barrier", "gather", "bogus", ""]
ALGORITHMS = ["all", "ring", "direct", "tree", "hierarchical", "auto", "bogus", ""]
GLOBS = ["*", "gpu[01]", "gpu0", "nomatch*", "[", "", "*/gpu*"]
PROTOCOLS = ["LL", "LL128", "Simple", "auto", "none", "ll", "bogus", ""]
CHANNELS = ["auto", "1", "8", "64", "0", "65", "-1", "1.5", "x", "AUTO", ""]
"""``--channels``: auto, counts in and out of 1 .. 64, text."""
RATIOS = ["1", "2", "4.5", "0", "-1", "nan", "inf", "x", "1e308"]
EVENTS = ["200000000", "2e8", "1_000", "1", "10", "0", "-1", "1.5", "nan", "inf", "1e18", "x", ""]
"""Event counts (``--max-events``): plain, with exponent or underscores, tiny, bad, huge."""
MEMORY = ["64GB", "8GB", "512MiB", "1e9", "1", "1B", "0", "-1GB", "nan", "inf", "8Gb/s", "x", ""]
"""Memory limits (``--max-memory``): sizes with units, bytes, tiny (refuses every run), bad."""
SCHEDULERS = ["local:1", "local:0", "local:x", "local:", "bogus", "tcp://", ""]
"""Dask schedulers (``--scheduler``): a local cluster of one worker, malformed forms."""
CANDIDATES = [
    "choose/ok.yaml",
    "choose/no_price.yaml",
    "ok/pipeline.yaml",
    "cluster.yaml",
    "bad/not_yaml.yaml",
    "missing.yaml",
    "empty_dir",
    "",
    FIFO,
]
"""Candidates files (``choose``): valid, without a price, a scenario, broken, missing."""
TOKENS = ["1M", "2T", "5e9", "300G", "0", "-1", "nan", "1e30", "x", ""]
"""Token counts (``choose --tokens``): with suffixes, plain, zero, negative, huge, text."""
PATTERNS = ["D1", "zero", "B*", "MM1", "nomatch", "", "["]
"""Case patterns (``reproduce --only``)."""

VALUES: dict[str, list[str]] = {
    "scenario": SCENARIO_PATHS,
    "run_dir": [RUN_DIR, *BROKEN_RUNS, "empty_dir", "missing", "file.txt", FIFO, "devnull", ""],
    "golden_dir": [GOLDEN_DIR, "golden_bad", "empty_dir", "missing", "file.txt", "out/new", ""],
    "out_dir": OUT_DIRS,
    "out_file": OUT_FILES,
    "int": INTS,
    "float": FLOATS,
    "count": COUNTS,
    "ratio": RATIOS,
    "bandwidth": BANDWIDTHS,
    "time": TIMES,
    "size": SIZES,
    "sizes": SIZE_RANGES,
    "list": LISTS,
    "zero": ZERO_STAGES,
    "set": SETTINGS,
    "metric": METRICS,
    "op": OPS,
    "algorithm": ALGORITHMS,
    "glob": GLOBS,
    "protocol": PROTOCOLS,
    "channels": CHANNELS,
    "events": EVENTS,
    "memory": MEMORY,
    "scheduler": SCHEDULERS,
    "pattern": PATTERNS,
    "candidates": CANDIDATES,
    "tokens": TOKENS,
    "astra_network": ["astra/ring.yml", "astra/ring_switch.yml", "astra/bad.yml", "astra/system.json", "missing", "empty_dir", ""],
    "astra_system": ["astra/system.json", "astra/bad.json", "astra/ring.yml", "missing", "empty_dir", ""],
    "astra_workload": ["astra/nothing", "missing/x", ""],
    "nccl_log": ["nccl/box_all_reduce.log", "nccl/one_size_all_reduce.log", "file.txt", "missing", "empty_dir", FIFO, "devnull", ""],
    "profile_trace": ["profile/step.json", "nccl/box_all_reduce.log", "astra/system.json", "file.txt", "missing", "empty_dir", FIFO, "devnull", ""],
    "node": ["dgx-a100", "dgx-h100", "dgx-a1000", "file.txt", "missing.yaml", ""],
    "hold_out": ["default", "none", "0.5", "0", "1", "-1", "1MB:1GB", "1GB:1MB", "1MB:x", "x", ""],
    "name": ["my-node", "x y", "", "a" * 300],
}  # fmt: skip
"""Values to try per domain, valid and invalid."""

VALID: dict[str, list[str]] = {
    "scenario": [name for name in FIXTURE_DOCUMENTS if name.startswith("ok/")],
    "run_dir": [RUN_DIR],
    "golden_dir": [GOLDEN_DIR, "out/new"],
    "out_dir": ["out", "out/a/b", "empty_dir"],
    "out_file": ["out.csv", "out.png", "out.svg"],
    "int": ["1", "2", "3"],
    "float": ["0.01", "0.5"],
    "count": ["1", "2"],
    "ratio": ["1", "2", "4.5"],
    "bandwidth": ["100Gb/s", "10GB/s"],
    "time": ["1us", "2.5ms", "0"],
    "size": ["1MB", "4KiB"],
    "sizes": ["1MB", "1MB:4MB:x2", "1KB:1MB:+256KB"],
    "list": ["1", "1,2", "2,4"],
    "zero": ["0", "1", "0,1"],
    "set": [*SETTINGS[:2], "seed=0", "network.model=flow"],
    "metric": METRICS[:3],
    "op": ["allreduce", "alltoall", "broadcast", "gather"],
    "algorithm": ["all", "ring", "direct", "auto"],
    "glob": ["*", "gpu[01]", "*/gpu*"],
    "protocol": ["LL", "Simple", "auto", "none"],
    "channels": ["auto", "1", "8"],
    "events": ["200000000", "2e8", "10"],
    "memory": ["64GB", "8GB"],
    "scheduler": ["local:1"],
    "pattern": ["D1", "zero", "MM1"],
    "candidates": ["choose/ok.yaml"],
    "tokens": ["1M", "2T"],
    "astra_network": ["astra/ring.yml", "astra/ring_switch.yml"],
    "astra_system": ["astra/system.json"],
    "astra_workload": ["astra/nothing"],
    "nccl_log": ["nccl/box_all_reduce.log"],
    "profile_trace": ["profile/step.json"],
    "node": ["dgx-a100"],
    "hold_out": ["default", "none", "0.5"],
    "name": ["my-node"],
}
"""Good values per domain: most flags get one, so that a command line gets past its first
check and the one or two bad values in it reach deeper code."""
USUAL = {"devices"}
"""Optional flags (by dest) given most of the time: a command needs them more often than not."""
ALWAYS = {"only"}
"""Optional flags (by dest) always given: ``reproduce`` without ``--only`` runs the whole
validation suite (a minute: Megatron's 1T row alone takes 20 s), past a fuzz run's time
limit; ``make test`` runs it whole."""

DOMAINS: dict[str, str] = {
    "scenario": "scenario",
    "scenarios": "scenario",
    "files": "scenario",
    "cluster": "scenario",
    "run_dir": "run_dir",
    "dir": "golden_dir",
    "output": "out_dir",
    "csv": "out_file",
    "plot": "out_file",
    "rtol": "float",
    "racks": "count",
    "nodes_per_rack": "count",
    "gpus_per_node": "count",
    "nics": "count",
    "channels": "channels",
    "oversubscription": "ratio",
    "bandwidth": "bandwidth",
    "pcie": "bandwidth",
    "nvlink": "bandwidth",
    "latency": "time",
    "bytes": "sizes",
    "chunk": "size",
    "tp": "list",
    "pp": "list",
    "micro_batch": "list",
    "chunks": "list",
    "zero": "zero",
    "settings": "set",
    "metric": "metric",
    "op": "op",
    "algorithm": "algorithm",
    "group": "glob",
    "protocol": "protocol",
    "max_events": "events",
    "max_memory": "memory",
    "scheduler": "scheduler",
    "only": "pattern",
    "candidates": "candidates",
    "tokens": "tokens",
    "network": "astra_network",
    "system": "astra_system",
    "workload": "astra_workload",
    "logs": "nccl_log",
    "check": "nccl_log",
    "trace": "profile_trace",
    "base": "node",
    "hold_out": "hold_out",
    "name": "name",
}
"""The value domain of each flag's ``dest`` (int flags need none: their type says it)."""


@dataclass(frozen=True)
class Flag:
    """One argument of a command, as argparse holds it."""

    options: tuple[str, ...]
    """Option strings (``-o``, ``--output``); none for a positional."""
    dest: str
    nargs: Any
    takes_value: bool
    required: bool
    repeatable: bool
    domain: str
    """Key of :data:`VALUES`, ``choice`` (argparse choices) or ``text`` (no known domain)."""
    choices: tuple[str, ...] = ()


def domain_of(action: argparse.Action) -> str:
    """The value domain of an argparse action: its choices, its dest, else its type."""
    if action.choices:
        return "choice"
    if action.dest in DOMAINS:
        return DOMAINS[action.dest]
    if action.type is int:
        return "int"
    if action.type is float:
        return "float"
    return "text"


def commands(
    parser: argparse.ArgumentParser | None = None, words: tuple[str, ...] = ()
) -> dict[tuple[str, ...], list[Flag]]:
    """Every command of the parser (``('golden', 'check')`` for nested ones) and its flags."""
    parser = parser or build_parser()
    found: dict[tuple[str, ...], list[Flag]] = {}
    flags: list[Flag] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(commands(sub, (*words, name)))
            continue
        flags.append(
            Flag(
                tuple(action.option_strings),
                action.dest,
                action.nargs,
                action.nargs != 0,
                bool(action.required),
                isinstance(action, argparse._AppendAction),
                domain_of(action),
                tuple(str(c) for c in action.choices or ()),
            )
        )
    if words and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        found[words] = flags
    return found


@dataclass(frozen=True)
class Invocation:
    """A command line and the generated files it names (relative to the workspace)."""

    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        import shlex

        text = "clustersim " + shlex.join(self.argv)
        for name, data in self.files.items():
            text += f"\n--- {name}\n{data}"
        return text


DocumentSource = st.SearchStrategy[Doc]


def generated_documents(mutated_share: float = 0.5) -> DocumentSource:
    """Valid documents of every strategy and, about ``mutated_share`` of the time, mutated."""
    weight = max(1, round(10 * mutated_share))
    return st.one_of(*[valid_documents] * (10 - weight), *[mutated_documents()] * weight)


@st.composite
def _value(draw: st.DrawFn, flag: Flag, files: dict[str, str], documents: DocumentSource) -> str:
    """A value for ``flag``: from its domain; a scenario may be a generated document."""
    if flag.domain == "scenario" and draw(st.integers(0, 2)) == 0:
        name = f"gen{len(files)}.yaml"
        files[name] = document_text(draw(documents))
        return name
    good = draw(st.integers(0, 3)) > 0  # three values in four are good ones
    if flag.domain == "choice":
        return draw(st.sampled_from([*flag.choices] + ([] if good else ["bogus", ""])))
    if flag.domain == "text":
        pools = [v for values in VALUES.values() for v in values]
        return draw(st.sampled_from(pools))
    return draw(st.sampled_from(VALID[flag.domain] if good else VALUES[flag.domain]))


@st.composite
def _tokens(
    draw: st.DrawFn, flag: Flag, files: dict[str, str], documents: DocumentSource
) -> list[str]:
    """The words of one flag (or positional) with its value(s)."""
    if not flag.options:
        low, high = {None: (1, 1), "?": (0, 1), "*": (0, 2), "+": (1, 3)}.get(flag.nargs, (1, 1))
        return [draw(_value(flag, files, documents)) for _ in range(draw(st.integers(low, high)))]
    option = draw(st.sampled_from(flag.options))
    if not flag.takes_value:
        return [option]
    value = draw(_value(flag, files, documents))
    if option.startswith("--") and (value.startswith("-") or draw(st.booleans())):
        return [f"{option}={value}"]
    return [option, value]


JUNK = ["--bogus", "-Z", "--output-dir=x", "extra", "--", "-", "--help", "-h", "--=x", "\u00e9"]
"""Words no command expects (and --help, which ends a command line early)."""


@st.composite
def command_lines(draw: st.DrawFn, documents: DocumentSource | None = None) -> Invocation:
    """A command line of any command: each flag present or not with a value of its domain,
    positionals (some missing), now and then a word no command expects."""
    documents = generated_documents() if documents is None else documents
    table = _command_table()
    if draw(st.integers(0, 40)) == 0:
        return Invocation(tuple(draw(st.sampled_from([[], ["--version"], ["--help"], ["bogus"]]))))
    words = draw(st.sampled_from(sorted(table)))
    files: dict[str, str] = {}
    groups: list[list[str]] = []
    for flag in table[words]:
        if flag.dest in ("help", "version"):
            continue
        wanted = 19 if flag.required or not flag.options else 15 if flag.dest in USUAL else 3
        wanted = 20 if flag.dest in ALWAYS else wanted
        for _ in range(draw(st.integers(1, 3)) if flag.repeatable else 1):
            if draw(st.integers(0, 19)) < wanted:
                groups.append(draw(_tokens(flag, files, documents)))
    if draw(st.integers(0, 9)) == 0:
        groups.append([draw(st.sampled_from(JUNK))])
    groups = draw(st.permutations(groups)) if draw(st.booleans()) else groups
    return Invocation((*words, *(token for group in groups for token in group)), files)


@st.composite
def document_runs(draw: st.DrawFn, documents: DocumentSource | None = None) -> Invocation:
    """``clustersim run`` or ``validate`` of one generated document (valid or mutated)."""
    documents = generated_documents() if documents is None else documents
    text = document_text(draw(documents))
    command = draw(st.sampled_from(["run", "run", "run", "validate"]))
    argv = [command, "gen.yaml"]
    if command == "run":
        argv += ["-o", "out"]
        argv += draw(st.lists(st.sampled_from(["-q", "--check", "--strict-memory"]), unique=True))
    return Invocation(tuple(argv), {"gen.yaml": text})


def invocations(documents: DocumentSource | None = None) -> st.SearchStrategy[Invocation]:
    """Half document runs, half command lines of any command."""
    return st.one_of(document_runs(documents), command_lines(documents))


_COMMANDS: dict[tuple[str, ...], list[Flag]] = {}


def _command_table() -> dict[tuple[str, ...], list[Flag]]:
    if not _COMMANDS:
        _COMMANDS.update(commands())
    return _COMMANDS


# =========================================================================== runner

HANG_S = 20.0
"""A run still going after this many wall seconds is a hang."""
MEMORY_HEADROOM = 4 * 2**30
"""Address space a run may add to the parent's (bytes); more is a MemoryError."""


@dataclass
class Outcome:
    """How one command line ended."""

    argv: list[str]
    exit_code: int | None
    """None: killed after the time limit (a hang); negative: killed by that signal."""
    stdout: str
    stderr: str
    wall_s: float
    exception: str = ""
    """``Type`` of an exception that escaped ``main`` (a traceback), else ""."""
    where: str = ""
    """Innermost clustersim frame of that exception, ``path:function``."""


def run_cli(argv: list[str], cwd: Path, limit_s: float = HANG_S) -> Outcome:
    """Run ``clustersim ARGV`` (``clustersim.cli.main``) in a forked child in ``cwd``.

    The child's stdin is /dev/null, its stdout and stderr are captured, its address
    space limited; after ``limit_s`` wall seconds its process group is killed.  It is a
    copy of the pytest process (hypothesis's gc callbacks, pytest's unraisable hook), so
    SIGINT is blocked across the fork until the child has its own process group and
    SIGINT's default action: a SIGINT to the test run's group never raises
    KeyboardInterrupt in it (in this process it waits for the unblock).
    """
    with tempfile.TemporaryDirectory(prefix="clustersim-fuzz-io-") as io_dir:
        out, err, res = (Path(io_dir) / n for n in ("stdout", "stderr", "result.json"))
        started = time.monotonic()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _child(argv, cwd, out, err, res, limit_s, mask)
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass  # the child set it already, or has ended
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = _wait(pid, limit_s)
        wall = time.monotonic() - started
        _kill_group(pid)
        result = json.loads(res.read_text()) if res.exists() else {}
        return Outcome(
            argv,
            code,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
            wall,
            result.get("exception", ""),
            result.get("where", ""),
        )


def _wait(pid: int, limit_s: float) -> int | None:
    """The child's exit code (negative: the signal that killed it); None if it ran past
    ``limit_s`` (then it is killed)."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], limit_s)
    finally:
        os.close(fd)
    if not ready:
        os.kill(pid, signal.SIGUSR1)  # the child's faulthandler prints where it is
        time.sleep(0.3)
        _kill_group(pid)
        os.waitpid(pid, 0)
        return None
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _kill_group(pid: int) -> None:
    """Kill what is left of the child's process group (pool workers, a hung child)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child(
    argv: list[str], cwd: Path, out: Path, err: Path, res: Path, limit_s: float, mask: set[int]
) -> None:
    """The forked child (SIGINT blocked, ``mask`` the parent's signal mask before): SIGINT's
    default action and a process group of its own first, then ``main(argv)``."""
    code = 255
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.alarm(int(limit_s) + 30)  # ends the child even if the parent is gone
        _limit_memory()
        os.chdir(cwd)
        _redirect(0, os.open(os.devnull, os.O_RDONLY))
        _redirect(1, os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
        _redirect(2, os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
        code = _call_main(argv, res)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _redirect(fd: int, new: int) -> None:
    os.dup2(new, fd)
    os.close(new)


def _limit_memory() -> None:
    import resource

    with open("/proc/self/status") as fh:
        size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    limit = size + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _call_main(argv: list[str], res: Path) -> int:
    """``main(argv)``'s exit code; an escaping exception is printed as Python would print
    it (a traceback on stderr, exit code 1) and described in ``res``."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: usage errors, --help, --version
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:
        traceback.print_exc()
        res.write_text(json.dumps({"exception": _exception_name(exc), "where": _where(exc)}))
        return 1
    return code if isinstance(code, int) and 0 <= code <= 255 else 254


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while True:
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is None or id(cause) in seen or type(cause).__name__ == "_RemoteTraceback":
            return exc
        seen.add(id(cause))
        exc = cause


def _exception_name(exc: BaseException) -> str:
    return type(_root_cause(exc)).__name__


_FRAME = re.compile(r'File "([^"]*?clustersim/[^"]+)", line \d+, in (\S+)')


def _where(exc: BaseException) -> str:
    """``clustersim/x.py:function`` of the innermost clustersim frame where the root cause
    was raised (in a pool worker too: from the remote traceback's text)."""
    root = _root_cause(exc)
    remote = root.__cause__
    if remote is not None and type(remote).__name__ == "_RemoteTraceback":
        text = str(remote)
    else:
        text = "".join(traceback.format_tb(root.__traceback__))
    frames = _FRAME.findall(text)
    if not frames:
        return "outside clustersim"
    path, function = frames[-1]
    return f"{path[path.rindex('clustersim/') :]}:{function}"


# =========================================================================== oracle

EXIT_CODES = (EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT)
"""The only exit codes a command may end with (:mod:`clustersim.cli.base`)."""
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Finding:
    """One way a run broke the oracle; ``cls`` groups findings of one cause."""

    kind: str
    """hang, traceback, signal, exit code or message."""
    cls: str
    """The class: kind, exception type and where (or what) -- stable across runs."""
    detail: str = ""


def findings_of(invocation: Invocation, outcome: Outcome, limit_s: float = HANG_S) -> list[Finding]:
    """What ``outcome`` breaks of the oracle (nothing: an empty list)."""
    command = " ".join(
        invocation.argv[:2] if invocation.argv[:1] == ("golden",) else invocation.argv[:1]
    )
    last = _last_line(outcome.stderr)
    if outcome.exit_code is None:
        where = hang_place(outcome.stderr)
        return [Finding("hang", f"hang: {command} in {where} (still running after {limit_s:g} s)")]
    if outcome.exception:
        cls = f"traceback: {outcome.exception} in {outcome.where}"
        return [Finding("traceback", cls, last)]
    if TRACEBACK in outcome.stderr:
        return [Finding("traceback", f"traceback printed: {command}", last)]
    if outcome.exit_code < 0:
        name = signal.Signals(-outcome.exit_code).name
        return [Finding("signal", f"signal: {command} killed by {name}", last)]
    if outcome.exit_code not in EXIT_CODES:
        return [Finding("exit code", f"exit code {outcome.exit_code}: {command}", last)]
    if outcome.exit_code == EXIT_BAD_INPUT and not names_the_input(outcome.stderr, invocation):
        return [Finding("message", f"message: {command} exits 2: {_shape(last)}", last)]
    return []


SIMULATING = "clustersim/engine.py:run"
"""The simulation loop: a run hung below it is a simulation that does not end in time."""
_DUMPED_FRAME = re.compile(r'File "([^"]*?clustersim/[^"]+)", line \d+ in (\S+)')


def hang_place(stderr: str) -> str:
    """``clustersim/x.py:function`` where a hung run was (the innermost clustersim frame of
    the stack faulthandler printed before it was killed)."""
    frames = [
        f"{path[path.rindex('clustersim/') :]}:{function}"
        for path, function in _DUMPED_FRAME.findall(stderr)
    ]
    if SIMULATING in frames:
        return f"{SIMULATING} (simulating)"
    return frames[0] if frames else "outside clustersim"  # the most recent call comes first


def _shape(line: str) -> str:
    """A message line with its numbers and quoted parts blanked, to class messages by."""
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)[:100]


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


_FILE_OR_FLAG = re.compile(
    r"(?:^|[\s'\"(])(?:--?[A-Za-z][\w-]*|[\w./-]*\w\.(?:yaml|yml|json|csv|png|svg|html|md))\b"
)
"""A flag (``--seed``, ``-j``) or a file name (``summary.json``) in a message."""


def names_the_input(stderr: str, invocation: Invocation) -> bool:
    """Whether the message of an exit 2 names what was wrong: a word of the command line
    (a file or a flag), argparse's own words for a bad command line, or a file read."""
    if "error:" in stderr and ("usage:" in stderr or "argument" in stderr):
        return True  # argparse: "clustersim run: error: argument --seed: ..."
    words = [w.split("=", 1)[0] for w in invocation.argv[1:]] + [
        w.split("=", 1)[1] for w in invocation.argv if "=" in w
    ]
    named = [w if len(w) > 1 else f"{w}:" for w in words if w.strip() and w != "--"]
    named += ["''"] if "" in words else []
    return any(w in stderr for w in named) or bool(_FILE_OR_FLAG.search(stderr))


# =========================================================================== campaign


@dataclass
class Tally:
    """Counts of a campaign and, per finding class, its count and smallest example."""

    runs: int = 0
    exit_codes: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    slowest_s: float = 0.0
    findings: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    examples: dict[str, tuple[Invocation, Finding]] = field(default_factory=dict)

    def add(self, invocation: Invocation, outcome: Outcome, found: list[Finding]) -> None:
        self.runs += 1
        code = "hang" if outcome.exit_code is None else str(outcome.exit_code)
        self.exit_codes[code] += 1
        self.commands[" ".join(invocation.argv[:1]) or "(none)"] += 1
        self.wall_s += outcome.wall_s
        self.slowest_s = max(self.slowest_s, outcome.wall_s)
        for finding in found:
            self.findings[finding.cls] += 1
            self.kinds[finding.kind] += 1
            best = self.examples.get(finding.cls)
            if best is None or len(str(invocation)) < len(str(best[0])):
                self.examples[finding.cls] = (invocation, finding)

    @property
    def tracebacks(self) -> int:
        return self.kinds["traceback"] + self.kinds["signal"]

    @property
    def hangs(self) -> int:
        return self.kinds["hang"]

    def report(self) -> str:
        """The tally as text: counts, then each finding class with its smallest example."""
        lines = [
            f"runs        {self.runs}",
            f"exit codes  {', '.join(f'{k}: {v}' for k, v in sorted(self.exit_codes.items()))}",
            f"commands    {', '.join(f'{k}: {v}' for k, v in sorted(self.commands.items()))}",
            f"tracebacks  {self.tracebacks}",
            f"hangs       {self.hangs}",
            f"other       {sum(self.kinds.values()) - self.tracebacks - self.hangs} "
            "(exit codes outside 0-2, exit 2 naming no file or flag)",
            f"wall        {self.wall_s:.1f} s in runs, "
            f"{1000 * self.wall_s / max(1, self.runs):.0f} ms per run, "
            f"slowest {self.slowest_s:.1f} s",
        ]
        for cls, count in self.findings.most_common():
            invocation, finding = self.examples[cls]
            lines += ["", f"[{count}x] {cls}", f"  last stderr line: {finding.detail}"]
            lines += ["  " + line for line in str(invocation).splitlines()]
        return "\n".join(lines)


def sample(
    workspace: Workspace,
    examples: int,
    strategy: st.SearchStrategy[Invocation] | None = None,
    *,
    seed: int | None = None,
    on_run: Callable[[Tally, Invocation, list[Finding]], None] | None = None,
) -> Tally:
    """Run ``examples`` generated invocations (default :func:`invocations`) in copies of
    ``workspace`` and tally them.  ``seed`` None: derandomised (the same examples every
    time, as in ``make test``)."""
    tally = Tally()

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=seed is None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(invocations() if strategy is None else strategy)
    def one(invocation: Invocation) -> None:
        outcome = workspace.run(invocation)
        found = findings_of(invocation, outcome, workspace.limit_s)
        tally.add(invocation, outcome, found)
        if on_run:
            on_run(tally, invocation, found)

    if seed is not None:
        one = hypothesis_seed(seed)(one)
    one()
    return tally


def campaign(
    examples: int,
    strategy: st.SearchStrategy[Invocation] | None = None,
    *,
    limit_s: float = HANG_S,
    seed: int | None = None,
    root: Path | None = None,
    on_run: Callable[[Tally, Invocation, list[Finding]], None] | None = None,
) -> Tally:
    """:func:`sample` in a new workspace under ``root`` (default: a temporary folder),
    removed at the end."""
    with tempfile.TemporaryDirectory(prefix="clustersim-fuzz-", dir=root) as where:
        workspace = Workspace(Path(where), limit_s)
        return sample(workspace, examples, strategy, seed=seed, on_run=on_run)
