"""The layout of a parameter-server job: keys (parameter blocks), their servers, and
which devices work and serve.  See :mod:`clustersim.strategies.parameter_server`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import Problem, ScenarioError
from ..model.layers import Model
from ..scenario import ParameterServerSpec
from ..topology import Device, Topology

PS_KEY = "data_parallel.ps"
"""Key path of the parameter-server section (for errors)."""
_PS = PS_KEY


@dataclass(frozen=True)
class Key:
    """One parameter block: its layer, size and server."""

    index: int
    name: str
    layer: int
    params: float
    nbytes: float
    server: str


def key_blocks(model: Model, servers: int) -> list[tuple[str, int, float]]:
    """``(name, layer index, params)`` of every key, in layer order.

    A layer with more than ``total / servers`` parameters is split into
    ``ceil(params / (total / servers))`` equal keys ``name[j]``.
    """
    share = model.params / servers if servers else model.params
    blocks: list[tuple[str, int, float]] = []
    for index, layer in enumerate(model.layers):
        if layer.params <= 0:
            continue
        parts = math.ceil(layer.params / share - 1e-9) if layer.params > share else 1
        if parts == 1:
            blocks.append((layer.name, index, layer.params))
        else:
            blocks += [(f"{layer.name}[{j}]", index, layer.params / parts) for j in range(parts)]
    return blocks


def assign_keys(sizes: Sequence[float], servers: int) -> list[int]:
    """Server index of each key: largest first to the least-loaded server (greedy LPT).

    Ties: equal keys in their given order, equally loaded servers by lowest index.
    """
    load = [0.0] * servers
    owner = [0] * len(sizes)
    for k in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(servers), key=lambda j: (load[j], j))
        owner[k] = s
        load[s] += sizes[k]
    return owner


# --------------------------------------------------------------------------- placement


def _node_cpu(topology: Topology, node: str) -> Device | None:
    return next((d for d in topology.devices.values() if d.node == node and d.kind == "cpu"), None)


def _nodes_in_order(devices: Sequence[Device]) -> list[str]:
    nodes: list[str] = []
    for d in devices:
        if d.node is not None and d.node not in nodes:
            nodes.append(d.node)
    return nodes


def _need_nodes(topology: Topology, placement: str) -> None:
    if not any(d.node is not None for d in topology.devices.values()):
        raise ScenarioError(
            Problem(
                f"{_PS}.placement",
                f"placement {placement} needs nodes with CPUs; this cluster kind has none",
                "gpu or sharded, or server_devices naming the servers",
            )
        )


def _too_few(what: str, have: int, want: int) -> ScenarioError:
    return ScenarioError(
        Problem(f"{_PS}.servers", f"{want} servers asked but only {have} {what}", f"1 .. {have}")
    )


def place(
    spec: ParameterServerSpec, topology: Topology, workers: Sequence[Device]
) -> tuple[list[Device], list[Device]]:
    """``(workers, servers)`` for ``spec``'s placement (see the module docstring)."""
    placement, n = spec.placement, spec.servers
    if spec.server_devices is not None:
        servers = topology.select(spec.server_devices, f"{_PS}.server_devices")
        if placement == "dedicated":
            workers = _without_nodes(workers, servers)
        return list(workers), servers
    if placement == "gpu":
        if n > len(workers):
            raise _too_few("workers", len(workers), n)
        return list(workers), list(workers[:n])
    if placement == "sharded":
        return list(workers), list(workers)
    _need_nodes(topology, placement)
    if placement == "cpu":
        nodes = _nodes_in_order(workers)
        if n > len(nodes):
            raise _too_few("nodes hold workers", len(nodes), n)
        cpus = [_node_cpu(topology, node) for node in nodes[:n]]
        return list(workers), _present(cpus, placement)
    nodes = _nodes_in_order(list(topology.devices.values()))
    if n >= len(nodes):
        raise _too_few("nodes exist (one must train)", len(nodes) - 1, n)
    servers = _present([_node_cpu(topology, node) for node in nodes[-n:]], placement)
    return _without_nodes(workers, servers), servers


def _present(cpus: Sequence[Device | None], placement: str) -> list[Device]:
    if any(c is None for c in cpus):
        raise ScenarioError(
            Problem(f"{_PS}.placement", f"placement {placement}: a server node has no CPU")
        )
    return [c for c in cpus if c is not None]


def _without_nodes(workers: Sequence[Device], servers: Sequence[Device]) -> list[Device]:
    """Workers not on a server's node (nor servers themselves)."""
    nodes = {s.node for s in servers if s.node is not None}
    names = {s.name for s in servers}
    kept = [w for w in workers if w.node not in nodes and w.name not in names]
    if not kept:
        raise ScenarioError(
            Problem(
                f"{_PS}.placement",
                "dedicated servers leave no worker: every worker is on a server node",
                "fewer servers, or server_devices on nodes that do not train",
            )
        )
    return kept


# --------------------------------------------------------------------------- state
