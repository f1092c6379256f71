"""Flows: transfers over routes, and what the network reads from links and routes.

The network does not import :mod:`clustersim.topology`; it only reads these
attributes: a link has ``index`` (its position in the list given to
:class:`~clustersim.network.Network`), ``name``, ``bandwidth_Bps``,
``latency_s``; a route has ``links`` (a tuple of links) and ``latency_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from heapq import heappush
from types import MappingProxyType
from typing import Any, Protocol

import simpy
from simpy.events import PENDING, Event

from ..errors import SimulationError

_INF = math.inf
_NAN = math.nan


class LinkLike(Protocol):
    """What the network reads from a link (a directed link of the topology)."""

    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def bandwidth_Bps(self) -> float: ...
    @property
    def latency_s(self) -> float: ...


class RouteLike(Protocol):
    """What the network reads from a route."""

    @property
    def links(self) -> Sequence[Any]: ...
    @property
    def latency_s(self) -> float: ...


NO_FLOWS: Mapping[int, Any] = MappingProxyType({})
"""What the network holds for a link without flows (one shared, read-only mapping: a
131,072-GPU cluster has 1.4 M links); a link that gets a flow gets a dict of its own."""


class Flow(Event):
    """One transfer in the network, and the SimPy event that succeeds (with
    value ``None``) at the instant its last byte arrives.  Returned by
    :meth:`Network.transfer`; wait for it with ``yield flow``.

    Public attributes (read only): ``id`` (sequence number, from 0),
    ``route``, ``links`` (tuple of link indices), ``size_bytes``, ``start_s``
    (time of the :meth:`Network.transfer` call), ``arrival_s`` (end of the
    latency phase, start of the bandwidth phase; ``nan`` before), ``end_s``
    (time the last byte arrived; ``nan`` before) and ``rate_Bps`` (current
    rate in bytes/s, 0 outside the bandwidth phase).  All in seconds, bytes
    and bytes/s.
    """

    __slots__ = (
        # simpy.Event's attributes, as slots so that no instance dict is made
        "env",
        "callbacks",
        "_value",
        "_ok",
        "_defused",
        # the flow's own
        "id",
        "route",
        "links",
        "size_bytes",
        "start_s",
        "arrival_s",
        "end_s",
        "rate_Bps",
        "_remaining",
        "_last",
        "_version",
        "_mark",
        "_frz",
        "_new",
        "notify",
        "tag",
        "weights",
        "rate_cap",
    )

    def __init__(
        self,
        env: simpy.Environment,
        fid: int,
        route: Any,
        links: tuple[int, ...],
        size_bytes: float,
        now: float,
        notify: Any = None,
        tag: Any = None,
    ) -> None:
        # Inlined Event.__init__ (as simpy.Timeout does).
        self.env = env
        self.callbacks = []
        self._value = PENDING
        self.id = fid
        self.route = route
        self.links = links
        self.size_bytes = size_bytes
        self.start_s = now
        self.arrival_s = _NAN
        self.end_s = _NAN
        self.rate_Bps = 0.0
        self._remaining = size_bytes  # bytes left at time _last
        self._last = now
        self._version = 0  # bumped whenever the flow's timer entry changes
        self._mark = -1  # component-search epoch
        self._frz = -1  # solver epoch in which the flow was frozen
        self._new = 0.0  # rate computed by the solver
        self.notify: Any = notify
        """Called with the flow at completion instead of triggering the event (None: the
        event is triggered)."""
        self.tag: Any = tag
        """The caller's own tag (e.g. a send id)."""
        self.rate_cap = _INF
        """Largest rate of a weighted flow, bytes/s (from its route's ``rate_cap``)."""
        self.weights: tuple[float, ...] | None = None
        """Per link of ``links``: the link capacity one unit of rate uses (None: 1 on every
        link).  Set for weighted flows (see :meth:`Network.transfer`)."""

    def link_loads(self) -> list[tuple[int, float]]:
        """``(link index, bytes/s used per byte/s of rate)`` for each of the flow's links."""
        if self.weights is None:
            return [(link, 1.0) for link in self.links]
        return list(zip(self.links, self.weights, strict=True))

    @property
    def done(self) -> bool:
        """True once the last byte has arrived."""
        return self._value is not PENDING

    def remaining_bytes(self, now: float) -> float:
        """Bytes still to move at time ``now`` (seconds), given the current rate."""
        if self._value is not PENDING:
            return 0.0
        if self.rate_Bps <= 0.0:
            return self._remaining
        return max(0.0, self._remaining - self.rate_Bps * (now - self._last))

    def __repr__(self) -> str:
        if self._value is not PENDING:
            state = "done"
        elif self.arrival_s == self.arrival_s:
            state = "active"
        else:
            state = "latent"
        return (
            f"Flow(id={self.id}, size_bytes={self.size_bytes!r}, links={self.links}, "
            f"{state}, rate_Bps={self.rate_Bps!r})"
        )


