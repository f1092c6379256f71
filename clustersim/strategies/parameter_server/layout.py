"""The layout of a parameter-server job: keys (parameter blocks), their servers, and
which devices work and serve.  See :mod:`.strategy`.

**Synthetic keys** (``key_distribution: uniform`` or ``{zipf: s}``): ``keys`` keys
``key1`` ... ``keyN``; key of rank ``i`` holds ``params x i^-s / H`` parameters
(``H = sum_j j^-s``, so the keys sum to the model) and is *accessed* with frequency
``a_i = i^-s`` (the hottest key, rank 1, always): each push and pull of it carries
``a_i`` of its values, the rows a worker's mini-batch touched, and the server updates
that many.  This is the power-law key access of sparse models that the parameter server
of Li et al. (OSDI 2014) was built for -- a worker pulls only the keys (feature weights)
its mini-batch needs -- taken as its expected value, so every key is still pushed and
pulled by every worker in every iteration and the runs stay deterministic.  A key's
traffic per push is thus ``params x i^-2s / H`` values.  ``uniform`` is ``s = 0``.
The keys lie along the parameter vector in layer order, ``key1`` first; a key is
pushed when the backward pass has produced all its gradients, i.e. after the first
layer it covers.

**Sharding** (``sharding``): ``hash`` -- key to server ``CRC-32(key name) mod servers``;
``range`` -- key ``j`` (0-based, in key order) of ``N`` to server ``floor(j x servers /
N)``, contiguous runs of equal count; ``balanced`` (default) -- greedy LPT on each key's
expected traffic (parameters x access), which on layer keys is size-balanced.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ...errors import Problem, ScenarioError
from ...model.layers import Model
from ...records import Record
from ...scenario import ParameterServerSpec, ZipfKeys
from ...topology import Device, Topology
from .pipeline import partition_blocks, partition_count

PS_KEY = "data_parallel.ps"
"""Key path of the parameter-server section (for errors)."""
_PS = PS_KEY


@dataclass(frozen=True)
class Key:
    """One parameter block: its layer, size and server; ``nbytes`` is what one push or
    pull carries (``params x access x`` bytes per value)."""

    index: int
    name: str
    layer: int
    params: float
    nbytes: float
    server: str
    access: float = 1.0
    """Share of the key's values each push, pull and update touches (1: all)."""
    update_access: float | None = None
    """Share one update changes when it differs from a push's (an embedding shard: the
    union of the round's pushes); None: ``access``."""

    @property
    def touched_params(self) -> float:
        """Parameters one push carries and one update changes (``params`` itself, int or
        float as given, when every value is touched)."""
        return self.params if self.access == 1 else self.params * self.access

    @property
    def updated_params(self) -> float:
        """Parameters one update changes: ``params x update_access``, else
        :attr:`touched_params`."""
        if self.update_access is None:
            return self.touched_params
        return self.params * self.update_access


@dataclass(frozen=True)
class Block:
    """A key before it has a server: name, layer, parameters, access frequency."""

    name: str
    layer: int
    params: float
    access: float = 1.0
    update_access: float | None = None
    """As :attr:`Key.update_access`."""
    server: int | None = None
    """The server index the key must go to (an embedding shard), whatever the sharding."""

    @property
    def triple(self) -> tuple[str, int, float]:
        """``(name, layer, params)``, the form :mod:`.pipeline` cuts."""
        return (self.name, self.layer, self.params)

    @property
    def traffic(self) -> float:
        """Expected parameters moved per push: ``params x access`` (``params`` itself
        when every value is touched)."""
        return self.params if self.access == 1 else self.params * self.access


DEFAULT_KEYS = 64
"""Synthetic keys when ``data_parallel.ps.keys`` is not given."""


def zipf_exponent(spec: ParameterServerSpec) -> float | None:
    """``s`` of synthetic keys (0 for uniform); None for layer keys."""
    dist = spec.key_distribution
    if isinstance(dist, ZipfKeys):
        return dist.zipf
    return 0.0 if dist == "uniform" else None


