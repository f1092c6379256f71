"""The ``failures:`` and ``recovery:`` sections resolved against a built topology, and the
failures a simulation plays.

:func:`resolve_failures` turns the globs into plain lists -- component and device names, link
indices, times in seconds -- for the engine and the goodput model, and says of each failure
whether it stops a synchronous job (:attr:`stops_job`): it does when a worker goes down, when
the strategy says the devices down hold state it cannot lose (``loses_state``: a parameter
server's keys with no live replica left), or when the failed components and links cut a
worker off the others (a spine among several does not; a node's only NIC or a rack's
top-of-rack switch does).

Components are named as in the topology: devices (``rack0/node1/gpu3``, ``rack0/node1/cpu``,
``gpu2``), nodes (``rack0/node1``: every device and switch inside it), NICs
(``rack0/node1/nic``) and the other switches (``rack0/node1/pcie``, ``rack0/tor``,
``spine0``, ``core1``).  A failed component takes down every link that touches it.
"""

from __future__ import annotations

import fnmatch
import math
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import Problem, ScenarioError
from ..scenario import RandomFailure, ScheduledLinkFailure
from .graph import Topology
from .storage import STORAGE

ComponentKind = Literal["gpu", "cpu", "storage", "node", "nic", "switch"]
_NIC = re.compile(r"(^|/)nic\d*$")
LosesState = Callable[[Sequence[str]], bool]
"""``loses_state(devices)``: whether losing ``devices`` at once stops the job (a strategy's
:meth:`~clustersim.strategies.base.Strategy.loses_state`)."""


@dataclass(frozen=True)
class Component:
    """One thing that can fail: its name, kind, the devices and the links it takes down."""

    name: str
    kind: ComponentKind
    devices: tuple[str, ...]
    """Devices that go down with it (itself for a device, every device of a node)."""
    links: tuple[int, ...]
    """Indices of the links that go down with it (every link touching it or its devices)."""


@dataclass(frozen=True)
class ScheduledComponentFailure:
    """``{devices: GLOB, at, repair}`` resolved: what fails at ``at_s`` for ``repair_s``."""

    path: str
    """Key path of the entry (``failures[0]``)."""
    components: tuple[str, ...]
    devices: tuple[str, ...]
    """Devices down (GPUs, CPUs, the storage), build order."""
    links: tuple[int, ...]
    """Indices of the links down, ascending."""
    at_s: float
    repair_s: float
    """Seconds down; ``inf``: never repaired."""
    stops_job: bool


@dataclass(frozen=True)
class ScheduledLinkFailureResolved:
    """``{links: GLOB, at, repair}`` resolved."""

    path: str
    links: tuple[int, ...]
    """Indices of the links down, ascending."""
    at_s: float
    repair_s: float
    stops_job: bool


@dataclass(frozen=True)
class RandomFailureProcess:
    """``{devices: GLOB, mtbf, ...}`` resolved: ``components`` units failing independently.

    The fields ``cause, components, mtbf_s, distribution, shape, stops_job, repair_s`` are
    those of :class:`clustersim.goodput.FailureProcess` (``components`` a count); one entry
    whose components partly stop the job gives two processes, one of each.
    """

    cause: str
    """Key path of the entry, and the pattern (``failures[2] (*/gpu*)``)."""
    components: int
    mtbf_s: float
    """Mean time between failures of one component, seconds."""
    distribution: Literal["exponential", "weibull"]
    shape: float
    """Weibull shape k (1.0 for the exponential)."""
    stops_job: bool
    repair_s: float
    seed: int
    names: tuple[str, ...]
    """The components, build order."""


@dataclass(frozen=True)
class ResolvedFailures:
    """Every failure of a scenario, resolved, and how the job recovers."""

    scheduled_devices: tuple[ScheduledComponentFailure, ...]
    scheduled_links: tuple[ScheduledLinkFailureResolved, ...]
    random: tuple[RandomFailureProcess, ...]
    restart_s: float
    """``recovery.restart_time``: seconds from a stopping failure to training again."""
    elastic: bool
    """``recovery.elastic``: go on without failed workers where the strategy allows it."""


