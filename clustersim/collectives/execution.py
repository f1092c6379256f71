"""Playing a collective's :class:`~clustersim.collectives.schedule.Schedule` on the engine.

:func:`execute` plays a schedule on the simulated network with callbacks only -- no SimPy
process per send -- so a ring all-reduce over 1,024 GPUs (2.1 million sends) stays cheap
per send: each send starts when the sends it depends on have arrived (and their reduction
at the receiver is done), takes its pair's route or its own (:class:`~.schedule.Via`), and
is recorded as a transfer, or the whole call as one ``collective`` row per rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import simpy

from ..network.split import SplitSend
from . import ring_replay
from .connections import pair_route
from .schedule import Schedule, Via

if TYPE_CHECKING:
    from ..engine import Simulation

_INF = float("inf")

RECORD_TRANSFERS_UP_TO = 20_000
"""Schedules with at most this many sends record each transfer in the timeline by
default; larger ones record one ``collective`` row per rank."""

STEP_OPS = tuple(f"step{k}" for k in range(1024))
"""The ``op`` of a recorded send of step k, made once (formatting it per send cost 2% of a
run of small collectives); later steps are formatted as they come."""


class _Execution:
    """One run of a schedule on a simulation (see :func:`execute`).

    The per-send methods are the hot path of big collectives: they keep to
    local variables and list indexing.
    """

    __slots__ = (
        "sim",
        "env",
        "devices",
        "s",
        "label",
        "reduce_cost",
        "record_transfers",
        "iteration",
        "remaining",
        "left",
        "done",
        "first",
        "last",
        "n",
        "network",
        "routes",
        "connection",
        "_arrived",
        "stream",
        "ended",
        "ready",
        "streaming",
        "topology",
        "op",
    )

    def __init__(
        self,
        sim: Simulation,
        devices: Sequence[str],
        schedule: Schedule,
        label: str,
        reduce_cost: bool,
        record_transfers: bool,
        iteration: int,
        connection: int = 0,
        topology: Any = None,
        op: str = "",
    ) -> None:
        self.sim = sim
        self.op = op
        """The ``op`` of its ``collective`` records."""
        self.topology = sim.topology if topology is None else topology
        """Where routes come from: the simulation's topology, or a view of it (a protocol's)."""
        self.env = sim.env
        self.devices = devices
        self.s = schedule
        self.label = label
        self.reduce_cost = reduce_cost
        self.record_transfers = record_transfers
        self.iteration = iteration
        self.remaining = list(schedule.n_deps)
        self.left = len(schedule)
        self.done = sim.env.event()
        n = len(devices)
        self.first = [float("inf")] * n
        """Per rank: when its first send (to or from it) started, s."""
        self.last = [float("-inf")] * n
        """Per rank: when its last send (to or from it) completed, s."""
        self.n = n
        self.network = sim.network
        self.routes: dict[int, Any] = {}
        """Route per (src rank, dst rank) pair; False where sends split over several."""
        self.connection = connection
        """Which of a pair's connections the sends use (a channel): picks the ECMP route."""
        plain = not record_transfers and not reduce_cost
        self._arrived = self._complete_flow if plain else self.arrived
        self.stream = schedule.stream
        """Per send, its predecessor on its connection (see :meth:`Schedule.send`), or None."""
        self.ended: list[float] = [] if self.stream is None else [-1.0] * len(schedule)
        """Per send, when it completed (s); kept only for schedules with streams."""
        self.ready: list[float] = [] if self.stream is None else [-_INF] * len(schedule)
        """Per send, when its last dependency other than its stream predecessor completed (s):
        when its data was there."""
        self.streaming: dict[int, Any] = {}
        """Route per pair for a stream that continues without a gap: no latency."""

    def start(self, i: int) -> None:
        s = self.s
        src = s.src[i]
        dst = s.dst[i]
        now = self.env._now
        first = self.first
        if now < first[src]:
            first[src] = now
        if now < first[dst]:
            first[dst] = now
        key = src * self.n + dst
        route = self.routes.get(key)
        if route is None:
            route = self.routes[key] = self._route(self.devices[src], self.devices[dst])
        stream = self.stream
        if stream is not None and route is not False:
            prior = stream[i]
            if prior >= 0 and self.ended[prior] == now and self.ready[i] <= now - route.latency_s:
                route = self._streaming(key, route)
        if route is False:  # several equal-cost routes (the view's), split evenly over them
            routes = self.topology.routes(self.devices[src], self.devices[dst])
            SplitSend(self.sim.network, routes, s.nbytes[i], self._arrived, i)
        else:
            self.network.transfer(route, s.nbytes[i], self._arrived, i)

    def _streaming(self, key: int, route: Any) -> Any:
        """``route`` without its latency: the next piece of a stream that did not go idle."""
        quick = self.streaming.get(key)
        if quick is None:
            quick = self.streaming[key] = replace(route, latency_s=0.0)
        return quick

    def _route(self, src: str, dst: str) -> Any:
        """:func:`pair_route` of ``src`` and ``dst`` on this run's topology and connection."""
        return pair_route(self.topology, src, dst, self.connection)

    def arrived(self, flow: Any) -> None:
        """A send's last byte arrived: record it, reduce if that costs time, then complete."""
        i = flow.tag
        if self.record_transfers:
            self._record_transfer(i, flow.start_s)
        if self.reduce_cost and self.s.reduce_bytes[i] > 0.0:
            s = self.s
            nbytes = s.reduce_bytes[i]
            dst = self.devices[s.dst[i]]
            event = self.sim.compute(
                dst, bytes=nbytes, label=f"{self.label} reduce", iteration=self.iteration
            )
            event.callbacks.append(lambda _e, i=i: self.complete(i))
        else:
            self.complete(i)

    def _complete_flow(self, flow: Any) -> None:
        """:meth:`arrived` when there is nothing to record or reduce."""
        self.complete(flow.tag)

    def _record_transfer(
        self,
        i: int,
        start_s: float,
        ends: tuple[str, str] | None = None,
        end_s: float | None = None,
    ) -> None:
        """Book send ``i``'s ``transfer`` record, from ``start_s`` to ``end_s`` (default: now);
        ``ends``: the names of where it starts and ends when they are not its ranks' devices."""
        s = self.s
        devices = self.devices
        sender = devices[s.src[i]]
        src, dst = (sender, devices[s.dst[i]]) if ends is None else ends
        step = s.step[i]
        if 0 <= step < len(STEP_OPS):
            op = STEP_OPS[step]
        else:
            op = f"step{step}" if step >= 0 else ""
        self.sim.book(
            sender,
            "transfer",
            self.label,
            start_s,
            self.env._now if end_s is None else end_s,
            s.nbytes[i],
            0.0,
            src,
            dst,
            self.iteration,
            -1,
            -1,
            op,
            "communication",
        )

    def complete(self, i: int) -> None:
        """Send ``i`` is done (reduction included): start the sends waiting only for it."""
        s = self.s
        now = self.env._now
        stream = self.stream
        if stream is not None:
            self.ended[i] = now
        last = self.last
        last[s.src[i]] = now  # time only moves forward: now is the latest
        last[s.dst[i]] = now
        rule = s.child_rule
        kids = s.children[i] if rule is None else rule(i)
        if kids:
            remaining = self.remaining
            for k in kids:
                if stream is not None and stream[k] != i:
                    self.ready[k] = now
                left = remaining[k] - 1
                remaining[k] = left
                if left == 0:
                    self.start(k)
        self.left -= 1
        if self.left == 0:
            self.finish()

    def finish(self) -> None:
        book = self.sim.book
        for rank, device in enumerate(self.devices):
            if self.last[rank] == float("-inf"):
                continue  # a rank with nothing to send or receive
            book(
                device,
                "collective",
                self.label,
                self.first[rank],
                self.last[rank],
                0.0,
                0.0,
                device,
                device,
                self.iteration,
                op=self.op,
                phase="communication",
            )
        self.done.succeed(self.env.now)