def zipf_sizes(total: float, count: int, s: float) -> list[float]:
    """``count`` sizes summing to ``total``, rank ``i`` (1-based) proportional to ``i^-s``."""
    weights = [i**-s for i in range(1, count + 1)]
    norm = math.fsum(weights)
    return [total * w / norm for w in weights]


def synthetic_blocks(model: Model, count: int, s: float) -> list[Block]:
    """Zipf keys ``key1`` ... ``keyN`` along the parameter vector (see the module docstring)."""
    sizes = zipf_sizes(model.params, count, s)
    ends: list[tuple[float, int]] = []
    acc = 0.0
    for index, layer in enumerate(model.layers):
        if layer.params > 0:
            acc += layer.params
            ends.append((acc, index))
    eps = 1e-9 * model.params
    blocks: list[Block] = []
    start, at = 0.0, 0
    for rank, size in enumerate(sizes, 1):
        while at < len(ends) - 1 and ends[at][0] <= start + eps:
            at += 1
        blocks.append(Block(f"key{rank}", ends[at][1], size, rank**-s))
        start += size
    return blocks


def make_blocks(spec: ParameterServerSpec, model: Model, servers: int) -> list[Block]:
    """The keys of ``spec``'s ``key_distribution``, in key order."""
    s = zipf_exponent(spec)
    if s is None:
        return [Block(name, layer, p) for name, layer, p in key_blocks(model, servers)]
    return synthetic_blocks(model, spec.keys or DEFAULT_KEYS, s)


def count_partitions(
    blocks: Sequence[Block], bytes_per_param: float, partition_bytes: float | None
) -> int:
    """How many keys :func:`partition_keys` makes (counted without making them)."""
    if partition_bytes is None:
        return len(blocks)
    return sum(
        partition_count([b.triple], bytes_per_param * b.access, partition_bytes) for b in blocks
    )


def partition_keys(
    blocks: Sequence[Block], bytes_per_param: float, partition_bytes: float | None
) -> list[Block]:
    """``blocks`` cut by :func:`.pipeline.partition_blocks` on the
    bytes one push carries (``params x access``); each partition keeps its key's access."""
    if partition_bytes is None:
        return list(blocks)
    out: list[Block] = []
    for b in blocks:
        parts = partition_blocks([b.triple], bytes_per_param * b.access, partition_bytes)
        out += [replace(b, name=name, layer=layer, params=params) for name, layer, params in parts]
    return out


def shard(blocks: Sequence[Block], servers: int, sharding: str) -> list[int]:
    """Server index of each key under ``sharding`` (see the module docstring); a key with
    its ``server`` set goes there, and the others are sharded among themselves."""
    if any(b.server is not None for b in blocks):
        free = [b for b in blocks if b.server is None]
        owners = iter(shard(free, servers, sharding))
        return [b.server if b.server is not None else next(owners) for b in blocks]
    if sharding == "hash":
        return [zlib.crc32(b.name.encode()) % servers for b in blocks]
    if sharding == "range":
        return [j * servers // len(blocks) for j in range(len(blocks))]
    return assign_keys([b.traffic for b in blocks], servers)


def server_bytes(records: Iterable[Record], servers: Sequence[str]) -> dict[str, float]:
    """Bytes pushed to and pulled from each server (its ``push`` and ``pull`` transfers)."""
    moved = dict.fromkeys(servers, 0.0)
    for r in records:
        if r.kind != "transfer":
            continue
        if r.op == "push" and r.dst in moved:
            moved[r.dst] += r.bytes
        elif r.op == "pull" and r.src in moved:
            moved[r.src] += r.bytes
    return moved


def busiest(moved: dict[str, float]) -> tuple[str, float]:
    """The server that moved the most bytes (the first of equals) and its share of all."""
    total = math.fsum(moved.values())
    name = max(moved, key=lambda s: moved[s])
    return name, moved[name] / total if total > 0 else 0.0


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