def resolve_failures(
    scenario: Any,
    topology: Topology,
    workers: Iterable[str] | None = None,
    loses_state: LosesState | None = None,
) -> ResolvedFailures:
    """``scenario.failures`` and ``scenario.recovery`` resolved against ``topology``.

    ``workers``: the job's devices (default: every GPU, or every device but the storage if
    there is no GPU).  ``loses_state(devices)``: whether losing those devices at once stops
    the job even when no worker is among them (the strategy's ``loses_state``; default:
    never).  A glob matching nothing is a ScenarioError naming the scenario's file
    and the key path (``failures[1].devices``).
    """
    try:
        return _resolve(scenario, topology, workers, loses_state)
    except ScenarioError as exc:
        raise exc.with_source(exc.source or scenario.source) from None


def _resolve(
    scenario: Any,
    topology: Topology,
    workers: Iterable[str] | None,
    loses_state: LosesState | None,
) -> ResolvedFailures:
    table = _Components(topology)
    job = _Job(topology, workers, loses_state)
    devices, links, random = [], [], []
    for i, entry in enumerate(scenario.failures):
        path = f"failures[{i}]"
        if isinstance(entry, ScheduledLinkFailure):
            found = topology.select_links(entry.links, f"{path}.links")
            down = tuple(link.index for link in found)
            stops = job.stopped_by((), down)
            links.append(
                ScheduledLinkFailureResolved(path, down, entry.at_s, entry.repair_s, stops)
            )
            continue
        parts = table.select(entry.devices, f"{path}.devices")
        if isinstance(entry, RandomFailure):
            random.extend(_processes(scenario, i, entry, parts, job))
            continue
        gone = _union(p.devices for p in parts)
        down = tuple(sorted(set(_union(p.links for p in parts))))
        devices.append(
            ScheduledComponentFailure(
                path,
                tuple(p.name for p in parts),
                gone,
                down,
                entry.at_s,
                entry.repair_s,
                job.stopped_by(gone, down),
            )
        )
    recovery = scenario.recovery
    restart_s = 600.0 if recovery is None else recovery.restart_time_s
    elastic = False if recovery is None else recovery.elastic
    return ResolvedFailures(tuple(devices), tuple(links), tuple(random), restart_s, elastic)


def _processes(
    scenario: Any, i: int, entry: RandomFailure, parts: list[Component], job: _Job
) -> list[RandomFailureProcess]:
    """One process of the components that stop the job, one of those that do not."""
    seed = entry.seed
    if seed is None:
        seed = zlib.crc32(f"{scenario.seed}/failures[{i}]".encode())
    stopping = [p for p in parts if job.stopped_by(p.devices, p.links)]
    others = [p for p in parts if p not in stopping]
    shape = entry.shape if entry.shape is not None else 1.0
    found = []
    for group, stops in ((stopping, True), (others, False)):
        if group:
            found.append(
                RandomFailureProcess(
                    f"failures[{i}] ({entry.devices})",
                    len(group),
                    entry.mtbf_s,
                    entry.distribution,
                    shape,
                    stops,
                    entry.repair_s,
                    seed if stops or not stopping else (seed + 1) % 2**32,
                    tuple(p.name for p in group),
                )
            )
    return found


def _union(groups: Iterable[Sequence[Any]]) -> tuple[Any, ...]:
    """The items of ``groups`` in order, each once."""
    return tuple(dict.fromkeys(x for group in groups for x in group))


class _Components:
    """Every component of a topology by name: devices, nodes, then switches."""

    def __init__(self, topology: Topology) -> None:
        touching: dict[str, list[int]] = {}
        for link in topology.links:
            touching.setdefault(link.src, []).append(link.index)
            touching.setdefault(link.dst, []).append(link.index)
        self.components: dict[str, Component] = {}
        nodes: dict[str, list[str]] = {}
        for d in topology.devices.values():
            self.components[d.name] = Component(
                d.name, d.kind, (d.name,), tuple(touching.get(d.name, ()))
            )
            if d.node:
                nodes.setdefault(d.node, []).append(d.name)
        inside: dict[str, list[str]] = {node: [] for node in nodes}
        for s in topology.switches:
            node = s.rpartition("/")[0]
            if node in inside:
                inside[node].append(s)
        for node, members in nodes.items():
            names = members + inside[node]
            down = sorted({i for name in names for i in touching.get(name, ())})
            self.components[node] = Component(node, "node", tuple(members), tuple(down))
        for s in topology.switches:
            kind: ComponentKind = "nic" if _NIC.search(s) else "switch"
            self.components[s] = Component(s, kind, (), tuple(touching.get(s, ())))

    def select(self, glob: str, path: str) -> list[Component]:
        """The components whose name matches ``glob`` (devices, nodes, switches)."""
        try:
            match = re.compile(fnmatch.translate(glob), re.DOTALL).match
        except (re.error, RecursionError, OverflowError) as exc:
            message = f"cannot read the pattern {glob[:60]!r}: {exc}"
            allowed = "shell-style globs: * ? [seq] [!seq]"
            raise ScenarioError(Problem(path, message, allowed)) from None
        found = [c for name, c in self.components.items() if match(name)]
        if not found:
            examples = ", ".join(list(self.components)[:1] + [n for n in self._kinds()])
            raise ScenarioError(
                Problem(
                    path,
                    f"no device, node or switch matches {glob!r}",
                    f"globs over component names, e.g. {examples}",
                )
            )
        return found

    def _kinds(self) -> list[str]:
        """One name of each kind but the first, for messages."""
        seen: dict[str, str] = {}
        for name, c in self.components.items():
            seen.setdefault(c.kind, name)
        return list(seen.values())[1:]


