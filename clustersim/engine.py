"""The Simulation: a SimPy environment plus the primitives strategies use.

Strategies spawn SimPy processes (generators) that ``yield`` the events these
primitives return:

* :meth:`Simulation.compute` -- work on a device's compute stream (FIFO);
* :meth:`Simulation.transfer` -- bytes from one device to another over the
  simulated network (a flow on a route, max-min fair sharing; the sends are
  :mod:`clustersim.transfers`, a part of the class);
* :meth:`Simulation.all_of` -- wait for several events;
* :meth:`Simulation.barrier` -- a reusable barrier for a group of processes.

Compute and communication are separate streams: a device can compute while its
transfers are in flight.  Every compute and transfer becomes a
:class:`~clustersim.records.Record`; :meth:`Simulation.book` is how the layers above
(the collectives) book theirs.  Only this module adds to :attr:`Simulation.records`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Sequence
from itertools import repeat
from typing import Any

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import URGENT, Timeout

from .barrier import Barrier
from .budget import DEFAULT_MAX_EVENTS, HARD_STOP_FACTOR, counted_work, hard_stop_message
from .devices import ComputeStream, Stragglers, compute_overflow, stragglers_of, work_seconds
from .errors import SimulationError
from .host import gc_paused
from .network import Network
from .network.failures import LinkFailures, apply_degradations
from .network.flow import raise_if_overflowed
from .records import Record, RecordLog
from .topology import Device, Topology, build_topology
from .transfers import Transfers

_new_record = tuple.__new__
_INF = math.inf

STEPS_PER_CHECK = 8192
"""SimPy steps :meth:`Simulation.run` takes between two looks at the work counted so far
(records, transfers started, flow re-ratings) and two progress reports: the guard costs
one comparison per batch, nothing per event."""


ProcessGenerator = Generator[simpy.Event, Any, Any]


class Simulation(Transfers):
    """One run of a scenario: clock, devices, network and the record sink."""

    def __init__(
        self,
        topology: Topology,
        *,
        seed: int = 0,
        stragglers: Stragglers | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
    ) -> None:
        self.env = simpy.Environment(initial_time=0.0)
        self.topology = topology
        self.seed = seed
        self.network = Network(self.env, topology.links)
        self.stragglers = stragglers or Stragglers(seed=seed)
        self.records: list[Record] = RecordLog()
        """Every compute, transfer and collective, appended as it is booked or finishes.
        Read it; add to it only through :meth:`book` (tests/test_layers.py checks)."""
        self._append = self.records.append
        self._streams: dict[str, ComputeStream] = {}
        self._flow_seq = 0
        self._barriers: dict[str, Barrier] = {}
        self.communicators: dict[Any, Any] = {}
        """Process group -> its communicator (:mod:`clustersim.collectives.communicator`)."""
        self._slowed = bool(self.stragglers.fixed or self.stragglers.random)
        self.max_events = max_events
        """The run's work limit in events (:mod:`clustersim.budget`); :meth:`run` stops a run
        whose counted work (records, transfers, flow re-ratings) passes
        :data:`~clustersim.budget.HARD_STOP_FACTOR` times it."""
        self._failures: LinkFailures | None = None
        windows = [(d.link_index, d.factor, d.start_s, d.end_s) for d in self.stragglers.links]
        apply_degradations(self.env, self.network, windows, self.fail_links)

    @classmethod
    def from_scenario(cls, scenario: Any, topology: Topology | None = None) -> Simulation:
        """A simulation of ``scenario``'s cluster, stragglers, seed and work limit (a
        straggler whose glob matches nothing is a ScenarioError naming the scenario's file
        and key path)."""
        topology = topology or build_topology(scenario.cluster)
        engine = getattr(scenario, "engine", None)
        limit = getattr(engine, "max_events", DEFAULT_MAX_EVENTS)
        return cls(
            topology,
            seed=scenario.seed,
            stragglers=stragglers_of(scenario, topology),
            max_events=limit,
        )

    # -- time ----------------------------------------------------------------

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self.env.now

    def process(self, generator: ProcessGenerator) -> simpy.Process:
        """Start a strategy process."""
        return self.env.process(generator)

    def timeout(self, delay_s: float, what: str = "a wait") -> simpy.Event:
        """An event ``delay_s`` seconds from now; a SimulationError naming ``what`` (the
        quantity the delay stands for) unless it is finite and >= 0."""
        if not 0.0 <= delay_s < _INF or not self.env._now + delay_s < _INF:
            raise SimulationError(
                f"{what} of {delay_s!r} s at t = {self.env._now:.9g} s is not a finite time >= 0"
                " (an input too large or too small made it overflow)"
            )
        return self.env.timeout(delay_s)

    def event(self) -> simpy.Event:
        """A new untriggered event (a strategy triggers it with ``succeed()``)."""
        return self.env.event()

    # -- records -------------------------------------------------------------

    def book(
        self,
        resource: str,
        kind: str,
        label: str,
        start_s: float,
        end_s: float,
        bytes: float = 0.0,
        flops: float = 0.0,
        src: str = "",
        dst: str = "",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
        phase: str = "",
    ) -> None:
        """Book one :class:`~clustersim.records.Record` (its fields, in order) in :attr:`records`.

        The one way work that is neither :meth:`compute` nor :meth:`transfer` (a collective
        held or played by the collective library, a send of a schedule) enters the
        records.  ``phase`` is one of :data:`~clustersim.records.PHASES`, or "";
        communication books ``communication``.
        """
        self._append(
            _new_record(
                Record,
                (
                    resource,
                    kind,
                    label,
                    start_s,
                    end_s,
                    bytes,
                    flops,
                    src,
                    dst,
                    iteration,
                    microbatch,
                    stage,
                    op,
                    phase,
                ),
            )
        )

    def book_collective(
        self,
        devices: Sequence[str],
        label: str,
        start_s: float,
        end_s: float,
        nbytes: float = 0.0,
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
    ) -> None:
        """Book one ``collective`` record per device of a collective priced as a whole (from
        ``start_s`` to ``end_s``, ``nbytes`` per device, of op ``op``), phase
        ``communication``.  :meth:`book` inlined: a ZeRO-3 run books one per rank of every
        gather and reduce-scatter (two million on 32 GPUs of FSDP)."""
        append = self._append
        for device in devices:
            append(
                _new_record(
                    Record,
                    (
                        device,
                        "collective",
                        label,
                        start_s,
                        end_s,
                        nbytes,
                        0.0,
                        device,
                        device,
                        iteration,
                        microbatch,
                        stage,
                        op,
                        "communication",
                    ),
                )
            )

    # -- compute -------------------------------------------------------------

    def device(self, name: str) -> Device:
        """The device called ``name`` (full path)."""
        return self.topology.device(name)

    def _stream(self, name: str) -> ComputeStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = ComputeStream(self.topology.device(name))
        return stream

    def compute(
        self,
        device: str,
        *,
        flops: float | None = None,
        seconds: float | None = None,
        bytes: float | None = None,
        label: str = "compute",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
        phase: str = "",
    ) -> simpy.Event:
        """Run work on ``device``'s compute stream; the event fires when it ends.

        Work is ``flops`` (FLOPs), ``seconds`` (s) or ``bytes`` (memory-bound,
        bytes over the device's memory bandwidth), scaled by the device's
        slowdown in ``iteration``.  Work queues behind earlier work on the
        same device (FIFO).  ``seconds`` with ``flops``: the seconds are the duration (a
        compute model priced the work) and the FLOPs are recorded.
        """
        end = self._booked(
            device, flops, seconds, bytes, label, iteration, microbatch, stage, op, phase
        )
        return Timeout(self.env, end - self.env._now)

    def book_compute(
        self,
        device: str,
        *,
        flops: float | None = None,
        seconds: float | None = None,
        bytes: float | None = None,
        label: str = "compute",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
        phase: str = "",
    ) -> float:
        """:meth:`compute` without its event: queue the work on the device's stream, book its
        record and return the time (s) it ends.  :meth:`compute_ends` waits for several."""
        return self._booked(
            device, flops, seconds, bytes, label, iteration, microbatch, stage, op, phase
        )

    def book_computes(
        self,
        devices: Sequence[str],
        seconds: Sequence[float | None],
        *,
        flops: float | None = None,
        label: str = "compute",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
        phase: str = "",
    ) -> list[float]:
        """:meth:`book_compute` on each of ``devices`` in order, the i-th taking
        ``seconds[i]`` (None: ``flops`` priced on the device), the rest alike; the ends (s).
        One call for a tensor group's share of an operation (a pipeline op books one per GPU
        of its stage, a million times in a large run)."""
        booked = self._booked
        return [
            booked(device, flops, time, None, label, iteration, microbatch, stage, op, phase)
            for device, time in zip(devices, seconds, strict=True)
        ]

    def _booked(
        self,
        device: str,
        flops: float | None,
        seconds: float | None,
        bytes: float | None,
        label: str,
        iteration: int,
        microbatch: int,
        stage: int,
        op: str,
        phase: str,
    ) -> float:
        """:meth:`book_compute`, its arguments by position (the hottest call of a run)."""
        stream = self._streams.get(device) or self._stream(device)
        if seconds is not None and bytes is None:
            duration = seconds
        else:
            duration = work_seconds(stream.device, flops=flops, seconds=seconds, bytes=bytes)
        if self._slowed:
            duration *= self.stragglers.factor(stream.device, iteration)
        env = self.env
        now = env._now
        free = stream.free_at_s
        start = now if now > free else free
        end = start + duration
        if not end < _INF:  # also NaN: overflow is an error here, not a time
            raise SimulationError(compute_overflow(device, label, iteration, duration, flops))
        stream.free_at_s = end
        self._append(  # book(), inlined: this is the hottest record of a training run
            _new_record(
                Record,
                (
                    device,
                    "compute",
                    label,
                    start,
                    end,
                    bytes or 0.0,
                    flops or 0.0,
                    "",
                    "",
                    iteration,
                    microbatch,
                    stage,
                    op,
                    phase,
                ),
            )
        )
        return end

    def compute_ends(self, ends: Sequence[float]) -> simpy.Event:
        """The event ``all_of`` of one :meth:`compute` event per time in ``ends`` (booked now by
        :meth:`book_compute`) would be, for two SimPy events instead of one per device: a
        timeout at the latest end, whose processing triggers the returned event, as the last
        of the timeouts triggers the condition (the same place among simultaneous events)."""
        env = self.env
        last = Timeout(env, max(ends) - env._now)
        done = env.event()
        last.callbacks.append(lambda _event: done.succeed())
        return done

    def cancel_compute(self, index: int) -> float:
        """Stop the compute booked as ``records[index]`` (by :meth:`compute`) now: its record
        ends now (at its start if not started; unchanged if ended) with op ``cancelled``, and
        its stream is free from then unless later work is booked after it (that keeps its
        times).  Whoever waits for it must stop waiting (a process: ``interrupt()``).
        Returns the seconds it ran."""
        r = self.records[index]
        end = min(r.end_s, max(r.start_s, self.env._now))
        stream = self._streams[r.resource]
        if stream.free_at_s == r.end_s:
            stream.free_at_s = end
        self.records[index] = r._replace(end_s=end, op="cancelled")
        return end - r.start_s

    # -- communication -------------------------------------------------------

    def _transfer_recorder(
        self,
        pairs: Sequence[tuple[str, str]],
        size_bytes: float,
        label: str,
        iteration: int,
        microbatch: int,
        stage: int,
        op: str,
    ) -> Callable[[int], None]:
        """A function of ``lane`` that books the ``transfer`` record of ``pairs[lane]``, a
        transfer started now, ending when it is called (the records of
        :mod:`clustersim.transfers`' sends; inline: a K/V ring books 10^5-10^6 of them)."""
        start = self.env._now
        append = self._append
        env = self.env

        def record(lane: int) -> None:
            src, dst = pairs[lane]
            append(
                _new_record(
                    Record,
                    (
                        src,
                        "transfer",
                        label,
                        start,
                        env._now,
                        size_bytes,
                        0.0,
                        src,
                        dst,
                        iteration,
                        microbatch,
                        stage,
                        op,
                        "communication",
                    ),
                )
            )

        return record

    # -- synchronisation -----------------------------------------------------

    def all_of(self, events: Iterable[simpy.Event]) -> simpy.Event:
        """An event that fires when every one of ``events`` has fired."""
        return self.env.all_of(list(events))

    def any_of(self, events: Iterable[simpy.Event]) -> simpy.Event:
        """An event that fires when the first of ``events`` fires."""
        return self.env.any_of(list(events))

    def barrier(self, name: str, parties: int) -> Barrier:
        """The barrier called ``name`` for ``parties`` processes (created on first use)."""
        barrier = self._barriers.get(name)
        if barrier is None:
            barrier = self._barriers[name] = Barrier(self.env, name, parties)
        elif barrier.parties != parties:
            raise SimulationError(
                f"barrier '{name}' was created for {barrier.parties} parties, now asked for {parties}"
            )
        return barrier

    # -- faults --------------------------------------------------------------

    def fail_links(
        self, indices: Iterable[int], at_s: float, repair_s: float | None = None
    ) -> None:
        """Take the links ``indices`` (positions in ``topology.links``) down at ``at_s`` seconds
        and bring them up at ``repair_s`` (None: never).  A down link carries nothing: the
        flows on it move to another equal-cost route or stall until a repair gives them one
        (:mod:`clustersim.network.failures`); each down window and stall is a record."""
        self.link_failures().schedule(indices, at_s, repair_s)

    def links_of(self, name: str, path: str = "") -> list[int]:
        """Indices of the links failing ``name`` takes down (:meth:`Topology.links_touching`)."""
        return [link.index for link in self.topology.links_touching(name, path)]

    def link_failures(self) -> LinkFailures:
        """The network's :class:`LinkFailures`, attached on first use (else no cost)."""
        if self._failures is None:
            self._failures = LinkFailures(self.network, self.topology.routes, self.book)
        return self._failures

    # -- running -------------------------------------------------------------

    def run(
        self, until: float | None = None, progress: Callable[[float], None] | None = None
    ) -> float:
        """Run until no event is left (or ``until`` seconds); return the end time in seconds.

        Events at ``until`` itself are left for a later call, as SimPy's
        ``Environment.run(until)`` leaves them.  ``progress(now_s)`` is called every
        :data:`STEPS_PER_CHECK` steps and at the end.

        The cyclic garbage collector is paused for the run (see
        :func:`gc_paused`): a run allocates flows, events and records by the
        million and hardly any cycles, and the collector's passes over the
        live objects cost up to half of a large run's time.

        A run whose counted work (records, transfers started, flow re-ratings) passes
        ``HARD_STOP_FACTOR x max_events`` stops with a :class:`SimulationError` (its work
        was estimated below the limit before it started, wrongly, or it spends its time
        re-rating thousands of flows that share links): looked at once per batch of steps.
        """
        env = self.env
        if until is not None:
            at = float(until)
            if at <= env.now:
                raise ValueError(f"until ({at}) must be greater than the current time")
            stop = simpy.Event(env)
            stop._ok = True
            stop._value = None
            env.schedule(stop, URGENT, at - env.now)
            stop.callbacks.append(StopSimulation.callback)  # type: ignore[union-attr]
        with gc_paused():
            try:
                self._steps(progress)
            except (StopSimulation, EmptySchedule):
                pass
        self.network.settle()
        if not env.now < _INF:
            raise SimulationError(f"the simulated time overflowed ({env.now!r} s)")
        raise_if_overflowed(self.network)
        if self._failures is not None:
            self._failures.close(env.now, self.records)
        if progress is not None:
            progress(env.now)
        return env.now

    def _steps(self, progress: Callable[[float], None] | None) -> None:
        """Step the environment in batches until it raises EmptySchedule or StopSimulation,
        checking the work counted after each batch."""
        step = self.env.step
        records = self.records
        network = self.network
        stop_at = HARD_STOP_FACTOR * self.max_events
        while True:
            for _ in repeat(None, STEPS_PER_CHECK):
                step()
            done = (len(records), network.flows_started, network.flows_rerated)
            if counted_work(*done) > stop_at:
                raise SimulationError(hard_stop_message(*done, self.max_events))
            if progress is not None:
                progress(self.env.now)
