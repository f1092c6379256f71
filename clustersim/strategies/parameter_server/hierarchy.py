"""Multi-level aggregation of parameter-server traffic (``data_parallel.ps.hierarchy``).

The multi-machine setup of Dive into Deep Learning, "Parameter Servers" (figure
"multi-machine multi-GPU distributed training"): the gradients of a machine's GPUs are
summed on one GPU, handed to the machine's CPU, and the CPUs push to the servers, which
aggregate; the updated parameters go back to the CPUs and on to the GPUs.  Per key and
round, for each node that holds workers (its *group*; workers in the order given):

* **Up.**  ``[gpu, cpu, server]``: every worker of the node sends its gradient (``key
  bytes``, op ``ps_gather``) to the node's first worker, the *leader* (over NVLink when the
  node has an NVSwitch, else over PCIe; its own gradient needs no transfer); the leader sums
  them -- one aggregation per gradient, ``key bytes`` over its memory bandwidth on its
  compute stream (op ``ps_local_aggregate``), as a server's -- then sends the sum to the
  node CPU (``ps_gather``), which pushes it to the key's server.  Every transfer into
  the key's server is op ``push``, every one out of it op ``pull`` (so
  ``busiest_server`` counts what its device moves as a server).  ``[gpu, server]``: the leader pushes
  the sum itself.  ``[cpu, server]``: the workers send straight to the node CPU, which
  sums them (over ``cpu.memory_bandwidth``) and pushes.  A hop whose two ends are one
  device is no transfer (e.g. a node CPU that serves the key).
* **Server.**  It aggregates one push per node (``key bytes`` each) and updates once
  when every node's push is in: a round needs one push per node.
* **Down.**  The server sends the new key to the node's top aggregator (op ``pull``),
  which passes it down the chain (op ``ps_scatter``) to the first aggregator, which sends
  it to each of the node's workers (``ps_scatter``).
* A node with a single worker has nothing to aggregate: its worker pushes and pulls as
  in the flat case, so with one GPU per node the hierarchy changes nothing.

Only ``mode: sync``; ``partition_bytes`` works as in the flat case (each partition is a
key; every connection, the intra-node ones too, carries its messages in order).
``[server]`` is the flat case.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import Problem, ScenarioError
from ...scenario import ParameterServerSpec
from ...topology import Device, Topology
from .layout import PS_KEY, Key

if TYPE_CHECKING:
    from .strategy import ParameterServer

_HIER = f"{PS_KEY}.hierarchy"


@dataclass(frozen=True)
class Group:
    """A node's workers (indices) and its aggregation chain, worker side first (empty: a
    single worker, which pushes on its own)."""

    node: str
    workers: tuple[int, ...]
    chain: tuple[str, ...]


def build_groups(
    spec: ParameterServerSpec, topology: Topology, workers: Sequence[Device]
) -> list[Group] | None:
    """The node groups of ``spec.hierarchy``; None for the flat case (unset or ``[server]``).
    Refuses modes other than sync, and workers without a node or a node without a CPU."""
    levels = spec.hierarchy
    if levels is None or levels == ["server"]:
        return None
    if spec.mode != "sync":
        raise ScenarioError(
            Problem(
                _HIER,
                f"multi-level aggregation is modelled for mode sync only, not mode {spec.mode}",
                f"mode: sync, or leave {_HIER} out",
            )
        )
    members: dict[str, list[int]] = {}
    for w, device in enumerate(workers):
        if device.node is None:
            raise ScenarioError(
                Problem(_HIER, f"worker {device.name} is on no node: nothing to aggregate in")
            )
        members.setdefault(device.node, []).append(w)
    groups = []
    for node, ws in members.items():
        if len(ws) == 1:
            groups.append(Group(node, tuple(ws), ()))
            continue
        chain = [workers[ws[0]].name] if levels[0] == "gpu" else []
        if "cpu" in levels:
            chain.append(_cpu(topology, node))
        groups.append(Group(node, tuple(ws), tuple(chain)))
    return groups


def _cpu(topology: Topology, node: str) -> str:
    cpu = next((d for d in topology.devices.values() if d.node == node and d.kind == "cpu"), None)
    if cpu is None:
        raise ScenarioError(Problem(_HIER, f"level cpu: node {node} has no CPU", "[gpu, server]"))
    return cpu.name


def transfers_per_round(groups: Sequence[Group], workers: Sequence[str], key: Key) -> int:
    """Transfers of one key in one round, up and down (hops between distinct devices)."""
    count = 0
    for g in groups:
        path = [*g.chain, key.server]
        hops = sum(a != b for a, b in zip(path, path[1:], strict=False))
        fan = sum(workers[w] != path[0] for w in g.workers)
        count += 2 * (hops + fan)
    return count


class Hierarchy:
    """The pushes, aggregations and pulls of one run (see the module docstring)."""

    def __init__(self, ps: ParameterServer, groups: list[Group]) -> None:
        self.ps = ps
        self.groups = groups
        self.group_of = {w: i for i, g in enumerate(groups) for w in g.workers}
        self.gathered = [[0] * len(ps.keys) for _ in groups]
        """Per group and key: gradients the first aggregator has summed this round."""

    def _send(self, src: str, dst: str, key: Key, then: Callable[[], None], op: str, it: int):
        if src == dst:
            then()
            return
        if op == "ps_gather" and dst == key.server:
            op = "push"
        elif op == "ps_scatter" and src == key.server:
            op = "pull"
        label = {"ps_gather": "gather", "ps_scatter": "scatter"}.get(op, op)
        self.ps.links.send(
            src, dst, key.nbytes, then, label=f"{label} {key.name}", iteration=it, op=op
        )

    # -- up ------------------------------------------------------------------

    def push(self, w: int, key: Key, it: int) -> None:
        """Worker ``w``'s gradient of ``key``: to its node's first aggregator (or the server)."""
        g = self.group_of[w]
        chain, device = self.groups[g].chain, self.ps.workers[w]
        if not chain:
            self._send(device, key.server, key, lambda: self._at_server(g, key), "ps_gather", it)
            return
        self._send(device, chain[0], key, lambda: self._gather(g, key, it), "ps_gather", it)

    def _gather(self, g: int, key: Key, it: int) -> None:
        group = self.groups[g]
        event = self.ps.sim.compute(
            group.chain[0],
            bytes=key.nbytes,
            label=f"local aggregate {key.name}",
            iteration=it,
            op="ps_local_aggregate",
        )
        self.gathered[g][key.index] += 1
        if self.gathered[g][key.index] == len(group.workers):
            self.gathered[g][key.index] = 0
            event.callbacks.append(lambda _e: self._up(g, key, it, 1))

    def _up(self, g: int, key: Key, it: int, level: int) -> None:
        """The sum is at ``chain[level - 1]``: on to the next level, or push to the server."""
        chain = self.groups[g].chain
        src = chain[level - 1]
        if level < len(chain):
            then = lambda: self._up(g, key, it, level + 1)  # noqa: E731
            self._send(src, chain[level], key, then, "ps_gather", it)
        else:
            self._send(src, key.server, key, lambda: self._at_server(g, key), "ps_gather", it)

    def _at_server(self, g: int, key: Key) -> None:
        """A node's push: aggregate it; the last node's push starts the update."""
        ps = self.ps
        st = ps.state[key.index]
        ps._accept(g, key)
        if len(st.accepted) == len(self.groups):
            event = ps._update(key, st.version)
            event.callbacks.append(lambda _e: self._close(key))

    # -- down ----------------------------------------------------------------

    def _close(self, key: Key) -> None:
        ps = self.ps
        st = ps.state[key.index]
        round_ = st.version
        st.version += 1
        st.accepted = []
        if key.index == 0:
            ps.round_samples.append(sum(ps.samples))
        for g in range(len(self.groups)):
            self._down(g, key, st.version, round_, len(self.groups[g].chain))

    def _down(self, g: int, key: Key, version: int, round_: int, level: int) -> None:
        """The new key reaches ``chain[level]`` (the server for the top level); on down."""
        group, ps = self.groups[g], self.ps
        src = key.server if level == len(group.chain) else group.chain[level]
        if level > 0:
            then = lambda: self._down(g, key, version, round_, level - 1)  # noqa: E731
            self._send(src, group.chain[level - 1], key, then, "ps_scatter", round_)
            return
        for w in group.workers:
            ps.applied[w] += 1
            arrived = lambda w=w: ps._arrived(w, key, version, round_)  # noqa: E731
            self._send(src, ps.workers[w], key, arrived, "ps_scatter", round_)
