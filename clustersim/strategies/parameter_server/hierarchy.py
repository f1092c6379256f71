"""Multi-level aggregation of parameter-server traffic (``data_parallel.ps.hierarchy``).

The multi-machine setup of Dive into Deep Learning, "Parameter Servers" (figure
"multi-machine multi-GPU distributed training"): the gradients of a machine's GPUs are
summed on the machine, handed to its CPU, and the CPUs push to the servers; the updated
parameters go back down.  The chapter's fastest way to sum on one machine splits the
gradient into one part per GPU and sums each part on its own GPU "since the PCIe bus
allows for full bandwidth operation between all cards" (15 ms instead of 60 ms for 160 MB
on 4 GPUs at 16 GB/s); BytePS (Jiang et al., OSDI 2020, section 4.2.1, "CPU-assisted
aggregation") does the same on PCIe-only 8-GPU machines: a reduce-scatter among the GPUs
of each PCIe switch, each GPU copies its summed part to host memory (so the switch's link
to the CPU carries the model once, ``M``, not the ``7M/4`` of an 8-GPU ring all-reduce),
the CPU sums the switches' parts, networking, then the reverse: copy down, all-gather.
That is what is modelled: the node-local step is a collective over every GPU's link, not
a fan-in onto one GPU's link.  Per key and round, for each node that holds workers (its
*group*; workers in the order given):

* **Up, ``[gpu, cpu, server]``** (BytePS's CPU-assisted aggregation).  When every worker
  of a *switch group* (the node's workers that reach each other without crossing the
  node's PCIe root: one PCIe switch, or an NVLink domain) has the key's gradient, the
  group runs a ring reduce-scatter of ``S = key bytes`` (op ``ps_reducescatter`` on its
  ``collective`` records; played by :func:`clustersim.collectives.run_collective`, one
  communicator per switch group and direction, so a node's keys run in order, as NCCL
  runs them); then each of its ``l`` GPUs sends its summed ``S / l`` shard to the node CPU
  (op ``ps_gather``).  With several switch groups the CPU sums their partial sums (``S``
  bytes each over ``cpu.memory_bandwidth``, op ``ps_local_aggregate``), then pushes
  ``S`` to the key's server (op ``push``).
* **Up, ``[gpu, server]``** (no CPU).  One reduce-scatter over all the node's workers;
  each GPU pushes its ``S / g`` shard to the key's server itself (op ``push``), so every
  GPU's route out of the node -- its PCIe link, its NIC with ``nics`` > 1 -- carries a
  shard.  The node's push is in when its ``g`` shards are.
* **Up, ``[cpu, server]``** (unchanged).  Every worker sends its whole gradient to the
  node CPU (``ps_gather``), which sums each one (``ps_local_aggregate``) and pushes.
* **Server.**  It aggregates one push per node (``key bytes`` each) and updates once
  when every node's push is in: a round needs one push per node.  Every transfer into
  the key's server is op ``push``, every one out of it op ``pull`` (so
  ``busiest_server`` counts what its device moves as a server).
* **Down**, the reverse: the server sends the new key to the node CPU (``pull``), which
  sends each GPU its shard (``ps_scatter``), and each switch group all-gathers it (op
  ``ps_allgather``); without a CPU level the server sends each GPU its shard (``pull``)
  before the all-gather; ``[cpu, server]``: the CPU sends each worker the whole key.
* A hop whose two ends are one device is no transfer (e.g. a node CPU that serves the
  key, or a GPU server's own shard).  A switch group of one GPU has nothing to
  reduce-scatter: its GPU sends the whole key.  A node with a single worker has nothing
  to aggregate: its worker pushes and pulls as in the flat case, so with one GPU per node
  the hierarchy changes nothing.

**Cost** (alpha-beta, an idle network; ``P`` the PCIe link bandwidth, ``a_p`` a GPU-GPU
route's latency, ``B`` the bottleneck of a route out of the node, ``N`` nodes pushing to
one server): one switch group of ``g`` GPUs, ``[gpu, server]``, up then down:
``2 [(g - 1)(a_p + S / (g P)) + N S / B]`` (plus the routes' latencies): the ring's
``g - 1`` steps of ``S / g``, then the node's shards, ``S`` in all, through its uplink
and ``N`` nodes' into the server's.  ``[gpu, cpu, server]`` adds ``S / P`` each way (the
shards, ``S`` in all, over the CPU's link).  The flat push is ``2 N g S / B``.  The
reduce-scatter and all-gather are NCCL's, priced as every collective of the run
(``network.model``, ``channels``, ``protocol``: with the default ``protocol: auto`` at
the bandwidth NCCL reaches on PCIe or NVLink, :mod:`clustersim.collectives.bus`; the
formula is for ``protocol: none``); their sums are free (summed inside the kernel as it
streams, as the collective library prices NCCL's); the CPU's sum of several switch
groups and the server's are not.
Without ``partition_bytes`` a key's stages run one after the other; with it each
partition is a key of its own, so the reduce-scatter of one overlaps the copies and
pushes of the ones before (BytePS's pipeline).

Only ``mode: sync``; ``partition_bytes`` works as in the flat case (each partition is a
key; every connection, the intra-node ones too, carries its messages in order).
``[server]`` is the flat case.  Units: bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from ...collectives import CollectiveCall, run_collective
from ...errors import Problem, ScenarioError
from ...scenario import ParameterServerSpec
from ...topology import Device, Topology
from .layout import PS_KEY, Key

if TYPE_CHECKING:
    from .strategy import ParameterServer

_HIER = f"{PS_KEY}.hierarchy"


@dataclass(frozen=True)
class Group:
    """A node's workers (indices), the levels above its GPUs (the node CPU, or none) and,
    when its GPUs reduce-scatter (level ``gpu``), their switch groups; a single worker
    has neither and pushes on its own."""

    node: str
    workers: tuple[int, ...]
    chain: tuple[str, ...]
    switches: tuple[tuple[int, ...], ...] = ()
    """Workers that reduce-scatter together (empty: no collective, ``[cpu, server]``)."""

    @property
    def collective(self) -> bool:
        """True when the node's GPUs reduce-scatter and all-gather (level ``gpu``)."""
        return bool(self.switches)


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
        chain = (_cpu(topology, node),) if "cpu" in levels else ()
        switches: tuple[tuple[int, ...], ...] = ()
        if levels[0] == "gpu":
            names = [workers[w].name for w in ws]
            switches = switch_groups(topology, ws, names) if chain else (tuple(ws),)
        groups.append(Group(node, tuple(ws), chain, switches))
    return groups