class _Job:
    """The job's workers, and whether a set of failed devices and links stops it."""

    def __init__(
        self,
        topology: Topology,
        workers: Iterable[str] | None,
        loses_state: LosesState | None = None,
    ) -> None:
        self.topology = topology
        self.loses_state = loses_state
        if workers is None:
            all_devices = [d for d in topology.devices.values() if d.name != STORAGE]
            gpus = [d.name for d in all_devices if d.kind == "gpu"]
            workers = gpus or [d.name for d in all_devices]
        self.workers = list(dict.fromkeys(workers))
        self.worker_set = set(self.workers)

    def stopped_by(self, devices: Sequence[str], links: Sequence[int]) -> bool:
        """A worker is down, the strategy loses state it cannot rebuild, or some worker cannot
        reach (or be reached by) the first one."""
        if self.worker_set.intersection(devices):
            return True
        if devices and self.loses_state is not None and self.loses_state(devices):
            return True
        if not links or len(self.workers) < 2:
            return False
        cut = set(links)
        dead = set(devices)
        alive = [link for link in self.topology.links if link.index not in cut]
        start = self.workers[0]
        forward = _reach(start, alive, dead, forward=True)
        backward = _reach(start, alive, dead, forward=False)
        return not all(w in forward and w in backward for w in self.workers)


def _reach(start: str, links: list[Any], dead: set[str], forward: bool) -> set[str]:
    """Names reachable from ``start`` along (or against) ``links``, not through ``dead``."""
    edges: dict[str, list[str]] = {}
    for link in links:
        a, b = (link.src, link.dst) if forward else (link.dst, link.src)
        edges.setdefault(a, []).append(b)
    seen = {start}
    queue = deque((start,))
    while queue:
        for v in edges.get(queue.popleft(), ()):
            if v not in seen and v not in dead:
                seen.add(v)
                queue.append(v)
    return seen


def stops_in_simulation(failure: Any) -> bool:
    """Whether a scheduled failure is left to the goodput model (it stops the job: a
    worker's device, or a cut with no repair) instead of being played by the simulation."""
    if getattr(failure, "devices", ()):
        return bool(failure.stops_job)
    return bool(failure.stops_job) and math.isinf(failure.repair_s)


def played_device_failures(failures: ResolvedFailures | None) -> list[Any]:
    """The scheduled device failures the simulation plays (those that do not stop the job),
    for the strategy's ``take_failures``."""
    if failures is None:
        return []
    return [f for f in failures.scheduled_devices if not stops_in_simulation(f)]


def played_link_failures(failures: ResolvedFailures | None) -> list[Any]:
    """The scheduled failures whose links the simulation takes down: link failures and NIC
    or switch failures, unless they cut a worker off for good."""
    if failures is None:
        return []
    return [
        failure
        for failure in (*failures.scheduled_links, *failures.scheduled_devices)
        if failure.links and not stops_in_simulation(failure)
    ]


def play_link_failures(sim: Any, failures: ResolvedFailures | None) -> None:
    """Take down, in ``sim``, the links of every failure :func:`played_link_failures`."""
    for failure in played_link_failures(failures):
        repair = failure.at_s + failure.repair_s
        sim.fail_links(failure.links, failure.at_s, None if math.isinf(repair) else repair)
