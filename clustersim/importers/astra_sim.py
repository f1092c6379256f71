"""ASTRA-sim's inputs as a clustersim scenario (``clustersim import astra-sim``).

ASTRA-sim describes a run with three inputs (ASTRA-sim 2.x, analytical network backend):

* the **network** YAML: per dimension of a multi-dimensional topology, its ``topology``
  (``Ring``, ``FullyConnected``, ``Switch``), ``npus_count``, ``bandwidth`` (GB/s per link
  and direction) and ``latency`` (ns per link and direction); NPU i's coordinate in
  dimension d is (i / (n_0 ... n_{d-1})) mod n_d, dimension 0 varying fastest;
* the **system** JSON: per dimension the collective algorithms
  (``all-reduce-implementation`` ...), and the scheduler's knobs;
* the **workload**: Chakra execution traces, one per NPU (``PREFIX.{i}.et``).

What maps (:func:`scenario_from_astra_sim`):

* one dimension: a flat cluster of the same shape (``ring``, two-way as ASTRA-sim's;
  ``switch``; ``fully_connected``), its link at the dimension's bandwidth and latency;
* several dimensions: a ``custom`` cluster, NPUs ``npu{i}``, each dimension's groups wired
  as their topology (a ring's neighbours, every pair, or a switch ``d{d}sw{g}`` each NPU
  links to) at that dimension's bandwidth and latency;
* a one-dimensional collective algorithm (``ring``, ``direct``, ``halvingDoubling``,
  ``doubleBinaryTree`` and their ``one*`` forms) as ``algorithm``;
* the workload as ``workload: {trace: PREFIX.%d.et}`` (a trace per rank); without one, an
  all-reduce of 1 GiB over every NPU, to be replaced;
* ``network: {protocol: none, channels: 1}``: ASTRA-sim prices links at their bandwidth,
  without NCCL's protocols.

What does not map is listed (:attr:`Imported.unmapped`), written into the scenario's
header and printed, never guessed: ASTRA-sim's dimension-by-dimension collectives on
several dimensions (clustersim runs one algorithm over the whole group; ``auto`` is
written), ``hierarchicalRing``, custom Chakra collective files, the scheduler's knobs
(``scheduling-policy``, ``active-chunks-per-dimension``, ``preferred-dataset-splits``,
``collective-optimization``, ``boost-mode``), ``endpoint-delay``, ``roofline-enabled`` /
``peak-perf`` (clustersim replays the recorded durations), ``links_count`` other than 1,
and any key it does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import Problem, ScenarioError

TOPOLOGIES = {"Ring": "ring", "Switch": "switch", "FullyConnected": "fully_connected"}
"""ASTRA-sim's dimension topologies -> clustersim's flat cluster kinds."""
ALGORITHMS = {
    "ring": "ring",
    "oneRing": "ring",
    "direct": "direct",
    "oneDirect": "direct",
    "halvingDoubling": "halving_doubling",
    "oneHalvingDoubling": "halving_doubling",
    "doubleBinaryTree": "double_tree",
}
"""ASTRA-sim's collective implementations -> clustersim's algorithms."""
NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")
"""The network YAML's keys that map."""
SYSTEM_NOT_MAPPED = {
    "scheduling-policy": "clustersim runs a group's collectives in issue order",
    "active-chunks-per-dimension": "clustersim pipelines collectives by its own chunks",
    "preferred-dataset-splits": "clustersim pipelines collectives by its own chunks",
    "collective-optimization": "no equivalent",
    "boost-mode": "no equivalent",
    "endpoint-delay": "no per-endpoint delay (add it to the links' latency by hand)",
    "roofline-enabled": "clustersim replays the traces' recorded durations",
    "peak-perf": "clustersim replays the traces' recorded durations",
    "all-gather-implementation": "traces' all-gathers run with the one algorithm written",
    "reduce-scatter-implementation": "traces' reduce-scatters run with the one algorithm",
    "all-to-all-implementation": "traces' all-to-alls run with the one algorithm written",
}
"""System keys that do not map, and why."""
PLACEHOLDER_BYTES = "1GiB"
"""The all-reduce written when no workload is given."""


@dataclass
class Imported:
    """A scenario made from ASTRA-sim's inputs, and what of them did not map."""

    document: dict[str, Any]
    mapped: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    def yaml_text(self, sources: list[str]) -> str:
        """The scenario as YAML under a header naming the inputs and what did not map."""
        head = ["# Written by clustersim import astra-sim from " + ", ".join(sources) + "."]
        head += ["# Mapped:"] + [f"#   {line}" for line in self.mapped]
        head += ["# Not mapped (clustersim does otherwise; check before trusting a comparison):"]
        head += [f"#   {line}" for line in self.unmapped] or ["#   nothing"]
        body = yaml.safe_dump(self.document, sort_keys=False, default_flow_style=None)
        return "\n".join(head) + "\n" + body


