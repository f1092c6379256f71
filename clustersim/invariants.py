"""Invariants of a run, and deadlock reports.

Two services, both attached to a :class:`~clustersim.engine.Simulation`
before its strategy starts:

* :class:`Watch` (always on, cheap) keeps the processes the strategy starts
  through ``sim.process``.  After the run, :meth:`Watch.deadlock` names every
  process still waiting (which device, on what: a barrier, a transfer, an
  event nothing triggers), every barrier some parties never reached and every
  transfer stuck on a link of bandwidth 0.  ``clustersim.api.simulate`` raises
  it as a :class:`~clustersim.errors.SimulationError`, so a workload that waits
  forever is never a silent early end.
* :class:`Checker` (``clustersim run --check``, ``simulate(check=True)``, and
  every ``simulate`` in the test suite through ``CLUSTERSIM_CHECK=1``) watches
  the simulation's network through a
  :class:`~clustersim.network.monitor.NetworkMonitor` and, with :func:`check`,
  verifies:

  - ``link capacity``: whenever rates change (a recomputation, a flow alone
    on idle links, a bandwidth change), the rates of the flows on every link
    whose flows changed sum to at most its bandwidth (relative 1e-9);
  - ``bytes``: every flow started completed, each with its bytes delivered at
    the moment it completed, and every link carried exactly the bytes of the
    flows that crossed it;
  - ``compute stream``: no device's compute records overlap (beyond 1e-12 s);
  - ``dependencies``: each ``program`` operation started after every
    operation of its ``after:`` list ended;
  - ``records``: times finite, ``0 <= start <= end``; and every process
    finished.

Violations are messages (strings) naming the invariant, the resource and
the time; :func:`check` returns them, :meth:`Checker.raise_if_violated`
raises them.  Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import Condition, Process

from .errors import SimulationError
from .network.monitor import TIME_TOL_S, NetworkMonitor
from .records import Record
from .units import format_size

if TYPE_CHECKING:
    from .engine import Simulation

__all__ = [
    "CHECK_ENV",
    "Checker",
    "Watch",
    "check",
    "check_records",
    "checking_requested",
]

CHECK_ENV = "CLUSTERSIM_CHECK"
"""Environment variable: ``1`` makes every ``simulate`` check the invariants."""

MAX_LISTED = 20
"""Violations or waiting processes listed in one message at most."""


def checking_requested() -> bool:
    """True when the environment asks every run to check its invariants."""
    return os.environ.get(CHECK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# -- deadlock detection -----------------------------------------------------


class Watch:
    """Keeps the processes started through ``sim.process`` (wraps it on ``sim``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.processes: dict[int, Process] = {}
        start = sim.process  # a cycle through sim until release() takes the wrapper off
        processes = self.processes

        def _forget(event: simpy.Event) -> None:
            processes.pop(id(event), None)

        def process(generator: Any) -> Process:
            proc = start(generator)
            processes[id(proc)] = proc
            proc.callbacks.append(_forget)
            return proc

        sim.process = process  # type: ignore[method-assign]

    def release(self) -> None:
        """Take the wrapper off ``sim`` (its own ``process`` again), once the run is over:
        the wrapper and ``sim`` refer to each other, a cycle that would keep a finished
        run's records (1.5 M of Megatron's 1T run) until the collector found it."""
        self.sim.__dict__.pop("process", None)

    def alive(self) -> list[Process]:
        """Processes started and not finished, in start order."""
        return [p for p in self.processes.values() if p.is_alive]

    def deadlock(self, strategy: Any = None) -> str | None:
        """What still waits when nothing is left to simulate, or None if everything finished."""
        sim = self.sim
        alive = self.alive()
        lines = [f"{_who(p, sim)} waits for {_what(p._target, sim)}" for p in alive]
        awaited = {id(p._target) for p in alive}
        for barrier in getattr(sim, "_barriers", {}).values():
            if barrier.waiting and id(barrier._release) not in awaited:
                lines.append(
                    f"barrier '{barrier.name}': {barrier.waiting} of {barrier.parties} "
                    "parties arrived, the others never did"
                )
        lines += [
            f"{_flow_text(f, sim)} never finishes"
            for f in _stuck_flows(sim)
            if id(f) not in awaited
        ]
        if not alive:
            lines += _unfinished_ops(strategy)
        if not lines:
            return None
        listed = lines[:MAX_LISTED]
        if len(lines) > MAX_LISTED:
            listed.append(f"... and {len(lines) - MAX_LISTED} more")
        return f"deadlock: nothing left to simulate at t = {sim.now:.9g} s but:\n  " + "\n  ".join(
            listed
        )

    def raise_if_deadlocked(self, strategy: Any = None) -> None:
        """Raise SimulationError naming what waits, if anything does."""
        text = self.deadlock(strategy)
        if text is not None:
            raise SimulationError(text)


def _who(proc: Process, sim: Simulation) -> str:
    """A process as ``op 'x' on dev`` or ``dev (Strategy._worker)``."""
    gen = getattr(proc, "_generator", None)
    name = getattr(gen, "__qualname__", "process")
    frame = getattr(gen, "gi_frame", None)
    local = frame.f_locals if frame is not None else {}
    devices = sim.topology.devices
    found: list[str] = []
    op_id = ""
    for value in local.values():
        if isinstance(value, str) and value in devices:
            found.append(value)
        elif getattr(value, "name", None) in devices and hasattr(value, "flops_per_s"):
            found.append(value.name)
        elif not op_id and isinstance(getattr(value, "id", None), str) and hasattr(value, "after"):
            op_id = value.id
            found += _op_devices(value)
    where = ", ".join(dict.fromkeys(found))
    if op_id:
        return f"op '{op_id}'" + (f" on {where}" if where else "")
    return f"{where} ({name})" if where else name


def _op_devices(op: Any) -> list[str]:
    if getattr(op, "transfer", None) is not None:
        return [op.transfer.src, op.transfer.dst]
    if getattr(op, "compute", None) is not None:
        return [op.compute.device]
    return []


def _what(event: Any, sim: Simulation, depth: int = 0) -> str:
    """What ``event`` is, in words (conditions list their pending events)."""
    if event is None:
        return "nothing (it was never resumed)"
    for barrier in getattr(sim, "_barriers", {}).values():
        if event is barrier._release:
            return (
                f"barrier '{barrier.name}' ({barrier.waiting} of {barrier.parties} parties arrived)"
            )
    if hasattr(event, "route") and hasattr(event, "size_bytes"):
        return _flow_text(event, sim)
    if isinstance(event, Process):
        return _who(event, sim)
    if isinstance(event, Condition) and depth < 2:
        pending = [e for e in event._events if not e.triggered]
        parts = [_what(e, sim, depth + 1) for e in pending[:5]]
        if len(pending) > 5:
            parts.append(f"{len(pending) - 5} more")
        kind = "all of" if event._evaluate is Condition.all_events else "any of"
        return f"{kind}: " + "; ".join(parts)
    if isinstance(event, simpy.Event) and not event.triggered:
        return "an event nothing triggers (e.g. a transfer nobody sends)"
    return type(event).__name__


def _flow_text(flow: Any, sim: Simulation) -> str:
    links = getattr(flow.route, "links", ())
    ends = f"{links[0].src} -> {links[-1].dst}" if links else "a local copy"
    now = flow.env.now
    text = (
        f"transfer {ends} ({format_size(flow.remaining_bytes(now))} of "
        f"{format_size(flow.size_bytes)} left"
    )
    if flow.arrival_s == flow.arrival_s and flow.rate_Bps <= 0.0:
        capacity = sim.network.bandwidth_Bps  # now: a link may have gone down in the run
        dead = [link.name for link in links if capacity(link.index) <= 0.0]
        net_zero = ", ".join(dead) or "a link"
        text += f", rate 0 B/s: {net_zero} has bandwidth 0"
    return text + ")"


def _stuck_flows(sim: Simulation) -> list[Any]:
    """Flows holding bandwidth at the end of the run (none when the run finished)."""
    network = sim.network
    if not network.in_flight:
        return []
    return network.active()


def _unfinished_ops(strategy: Any) -> list[str]:
    """Program operations that never ended, with the dependencies they still wait for."""
    program = getattr(getattr(strategy, "config", None), "program", None)
    times = getattr(strategy, "times", None)
    if not isinstance(program, list) or not isinstance(times, dict):
        return []
    lines = []
    for op in program:
        if op.id in times:
            continue
        missing = [d for d in op.after if d not in times]
        if missing:
            lines.append(f"op '{op.id}' never started: waits for {', '.join(missing)}")
    return lines


# -- invariant checking -----------------------------------------------------


def _checked(message: str) -> None:
    """A released monitor's ``violate``: the run was checked already."""


class Checker(Watch):
    """A :class:`Watch` that also checks the network as the run goes (see module doc)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.violations: list[str] = []
        self.monitor = NetworkMonitor(sim.network, self._violate)

    def release(self) -> None:
        """Take the wrappers off ``sim`` and its network, once the run is checked (and the
        monitor's hold on this checker: a cycle of the two would keep ``sim``)."""
        super().release()
        self.monitor.release()
        self.monitor.violate = _checked

    def _violate(self, message: str) -> None:
        if len(self.violations) <= MAX_LISTED:
            self.violations.append(message)

    def check(self, strategy: Any = None) -> list[str]:
        """Every violation seen during the run and in its final state and records."""
        out = list(self.violations)
        out += self.monitor.final()
        out += check(self.sim, strategy)
        if self.alive():
            out.append(f"processes: {len(self.alive())} never finished")
        return out

    def raise_if_violated(self, strategy: Any = None) -> None:
        """Raise SimulationError listing the violations, if there are any."""
        found = self.check(strategy)
        if found:
            listed = found[:MAX_LISTED]
            if len(found) > MAX_LISTED:
                listed.append(f"... and {len(found) - MAX_LISTED} more")
            raise SimulationError(
                f"{len(found)} invariant violation{'s' if len(found) != 1 else ''}:\n  "
                + "\n  ".join(listed)
            )


def check(sim: Simulation, strategy: Any = None) -> list[str]:
    """Violations found in ``sim``'s records (and ``strategy``'s operation times)."""
    out = check_records(sim.records)
    out += check_dependencies(strategy)
    return out


def check_records(records: Iterable[Record]) -> list[str]:
    """Times valid, and no device's compute records overlapping."""
    out: list[str] = []
    streams: dict[str, list[tuple[float, float, str]]] = {}
    for r in records:
        if not (math.isfinite(r.start_s) and math.isfinite(r.end_s)) or not (
            0.0 <= r.start_s <= r.end_s
        ):
            out.append(
                f"records: {r.kind} '{r.label}' on {r.resource} has start {r.start_s!r} s, "
                f"end {r.end_s!r} s"
            )
        if r.kind == "compute":
            streams.setdefault(r.resource, []).append((r.start_s, r.end_s, r.label))
    for device, spans in streams.items():
        spans.sort()
        prev_end, prev_label = -math.inf, ""
        for start, end, label in spans:
            if start < prev_end - TIME_TOL_S * max(1.0, abs(prev_end)):
                out.append(
                    f"compute stream: {device} ran '{label}' from {start:.12g} s while "
                    f"'{prev_label}' ran until {prev_end:.12g} s"
                )
                if len(out) > MAX_LISTED:
                    return out
            if end > prev_end:
                prev_end, prev_label = end, label
    return out


def check_dependencies(strategy: Any) -> list[str]:
    """Each ``program`` operation started after every operation it comes ``after:`` ended."""
    program = getattr(getattr(strategy, "config", None), "program", None)
    times = getattr(strategy, "times", None)
    if not isinstance(program, list) or not isinstance(times, dict):
        return []
    out = []
    for op in program:
        if op.id not in times:
            out.append(f"processes: operation '{op.id}' never finished")
            continue
        start = times[op.id][0]
        for dep in op.after:
            end = times.get(dep, (math.nan, math.inf))[1]
            if not start >= end - TIME_TOL_S * max(1.0, abs(end)):
                out.append(
                    f"dependencies: operation '{op.id}' started at {start:.12g} s, before "
                    f"'{dep}' ended at {end:.12g} s"
                )
    return out