def switch_groups(
    topology: Topology, workers: Sequence[int], names: Sequence[str]
) -> tuple[tuple[int, ...], ...]:
    """``workers`` (device ``names``) in groups that reach each other in at most two links
    (over one PCIe switch or NVSwitch, or an NVLink pair), without the node's PCIe root:
    BytePS's reduce-scatter groups (``BYTEPS_PCIE_SWITCH_SIZE``), in worker order."""
    groups: list[list[int]] = []
    heads: list[str] = []
    for w, name in zip(workers, names, strict=True):
        for group, head in zip(groups, heads, strict=True):
            if len(topology.first_route(head, name).links) <= 2:
                group.append(w)
                break
        else:
            groups.append([w])
            heads.append(name)
    return tuple(tuple(g) for g in groups)


def _cpu(topology: Topology, node: str) -> str:
    cpu = next((d for d in topology.devices.values() if d.node == node and d.kind == "cpu"), None)
    if cpu is None:
        raise ScenarioError(Problem(_HIER, f"level cpu: node {node} has no CPU", "[gpu, server]"))
    return cpu.name


def collective_rows_per_round(groups: Sequence[Group]) -> int:
    """``collective`` records of one key in one round: a reduce-scatter and an all-gather
    row per GPU of every switch group of more than one GPU."""
    return sum(2 * len(s) for g in groups for s in g.switches if len(s) > 1)


def transfers_per_round(groups: Sequence[Group], workers: Sequence[str], key: Key) -> int:
    """Transfers of one key in one round, up and down (hops between distinct devices, and
    the sends of the reduce-scatters and all-gathers)."""
    count = 0
    for g in groups:
        path = [*g.chain, key.server]
        hops = sum(a != b for a, b in zip(path, path[1:], strict=False))
        fan = sum(workers[w] != path[0] for w in g.workers)
        ring = sum(len(s) * (len(s) - 1) for s in g.switches)  # ring steps x ranks
        count += 2 * (hops + fan + ring)
    return count