def _read(path: Path, what: str, loader: Any) -> Any:
    try:
        return loader(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(Problem(what, f"{path}: no such file")) from None
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise ScenarioError(Problem(what, f"{path}: cannot read it ({exc})")) from None


def _dimensions(net: Any, path: Path) -> list[tuple[str, int, float, float]]:
    """(topology, NPUs, bytes/s, seconds) per dimension of the network YAML."""
    if not isinstance(net, dict):
        raise ScenarioError(Problem("--network", f"{path}: must be a mapping of lists"))
    lists = {}
    for key in NETWORK_KEYS:
        value = net.get(key)
        if not isinstance(value, list) or not value:
            raise ScenarioError(
                Problem(
                    f"--network: {key}", f"{path}: missing or not a list", "a list per dimension"
                )
            )
        lists[key] = value
    if len({len(v) for v in lists.values()}) != 1:
        sizes = ", ".join(f"{k} {len(v)}" for k, v in lists.items())
        raise ScenarioError(Problem("--network", f"{path}: lists of different lengths ({sizes})"))
    dims = []
    for d, (kind, n, bw, lat) in enumerate(zip(*lists.values(), strict=True)):
        if kind not in TOPOLOGIES:
            raise ScenarioError(
                Problem(
                    f"--network: topology[{d}]",
                    f"{path}: unknown topology {kind!r}",
                    ", ".join(TOPOLOGIES),
                )
            )
        good = isinstance(n, int) and not isinstance(n, bool) and n >= 1
        if not good or not _positive(bw) or not _positive(lat, zero=True):
            raise ScenarioError(
                Problem(
                    f"--network: dimension {d}",
                    f"{path}: npus_count {n!r}, bandwidth {bw!r}, latency {lat!r}",
                    "a whole number of NPUs >= 1, bandwidth (GB/s) > 0, latency (ns) >= 0",
                )
            )
        dims.append((kind, n, float(bw) * 1e9, float(lat) * 1e-9))
    return dims


def _positive(value: Any, zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value >= 0 if zero else value > 0


def _cluster(dims: list[tuple[str, int, float, float]]) -> dict[str, Any]:
    """A flat cluster for one dimension, a custom one for several."""
    if len(dims) == 1:
        kind, n, bw, lat = dims[0]
        link = _link(bw, lat)
        return {"kind": TOPOLOGIES[kind], "devices": n, "link": link}
    total = 1
    for _, n, _, _ in dims:
        total *= n
    links: list[dict[str, Any]] = []
    switches: list[str] = []
    stride = 1
    for d, (kind, n, bw, lat) in enumerate(dims):
        link = _link(bw, lat)
        for g, group in enumerate(_groups(total, stride, n)):
            if kind == "Switch":
                switch = f"d{d}sw{g}"
                switches.append(switch)
                links += [{"src": f"npu{i}", "dst": switch, **link} for i in group]
            elif kind == "Ring":
                pairs = [(group[j], group[(j + 1) % n]) for j in range(n if n > 2 else n - 1)]
                links += [{"src": f"npu{a}", "dst": f"npu{b}", **link} for a, b in pairs]
            else:
                links += [
                    {"src": f"npu{a}", "dst": f"npu{b}", **link}
                    for j, a in enumerate(group)
                    for b in group[j + 1 :]
                ]
        stride *= n
    devices = [{"name": f"npu{i}"} for i in range(total)]
    return {"kind": "custom", "devices": devices, "switches": switches, "links": links}


def _link(bandwidth_Bps: float, latency_s: float) -> dict[str, str]:
    """A link in ASTRA-sim's units: GB/s and ns."""
    return {"bandwidth": f"{bandwidth_Bps / 1e9:g}GB/s", "latency": f"{latency_s * 1e9:g}ns"}


def _groups(total: int, stride: int, n: int) -> list[list[int]]:
    """The NPU groups of a dimension: NPUs equal in every other coordinate, in coordinate
    order (dimension 0 varies fastest; this dimension's stride is ``stride``)."""
    groups = []
    for base in range(total):
        if (base // stride) % n == 0:
            groups.append([base + j * stride for j in range(n)])
    return groups


def _algorithm(system: dict[str, Any], dims: int, out: Imported) -> str:
    """The workload's algorithm from ``all-reduce-implementation``, or ``auto`` with a note."""
    chosen = system.get("all-reduce-implementation")
    if chosen is None:
        out.unmapped.append("no all-reduce-implementation given: algorithm auto (NCCL's choice)")
        return "auto"
    if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
        raise ScenarioError(
            Problem(
                "--system: all-reduce-implementation", f"must be a list of names, got {chosen!r}"
            )
        )
    if dims == 1 and len(chosen) == 1 and chosen[0] in ALGORITHMS:
        out.mapped.append(
            f"all-reduce-implementation {chosen[0]} -> algorithm {ALGORITHMS[chosen[0]]}"
        )
        return ALGORITHMS[chosen[0]]
    out.unmapped.append(
        f"all-reduce-implementation {chosen} (ASTRA-sim runs a collective dimension by "
        "dimension); clustersim runs one algorithm over the whole group: auto written"
    )
    return "auto"


def _system_notes(system: dict[str, Any], algorithm: str, out: Imported) -> None:
    for key, value in system.items():
        if key == "all-reduce-implementation":
            continue
        same = value == system.get("all-reduce-implementation") and algorithm != "auto"
        if key.endswith("-implementation") and same:
            out.mapped.append(f"{key} {value[0]}: the same algorithm ({algorithm})")
            continue
        if key == "local-mem-bw":
            out.unmapped.append(
                f"local-mem-bw {value} (GB/s): reductions are free (reduce_cost off)"
            )
        elif key.endswith("-implementation-chakra"):
            out.unmapped.append(f"{key}: custom Chakra collective files are not read")
        else:
            why = SYSTEM_NOT_MAPPED.get(key, "not known to the importer")
            out.unmapped.append(f"{key} {value}: {why}")


def _workload(prefix: str | None, algorithm: str, base: Path, out: Imported) -> dict:
    if prefix is None:
        out.unmapped.append(
            f"no workload given: an all-reduce of {PLACEHOLDER_BYTES} over every NPU is written "
            "(give --workload PREFIX for the traces PREFIX.{i}.et)"
        )
        return {"collective": "allreduce", "algorithm": algorithm, "bytes": PLACEHOLDER_BYTES}
    for suffix in (".et", ".json"):
        first = Path(f"{prefix}.0{suffix}")
        if (first if first.is_absolute() else base / first).is_file():
            out.mapped.append(f"workload {prefix}.{{i}}{suffix} -> trace {prefix}.%d{suffix}")
            return {"trace": f"{prefix}.%d{suffix}", "algorithm": algorithm}
    raise ScenarioError(
        Problem("--workload", f"no trace {prefix}.0.et (nor {prefix}.0.json) for NPU 0")
    )


def scenario_from_astra_sim(
    network: Path, system: Path, workload: str | None = None, base: Path = Path()
) -> Imported:
    """The scenario of ASTRA-sim's ``network`` YAML, ``system`` JSON and ``workload`` trace
    prefix (relative to ``base``, the folder the scenario will be in), with what did not map."""
    net = _read(network, "--network", yaml.safe_load)
    sysconf = _read(system, "--system", json.loads)
    if not isinstance(sysconf, dict):
        raise ScenarioError(Problem("--system", f"{system}: must be a JSON object"))
    dims = _dimensions(net, network)
    out = Imported({})
    shape = " x ".join(f"{k}({n})" for k, n, _, _ in dims)
    total = 1
    for _, n, _, _ in dims:
        total *= n
    out.mapped.append(
        f"topology {shape}: {total} NPUs, "
        + (
            "a flat cluster"
            if len(dims) == 1
            else "a custom cluster (npu{i}, switches d{dim}sw{group})"
        )
    )
    extra = [k for k in net if k not in NETWORK_KEYS]
    for key in extra:
        value = net[key]
        if key == "links_count" and isinstance(value, list) and all(v == 1 for v in value):
            continue
        out.unmapped.append(f"network {key} {value}: not read (one link per pair)")
    algorithm = _algorithm(sysconf, len(dims), out)
    _system_notes(sysconf, algorithm, out)
    out.document = {
        "name": f"astra-sim-{network.stem}",
        "description": f"imported from ASTRA-sim: {network.name}, {system.name}",
        "cluster": _cluster(dims),
        "workload": _workload(workload, algorithm, base, out),
        "network": {"protocol": "none", "channels": 1},
    }
    out.mapped.append("network protocol none, channels 1: links at their bandwidth, as ASTRA-sim")
    return out
