"""Collective algorithms: the registry, and checking a call against it.

An :class:`Algorithm` subclass registers itself by defining ``name``.  It
says which operations it implements (``ops``), whether it applies to a call
on a topology (:meth:`Algorithm.unsupported`), builds the call's
:class:`~clustersim.collectives.schedule.Schedule` (flow-level mode) and
prices it in closed form (:meth:`Algorithm.cost`, analytical mode).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from ..errors import Problem, ScenarioError
from ..registry import Registered, Registry
from ..topology import Topology
from .call import CollectiveCall
from .ops import OPERATIONS
from .schedule import Schedule

if TYPE_CHECKING:
    from .fluid import FluidPhase

MEASURED_SENDS_UP_TO = 250_000
"""Sends of the largest schedule built only to measure a call's bytes
(:meth:`Algorithm.measured_call`); larger calls are measured on a smaller copy."""


BUILTIN_ALGORITHMS = (
    "auto",
    "ring",
    "direct",
    "tree",
    "halving_doubling",
    "hierarchical",
    "in_network",
    "root",
    "scatter_allgather",
)
"""Modules of :mod:`clustersim.collectives` holding the built-in algorithms (each
registers its classes on import; the registry imports them on its first lookup), in the
order ``clustersim list algorithms`` shows them: ``auto``, the default, first."""


def _algorithm_line(name: str, cls: type[Algorithm]) -> str:
    """``clustersim list algorithms``: name, description, operations."""
    ops = ", ".join(sorted(cls.ops))
    return f"{name:<20} {cls.description or (cls.__doc__ or '').splitlines()[0]} [{ops}]"


class Algorithm(Registered):
    """Base class of collective algorithms (a subclass defining ``name`` registers itself)."""

    registry: ClassVar[Registry[type[Algorithm]]] = Registry(
        "algorithms",
        "algorithm",
        describe=_algorithm_line,
        builtins=[f"clustersim.collectives.{module}" for module in BUILTIN_ALGORITHMS],
        unknown="unknown {kind} '{name}'",
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    ops: ClassVar[frozenset[str]]
    nccl_protocols: ClassVar[tuple[str, ...] | None] = None
    """The protocols ``protocol: auto`` weighs for this algorithm (None: every one)."""

    def unsupported(self, call: CollectiveCall, topology: Topology) -> str | None:
        """Why this algorithm cannot run ``call`` on ``topology``, or None if it can."""
        if call.op not in self.ops:
            return f"{self.name} does not implement {call.op}"
        return None

    def nccl_candidate(self, call: CollectiveCall, topology: Topology) -> bool:
        """Whether NCCL's tuner weighs this algorithm for ``call`` (``algorithm: auto``, among
        its candidates, :mod:`clustersim.collectives.auto`), given that it can run it."""
        return True

    def send_latency_s(
        self, call: CollectiveCall, topology: Topology, protocol: str
    ) -> float | None:
        """Seconds every send of ``call`` (its wire bytes) waits before its bytes move with
        ``protocol``, in place of its route's latency, where NCCL's latency model prices
        the algorithm as a whole (the ring's, :mod:`~clustersim.collectives.ring_latency`);
        None, the default: each send pays its route's latency and the protocol's per-hop
        latency (:class:`~clustersim.collectives.protocol.ProtocolView`)."""
        return None

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The sends of ``call`` (flow-level mode)."""
        raise NotImplementedError

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds ``call`` takes by this algorithm's alpha-beta formula (analytical mode)."""
        raise NotImplementedError

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """How many sends :meth:`schedule` gives ``call``, counted without building it: the
        work estimate of :mod:`clustersim.budget` (its pieces included, so a 1-byte chunk
        or a petabyte shows).  The built-in algorithms count exactly; this default, for
        algorithms that do not say, is one send from every rank to every other."""
        return float(call.n * (call.n - 1))

    def measured_call(self, call: CollectiveCall, topology: Topology) -> CollectiveCall:
        """``call``, or a copy of it whose schedule is small enough to build and measure:
        the size halved until :meth:`sends` is at most :data:`MEASURED_SENDS_UP_TO` (or
        stops falling, when the sends do not depend on the size).  The bytes a schedule
        sends grow linearly with the size while its pieces grow too, so measuring the copy
        and scaling by ``call.size_bytes / copy.size_bytes`` gives ``call``'s bytes without
        building a petabyte's pipeline."""
        sends = self.sends(call, topology)
        measured = call
        while sends > MEASURED_SENDS_UP_TO and measured.size_bytes > 0:
            smaller = replace(measured, size_bytes=measured.size_bytes / 2)
            fewer = self.sends(smaller, topology)
            if fewer >= sends:
                break
            measured, sends = smaller, fewer
        return measured

    def most_bytes_sent(self, call: CollectiveCall, topology: Topology) -> float:
        """Bytes the busiest sender of ``call`` sends in all (its schedule's most), measured
        on :meth:`measured_call` and scaled to ``call``'s size."""
        measured = self.measured_call(call, topology)
        sent = max(self.schedule(measured, topology).bytes_sent(), default=0.0)
        if measured is call:
            return sent
        return sent * (call.size_bytes / measured.size_bytes)

    def priced_sends(self, call: CollectiveCall, topology: Topology) -> float:
        """Sends of the schedule the analytical model builds to price ``call``: all of
        them when the algorithm relies on the default :meth:`link_flows` (which measures
        the schedule), none when it gives its own :meth:`link_flows` or :meth:`fluid_phases`."""
        kind = type(self)
        if kind.link_flows is not Algorithm.link_flows or (
            kind.fluid_phases is not Algorithm.fluid_phases
        ):
            return 0.0
        return self.sends(call, topology) if call.n > 1 else 0.0

    def link_flows(self, call: CollectiveCall, topology: Topology) -> dict[int, float]:
        """Link index -> sends of ``call`` crossing it at once (congestion-aware analytical
        mode).  By default measured on the schedule (:func:`fluid.schedule_flows`)."""
        from .fluid import schedule_flows

        if call.n < 2:
            return {}
        schedule = self.schedule(call, topology)
        return schedule_flows(schedule, call.devices, topology, call.connections)

    def fluid_phases(self, call: CollectiveCall, topology: Topology) -> list[FluidPhase]:
        """``call`` as phases of the congestion-aware analytical model
        (:mod:`clustersim.collectives.fluid`): by default one phase whose fixed part is the
        cost at zero bytes, whose bandwidth part is the rest of :meth:`cost`, over
        :meth:`link_flows`."""
        from .fluid import FluidPhase

        total = self.cost(call, topology)
        fixed = min(self.cost(replace(call, size_bytes=0.0), topology), total)
        if total <= fixed:
            return [FluidPhase(fixed, 0.0, {})]
        flows = self.link_flows(call, topology)
        alone = self.cost_rate_Bps(call, topology) if len(call.connections) > 1 else 0.0
        return [FluidPhase(fixed, total - fixed, flows, alone)]

    def cost_rate_Bps(self, call: CollectiveCall, topology: Topology) -> float:
        """The rate alone (B/s, on the real links) of ``call``'s flows with each pair on one
        route, as :meth:`cost` prices it: that of a call standing for its first connection
        only (:attr:`CollectiveCall.connections`)."""
        from .fluid import FluidPhase

        one = self.link_flows(replace(call, connections=call.connections[:1]), topology)
        plain = getattr(topology, "same_links", topology)  # the links the flow runs on
        return FluidPhase(0.0, 0.0, one).rate_alone_Bps(plain.links)

    def reduce_time(self, call: CollectiveCall, topology: Topology, nbytes: float) -> float:
        """Seconds to sum ``nbytes`` on the slowest device of the group (0 when reductions are free)."""
        if not call.reduce_cost or nbytes <= 0:
            return 0.0
        slowest = min(topology.device(d).memory_bandwidth_Bps for d in call.devices)
        return nbytes / slowest


def registered_algorithms() -> dict[str, type[Algorithm]]:
    """Every registered algorithm by name, in registration order."""
    return Algorithm.registry.entries()


def algorithm(name: str, path: str = "") -> Algorithm:
    """An instance of the algorithm called ``name``; ScenarioError if unknown."""
    return Algorithm.registry.lookup(name, path)()


def applicable_algorithms(op: str, devices: tuple[str, ...], topology: Topology) -> list[str]:
    """Names of the algorithms that can run ``op`` over ``devices`` on ``topology``."""
    out = []
    for name, cls in registered_algorithms().items():
        call = CollectiveCall(op, devices, 0.0, algorithm=name)
        if cls().unsupported(call, topology) is None:
            out.append(name)
    return out


def check_call(call: CollectiveCall, topology: Topology, path: str = "") -> Algorithm:
    """The algorithm of ``call`` once the call is checked against ``topology``."""
    if call.op not in OPERATIONS:
        raise ScenarioError(
            Problem(path, f"unknown collective operation '{call.op}'", ", ".join(OPERATIONS))
        )
    if call.n < 1:
        raise ScenarioError(Problem(path, "a collective needs at least one device"))
    if len(set(call.devices)) != call.n:
        raise ScenarioError(Problem(path, "a device appears twice in the group"))
    if not 0 <= call.root < call.n:  # non-rooted ops too: the root algorithm uses it
        raise ScenarioError(
            Problem(path, f"root {call.root} is not a rank of the group", f"0 .. {call.n - 1}")
        )
    if call.size_bytes < 0:
        raise ScenarioError(Problem(path, "size must not be negative"))
    from .protocol import check_protocol

    check_protocol(call.protocol, f"{path}.protocol" if path else "protocol")
    algo = algorithm(call.algorithm, path)
    reason = algo.unsupported(call, topology)
    if reason:
        usable = ", ".join(applicable_algorithms(call.op, call.devices, topology)) or "none"
        raise ScenarioError(Problem(path, reason, f"for {call.op} here: {usable}"))
    return algo