class _RoutedExecution(_Execution):
    """:class:`_Execution` of a schedule with sends on their own routes
    (:meth:`Schedule.send_on`): those take their route, which may start or end at a
    switch; the other sends run as in the base class (whose hot path stays untouched)."""

    __slots__ = ("vias",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vias: dict[int, Via] = self.s.routes or {}

    def start(self, i: int) -> None:
        via = self.vias.get(i)
        if via is None:
            _Execution.start(self, i)
            return
        s = self.s
        now = self.env._now
        first = self.first
        for rank in (s.src[i], s.dst[i]):
            if now < first[rank]:
                first[rank] = now
        self.network.transfer(via.route, s.nbytes[i], self._arrived, i)

    def _record_transfer(
        self,
        i: int,
        start_s: float,
        ends: tuple[str, str] | None = None,
        end_s: float | None = None,
    ) -> None:
        via = self.vias.get(i)
        if via is None:
            _Execution._record_transfer(self, i, start_s, ends, end_s)
            return
        links = via.route.links
        if links:  # an empty route is a meeting point, not a transfer
            _Execution._record_transfer(self, i, start_s, (links[0].src, links[-1].dst), end_s)


def execute(
    sim: Simulation,
    devices: Sequence[str],
    schedule: Schedule,
    *,
    label: str = "collective",
    reduce_cost: bool = False,
    record_transfers: bool | None = None,
    iteration: int = -1,
    connection: int = 0,
    topology: Any = None,
    op: str = "",
) -> simpy.Event:
    """Play ``schedule`` among ``devices`` (rank i = devices[i]) from now; the event fires at the end.

    ``connection`` (a channel number) picks, with ECMP, the one route all sends of a pair take.
    ``topology`` (default: the simulation's) gives the routes: a view of the simulation's
    topology with the same links, such as a protocol's.

    Each rank gets one ``collective`` record from its first send to its last
    completed send (of op ``op``); with ``record_transfers`` (default: small schedules) every
    send is also a ``transfer`` record.  With ``reduce_cost`` each reduction
    costs its bytes over the receiver's memory bandwidth on its compute stream.
    """
    if record_transfers is None:
        record_transfers = len(schedule) <= RECORD_TRANSFERS_UP_TO
    kind = _Execution if schedule.routes is None else _RoutedExecution
    run = kind(
        sim,
        devices,
        schedule,
        label,
        reduce_cost,
        record_transfers,
        iteration,
        connection,
        topology,
        op,
    )
    if len(schedule) == 0:
        run.done.succeed(sim.env.now)
        return run.done
    if kind is _Execution and schedule.ring:
        hops = ring_replay.replayable(run)
        if hops is not None:  # alone on the network: played whole (see ring_replay)
            ring_replay.RingReplay(run, hops)
            return run.done
    for i, deps in enumerate(schedule.n_deps):
        if deps == 0:
            run.start(i)
    return run.done
