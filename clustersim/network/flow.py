"""Flows: transfers over routes, and what the network reads from links and routes.

The network does not import :mod:`clustersim.topology`; it only reads these
attributes: a link has ``index`` (its position in the list given to
:class:`~clustersim.network.Network`), ``name``, ``bandwidth_Bps``,
``latency_s``; a route has ``links`` (a tuple of links) and ``latency_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np
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


@dataclass(frozen=True)
class LinkStats:
    """Traffic seen by one link up to the time :meth:`Network.link_stats` was called."""

    index: int
    """Link index (position in the list given to :class:`Network`)."""
    name: str
    """Link name, e.g. ``rack0/tor->spine0``."""
    bytes: float
    """Bytes carried: sizes of the flows that finished crossing the link."""
    busy_s: float
    """Seconds during which at least one flow was moving bytes over the link."""
    peak_flows: int
    """Largest number of flows moving bytes over the link at the same time."""


NO_FLOWS: Mapping[int, Any] = MappingProxyType({})
"""What the network holds for a link without flows (one shared, read-only mapping: a
131,072-GPU cluster has 1.4 M links); a link that gets a flow gets a dict of its own."""


def used_links(peak: list[int], nbytes: list[float], busy: list[float]) -> list[int]:
    """Indices of the links that ever held a flow, carried bytes or were busy, from the
    network's per-link lists (numpy: a 131,072-GPU cluster has 1.4 M links, most of them
    idle in a one-replica run)."""
    held = (np.asarray(peak) > 0) | (np.asarray(nbytes) > 0.0) | (np.asarray(busy) > 0.0)
    return np.flatnonzero(held).tolist()  # type: ignore[no-any-return]


def stats_of_links(net: Any, used_only: bool = False) -> list[LinkStats]:
    """:meth:`Network.link_stats` of network ``net``: per link, bytes, busy time and peak
    concurrency up to now; with ``used_only``, of the links :func:`used_links` finds."""
    now, out = net.env.now, []
    used = used_links(net._peak, net._bytes, net._busy) if used_only else None
    for i in used if used is not None else range(len(net._links)):
        busy = net._busy[i]
        if net._link_flows[i]:
            busy += now - net._since[i]
        out.append(LinkStats(i, net._links[i].name, net._bytes[i], busy, net._peak[i]))
    return out


def link_columns(net: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(link indices, bytes, busy seconds up to now, peak flows) of the links of network
    ``net`` that ever held a flow, carried bytes or were busy (:func:`used_links`): what
    :meth:`Network.link_stats` gives with ``used_only``, as numpy columns."""
    index = np.asarray(used_links(net._peak, net._bytes, net._busy), dtype=np.int64)
    rows = index.tolist()
    busy = np.fromiter((net._busy[i] for i in rows), float, len(rows))
    on = [j for j, i in enumerate(rows) if net._link_flows[i]]  # flows still moving
    if on:
        since = np.fromiter((net._since[rows[j]] for j in on), float, len(on))
        busy[on] += net.env.now - since
    nbytes = np.fromiter((net._bytes[i] for i in rows), float, len(rows))
    peak = np.fromiter((net._peak[i] for i in rows), np.int64, len(rows))
    return index, nbytes, busy, peak


def release_link_state(net: Any) -> None:
    """Let go of network ``net``'s per-link state (flows, capacities, bytes, busy times,
    peaks, its solvers' arrays and route cache: lists of 1.4 M entries each on a 131,072-GPU
    cluster) once a run's link table is taken (:func:`link_columns`).  Its counters stay;
    it can carry no more flows."""
    net._link_flows, net._cap, net._bytes, net._busy = [], [], [], []
    net._since, net._peak, net._lmark = [], [], []
    net._routes = {}
    net._solver = net._wstate = None


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
        self.notify: Any = (
            None  # called with the flow at completion instead of triggering the event
        )
        self.tag: Any = None  # the caller's own tag (e.g. a send id)
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