class Callback(Event):
    """An already-triggered event that runs ``callback`` after ``delay`` seconds.

    Like :class:`simpy.Timeout`, but with a chosen priority and no checks; used
    for the network's own wake-ups and recomputations.
    """

    def __init__(self, env: simpy.Environment, callback: Any, priority: int, delay: float) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._ok = True
        env.schedule(self, priority, delay)  # type: ignore[arg-type]


class WakeAt(Event):
    """An already-triggered event that runs ``callback`` at simulated time ``t`` exactly.

    :class:`Callback` is scheduled ``delay`` seconds after now, at ``now + delay`` in floating
    point, which is not always ``t`` when ``delay = t - now`` (``t`` more than twice ``now``:
    the sum rounds once more).  The network's wake-ups are due at the instants its timer
    queue computed (an arrival ``start + latency``, a completion ``arrival + bytes / rate``),
    so this one is put into SimPy's event queue at ``t`` itself, as
    :meth:`simpy.Environment.schedule` puts an event at ``now + delay`` (same queue entry:
    time, priority, event id, event)."""

    def __init__(self, env: simpy.Environment, callback: Any, priority: int, t: float) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._ok = True
        queue = getattr(env, "_queue", None)
        if queue is None:  # a SimPy without the queue of 4.x: by its delay, as Callback
            env.schedule(self, priority, t - env.now)  # type: ignore[arg-type]
        else:
            heappush(queue, (t, priority, next(env._eid), self))  # type: ignore[attr-defined]


def overflow_message(bucket: Sequence[tuple[int, int, Flow]]) -> str | None:
    """The message of a transfer whose next event is due at t = inf (``bucket`` holds the
    timer entries due then), or None when every entry is stale."""
    for _, version, flow in bucket:
        if version < 0 or version == flow._version:
            break
    else:
        return None
    phase = "its latency" if version < 0 else f"{flow.rate_Bps!r} B/s"
    links = getattr(flow.route, "links", ())
    over = f" over {links[0].name}" if len(links) == 1 else f" over {len(links)} links"
    return (
        f"a transfer of {flow.size_bytes!r} bytes{over if links else ''} overflowed: at "
        f"{phase} it would end at t = inf s; the inputs are too large or too small"
    )


def raise_if_overflowed(network: Any) -> None:
    """SimulationError if a transfer of ``network`` (a flow-level Network) is due at t = inf.

    Called once at the end of a run: a transfer whose end overflowed is never armed (no
    wake-up is scheduled at infinity), so the run ends with it still in flight.
    """
    for t, bucket in network._buckets.items():
        message = None if t < _INF else overflow_message(bucket)
        if message is not None:
            raise SimulationError(message)


def size_problem_message(src: str, dst: str, size_bytes: float, label: str) -> str:
    """The message of a transfer whose size is negative, NaN or infinite."""
    what = "overflowed" if size_bytes == math.inf else "is negative" if size_bytes < 0 else "is NaN"
    return f"transfer '{label}' {src} -> {dst}: its size {what} ({size_bytes!r} B)"