class Hierarchy:
    """The pushes, aggregations and pulls of one run (see the module docstring)."""

    def __init__(self, ps: ParameterServer, groups: list[Group]) -> None:
        self.ps = ps
        self.groups = groups
        self.group_of = {w: i for i, g in enumerate(groups) for w in g.workers}
        self.switch_of = {w: s for g in groups for s in g.switches for w in s}
        self.gathered = [[0] * len(ps.keys) for _ in groups]
        """Per group and key: gradients (or shards) its first level has this round."""
        self.ready: dict[tuple[int, ...], list[int]] = {
            s: [0] * len(ps.keys) for g in groups for s in g.switches
        }
        """Per switch group and key: its workers whose gradient is ready this round."""
        self.network = ps.scenario.network
        """How the node's collectives are priced: ``network.model``, ``channels``,
        ``protocol``, as every NCCL collective of a run."""

    def _send(
        self,
        src: str,
        dst: str,
        key: Key,
        then: Callable[[], None],
        op: str,
        it: int,
        nbytes: float | None = None,
    ) -> None:
        """Send ``nbytes`` (default: the key's) of ``key``; op push/pull at the server."""
        if src == dst:
            then()
            return
        if op == "ps_gather" and dst == key.server:
            op = "push"
        elif op == "ps_scatter" and src == key.server:
            op = "pull"
        label = {"ps_gather": "gather", "ps_scatter": "scatter"}.get(op, op)
        size = key.nbytes if nbytes is None else nbytes
        self.ps.links.send(src, dst, size, then, label=f"{label} {key.name}", iteration=it, op=op)

    def _collective(
        self, op: str, switch: tuple[int, ...], key: Key, it: int, then: Callable[[], None]
    ) -> None:
        """Run ``op`` (reducescatter or allgather of the key's bytes) among ``switch``'s
        workers, then ``then()``; one communicator per switch group and op."""
        devices = tuple(self.ps.workers[w] for w in switch)
        network = self.network
        event = run_collective(
            self.ps.sim,
            CollectiveCall(op, devices, key.nbytes, protocol=network.protocol),
            model=network.model,
            label=f"{op} {key.name}",
            iteration=it,
            channels=network.channels,
            group=(f"ps_{op}", devices),
            op=f"ps_{op}",
        )
        event.callbacks.append(lambda _e: then())

    # -- up ------------------------------------------------------------------

    def push(self, w: int, key: Key, it: int) -> None:
        """Worker ``w``'s gradient of ``key`` is ready: on to its node's first level."""
        g = self.group_of[w]
        group, device = self.groups[g], self.ps.workers[w]
        if group.collective:
            self._ready(g, self.switch_of[w], key, it)
        elif not group.chain:
            self._send(device, key.server, key, lambda: self._at_server(g, key), "ps_gather", it)
        else:
            then = lambda: self._gather(g, key, it, key.nbytes)  # noqa: E731
            self._send(device, group.chain[0], key, then, "ps_gather", it)

    def _ready(self, g: int, switch: tuple[int, ...], key: Key, it: int) -> None:
        """One more of ``switch``'s gradients; with the last, reduce-scatter and send shards."""
        counts = self.ready[switch]
        counts[key.index] += 1
        if counts[key.index] < len(switch):
            return
        counts[key.index] = 0
        if len(switch) == 1:
            self._shards(g, switch, key, it)
        else:
            self._collective(
                "reducescatter", switch, key, it, lambda: self._shards(g, switch, key, it)
            )

    def _shards(self, g: int, switch: tuple[int, ...], key: Key, it: int) -> None:
        """Each GPU of ``switch`` sends its summed shard up (to the CPU, or the server)."""
        group = self.groups[g]
        shard = key.nbytes / len(switch)
        up = group.chain[0] if group.chain else key.server
        for w in switch:
            if group.chain:
                then = lambda: self._gather(g, key, it, 0.0)  # noqa: E731
            else:
                then = lambda: self._shard_in(g, key)  # noqa: E731
            self._send(self.ps.workers[w], up, key, then, "ps_gather", it, shard)

    def _shard_in(self, g: int, key: Key) -> None:
        """A shard of node ``g`` reached the server: the last one is the node's push."""
        self.gathered[g][key.index] += 1
        if self.gathered[g][key.index] == len(self.groups[g].workers):
            self.gathered[g][key.index] = 0
            self._at_server(g, key)

    def _gather(self, g: int, key: Key, it: int, sums: float) -> None:
        """A gradient (``[cpu, server]``: summed, ``sums`` bytes) or a shard reached the
        node CPU; after the last (and its sum) the CPU pushes the node's sum."""
        group = self.groups[g]
        cpu = group.chain[0]
        event = self._aggregate(cpu, key, it, sums) if sums > 0 else None
        self.gathered[g][key.index] += 1
        if self.gathered[g][key.index] < len(group.workers):
            return
        self.gathered[g][key.index] = 0
        parts = len(group.switches)
        if parts > 1:  # BytePS's CPU-reduce of the switch groups' partial sums
            event = self._aggregate(cpu, key, it, parts * key.nbytes)
        if event is None:
            self._up(g, key, it)
        else:  # the CPU's compute stream is FIFO: this sum ends after the earlier ones
            event.callbacks.append(lambda _e: self._up(g, key, it))

    def _aggregate(self, device: str, key: Key, it: int, nbytes: float) -> simpy.Event:
        """Sum ``nbytes`` on ``device`` (over its memory bandwidth, on its compute stream)."""
        return self.ps.sim.compute(
            device,
            bytes=nbytes,
            label=f"local aggregate {key.name}",
            iteration=it,
            op="ps_local_aggregate",
        )

    def _up(self, g: int, key: Key, it: int) -> None:
        """The node's sum is at its CPU: push it to the server."""
        cpu = self.groups[g].chain[0]
        self._send(cpu, key.server, key, lambda: self._at_server(g, key), "ps_gather", it)

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
            self._down(g, key, st.version, round_)

    def _down(self, g: int, key: Key, version: int, round_: int) -> None:
        """The new key goes from the server to node ``g``'s CPU, if any, then on down."""
        group = self.groups[g]
        if not group.chain:
            self._fan(g, key, version, round_, key.server)
            return
        then = lambda: self._fan(g, key, version, round_, group.chain[0])  # noqa: E731
        self._send(key.server, group.chain[0], key, then, "ps_scatter", round_)

    def _fan(self, g: int, key: Key, version: int, round_: int, src: str) -> None:
        """From ``src`` (the CPU or the server): each worker's shard, or the whole key."""
        group, ps = self.groups[g], self.ps
        if not group.collective:
            for w in group.workers:
                self._send(
                    src,
                    ps.workers[w],
                    key,
                    self._arrive(w, key, version, round_),
                    "ps_scatter",
                    round_,
                )
            return
        for switch in group.switches:
            left = [len(switch)]
            gathered = self._gathered(switch, key, version, round_)

            def shard_in(left: list[int] = left, gathered: Callable[[], None] = gathered) -> None:
                left[0] -= 1
                if left[0] == 0:
                    gathered()

            for w in switch:
                self._send(
                    src,
                    ps.workers[w],
                    key,
                    shard_in,
                    "ps_scatter",
                    round_,
                    key.nbytes / len(switch),
                )

    def _gathered(
        self, switch: tuple[int, ...], key: Key, version: int, round_: int
    ) -> Callable[[], None]:
        """What to do when ``switch``'s shards are in: all-gather (if more than one GPU),
        then the key is in at each of its workers."""

        def done() -> None:
            for w in switch:
                self._arrive(w, key, version, round_)()

        if len(switch) == 1:
            return done
        return lambda: self._collective("allgather", switch, key, round_, done)

    def _arrive(self, w: int, key: Key, version: int, round_: int) -> Callable[[], None]:
        """``arrived()``: the new ``key`` is whole at worker ``w`` (its pull of the round)."""
        ps = self.ps

        def arrived() -> None:
            ps.applied[w] += 1
            ps._arrived(w, key, version, round_)

        return arrived
