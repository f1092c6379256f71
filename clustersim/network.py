"""Flow-level network model: latency, then max-min fair sharing of link bandwidth.

A transfer of ``S`` bytes over a route (a sequence of directed links) is a
*flow*.  It first spends the route's latency ``route.latency_s`` (seconds; the
sum of its links' latencies), then moves its bytes at the rate (bytes/s) that
**max-min fair sharing** with equal weights gives it among all flows active on
its links.  Uncontended, a transfer therefore takes exactly
``latency_s + S / min(bandwidth_Bps)``: the alpha-beta model.

Algorithm
---------
*Max-min fair rates* are computed by progressive filling (water-filling): every
unfrozen flow grows at the same pace until some link saturates; the flows on
that link are frozen at its fair share and the others keep growing.  It is run
as a heap of links keyed by ``(fair share, link index)`` where the fair share
of a link is ``remaining capacity / unfrozen flows on it``.  The smallest valid
entry is the next bottleneck; all its unfrozen flows are frozen at that share,
the capacity and flow count of every link they cross are reduced and those
links re-pushed with their new share (older entries are recognised as stale
and skipped).  Ties go to the lowest link index, so the result is
deterministic.  Cost ``O((L + F k) log L)`` for ``L`` links, ``F`` flows of
``k`` links each.

*The network* (:class:`Network`) is event-driven without a SimPy process per
flow:

* One heap holds ``(time, flow id, version, flow)`` entries: the end of a
  flow's latency phase (``version == -1``) and its completion (``version`` =
  the flow's version when the entry was pushed).  An entry whose version is no
  longer the flow's is stale and skipped (lazy invalidation).  One SimPy
  wake-up is pending for the earliest entry; if an earlier entry appears, a new
  wake-up is scheduled and the old one is ignored when it fires.
* Bytes remaining are materialised lazily: a flow stores
  ``(remaining, rate, last_update)`` and only updates ``remaining`` when its
  rate changes.  A flow completes exactly when its valid heap entry comes due.
* Every arrival, departure and bandwidth change marks links dirty and schedules
  one recomputation at the current instant with priority 2 (after SimPy's
  ``URGENT`` = 0 and ``NORMAL`` = 1), so all changes of one instant cost a
  single recomputation, run after every other event of that instant.
* A recomputation only visits the connected components (flows sharing links,
  transitively) of the dirty links.  A component of a single flow gets
  ``min(capacity)`` of its links without the solver.  Flows whose rate does not
  change keep their heap entry.

Determinism: all iteration is over lists and insertion-ordered dicts keyed by
integers; nothing depends on hash seeds or ``id()``.  The same sequence of
calls gives bit-identical times.

The module does not import :mod:`clustersim.topology`; it only reads these
attributes: a link has ``index`` (its position in the list given to
:class:`Network`), ``name``, ``bandwidth_Bps``, ``latency_s``; a route has
``links`` (a tuple of links) and ``latency_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Any, Protocol

import simpy
from simpy.events import NORMAL, Event

from .errors import SimulationError

__all__ = [
    "Flow",
    "LinkLike",
    "LinkStats",
    "Network",
    "RECOMPUTE_PRIORITY",
    "RouteLike",
    "max_min_rates",
]

_INF = math.inf

RECOMPUTE_PRIORITY = 2
"""SimPy priority of the batched rate recomputation: after URGENT (0) and NORMAL (1)."""

# Flow states.
_LATENT = 0  # spending the route latency
_ACTIVE = 1  # moving bytes (holds bandwidth)
_DONE = 2  # last byte arrived

_ROUTE_CACHE_MAX = 1 << 18


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


class Flow:
    """One transfer in the network.  The value of the event returned by
    :meth:`Network.transfer`, so callers can read its times.

    Public attributes (read only): ``id`` (sequence number, from 0),
    ``route``, ``links`` (tuple of link indices), ``size_bytes``, ``start_s``
    (time of the :meth:`Network.transfer` call), ``arrival_s`` (end of the
    latency phase, start of the bandwidth phase; ``nan`` before), ``end_s``
    (time the last byte arrived; ``nan`` before) and ``rate_Bps`` (current
    rate in bytes/s, 0 outside the bandwidth phase).
    """

    __slots__ = (
        "id",
        "route",
        "links",
        "size_bytes",
        "start_s",
        "arrival_s",
        "end_s",
        "rate_Bps",
        "event",
        "_remaining",
        "_last",
        "_version",
        "_state",
        "_mark",
        "_frz",
        "_new",
    )

    def __init__(
        self,
        fid: int,
        route: Any,
        links: tuple[int, ...],
        size_bytes: float,
        now: float,
        event: Event,
    ) -> None:
        self.id = fid
        self.route = route
        self.links = links
        self.size_bytes = size_bytes
        self.start_s = now
        self.arrival_s = math.nan
        self.end_s = math.nan
        self.rate_Bps = 0.0
        self.event = event
        self._remaining = size_bytes
        self._last = now
        self._version = 0
        self._state = _LATENT
        self._mark = -1  # component-search epoch
        self._frz = -1  # solver epoch in which the flow was frozen
        self._new = 0.0  # rate computed by the solver

    @property
    def done(self) -> bool:
        """True once the last byte has arrived."""
        return self._state == _DONE

    def remaining_bytes(self, now: float) -> float:
        """Bytes still to move at time ``now`` (seconds), given the current rate."""
        if self._state == _DONE:
            return 0.0
        if self._state == _LATENT or self.rate_Bps <= 0.0:
            return self._remaining
        return max(0.0, self._remaining - self.rate_Bps * (now - self._last))

    def __repr__(self) -> str:
        state = ("latent", "active", "done")[self._state]
        return f"Flow(id={self.id}, size_bytes={self.size_bytes!r}, links={self.links}, {state}, rate_Bps={self.rate_Bps!r})"


class _SolverFlow:
    """Stand-in for :class:`Flow` inside :func:`max_min_rates`."""

    __slots__ = ("links", "_frz", "_new")

    def __init__(self, links: tuple[int, ...]) -> None:
        self.links = links
        self._frz = -1
        self._new = 0.0


class _Solver:
    """Progressive filling over a set of links, reusing scratch arrays.

    ``users[l]`` maps flow id -> flow object (anything with ``links``,
    ``_frz`` and ``_new``) for every flow crossing link ``l``; a flow's links
    must be distinct.  ``cap[l]`` is the capacity of link ``l`` in bytes/s.
    """

    __slots__ = ("rem", "cnt", "stamp", "tick", "epoch")

    def __init__(self, n_links: int) -> None:
        self.rem = [0.0] * n_links  # remaining capacity, bytes/s
        self.cnt = [0] * n_links  # unfrozen flows
        self.stamp = [-1] * n_links  # round in which a link was last re-pushed
        self.tick = 0
        self.epoch = 0

    def grow(self, n_links: int) -> None:
        extra = n_links - len(self.rem)
        if extra > 0:
            self.rem.extend([0.0] * extra)
            self.cnt.extend([0] * extra)
            self.stamp.extend([-1] * extra)

    def fill(
        self,
        comp_links: Sequence[int],
        comp_flows: Sequence[Any],
        users: Sequence[dict[int, Any]],
        cap: Sequence[float],
    ) -> None:
        """Set ``flow._new`` to the max-min fair rate of every flow in ``comp_flows``.

        ``comp_links`` must hold every link crossed by a flow of
        ``comp_flows``, and ``users`` of those links only flows of
        ``comp_flows`` (a union of connected components).
        """
        rem = self.rem
        cnt = self.cnt
        stamp = self.stamp
        self.epoch += 1
        epoch = self.epoch
        tick = self.tick
        heap = []
        for link in comp_links:
            n = len(users[link])
            cnt[link] = n
            c = cap[link]
            rem[link] = c
            heap.append((c / n if c > 0.0 else 0.0, link))
        heapify(heap)
        left = len(comp_flows)
        while heap:
            share, link = heappop(heap)
            n = cnt[link]
            if n == 0:
                continue
            r = rem[link]
            if (r / n if r > 0.0 else 0.0) != share:
                continue  # stale entry: the link changed since it was pushed
            if share == _INF:
                break  # only unbounded links are left
            tick += 1
            touched = []
            for flow in users[link].values():
                if flow._frz == epoch:
                    continue
                flow._frz = epoch
                flow._new = share
                links = flow.links
                for l2 in links:
                    rem[l2] -= share
                    cnt[l2] -= 1
                touched.append(links)
            left -= len(touched)
            for links in touched:
                for l2 in links:
                    if stamp[l2] != tick:
                        stamp[l2] = tick
                        n2 = cnt[l2]
                        if n2 > 0:
                            r2 = rem[l2]
                            heappush(heap, (r2 / n2 if r2 > 0.0 else 0.0, l2))
            if left == 0:
                break
        self.tick = tick
        if left:
            for flow in comp_flows:
                if flow._frz != epoch:
                    flow._frz = epoch
                    flow._new = _INF


def max_min_rates(
    flow_links: Sequence[Sequence[int]], capacity_Bps: Sequence[float]
) -> list[float]:
    """Max-min fair rate (bytes/s) of each flow, by progressive filling.

    ``flow_links[i]`` lists the link indices flow ``i`` crosses (a link listed
    twice counts once); ``capacity_Bps[l]`` is the capacity of link ``l`` in
    bytes/s (>= 0, may be ``inf``).  A flow with no links, or only links of
    infinite capacity, gets ``inf``.  Pure function; see the module docstring
    for the algorithm.
    """
    cap = [float(c) for c in capacity_Bps]
    for c in cap:
        if not c >= 0.0:
            raise ValueError(f"link capacity must be >= 0, got {c!r}")
    n_links = len(cap)
    users: list[dict[int, _SolverFlow]] = [{} for _ in range(n_links)]
    flows: list[_SolverFlow] = []
    rates = [_INF] * len(flow_links)
    for i, links in enumerate(flow_links):
        lt = tuple(dict.fromkeys(int(x) for x in links))
        flow = _SolverFlow(lt)
        flows.append(flow)
        for link in lt:
            if not 0 <= link < n_links:
                raise IndexError(f"flow {i}: link index {link} out of range 0..{n_links - 1}")
            users[link][i] = flow
    comp_links = [link for link in range(n_links) if users[link]]
    active = [f for f in flows if f.links]
    if active:
        _Solver(n_links).fill(comp_links, active, users, cap)
    for i, flow in enumerate(flows):
        if flow.links:
            rates[i] = flow._new
    return rates


class _Callback(Event):
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


class Network:
    """All links of a cluster and the flows on them.  See the module docstring.

    ``links[i].index`` must be ``i``.  Units: seconds, bytes, bytes/s.

    Counters: ``recomputations`` (batched rate recomputations that re-rated
    at least one flow),
    ``flows_started``, ``flows_completed``, ``flows_rerated`` (flows whose rate
    a recomputation evaluated; flows outside the changed components are not
    counted), ``rate_changes`` (flows whose rate actually changed) and
    ``solver_calls`` (components that needed progressive filling).
    """

    def __init__(self, env: simpy.Environment, links: Sequence[LinkLike]) -> None:
        self.env = env
        self._links: list[Any] = list(links)
        n = len(self._links)
        cap: list[float] = []
        for i, link in enumerate(self._links):
            if link.index != i:
                raise SimulationError(f"link {link.name!r} has index {link.index}, expected {i}")
            cap.append(self._check_bandwidth(link.bandwidth_Bps, link.name))
        self._cap = cap
        self._link_flows: list[dict[int, Flow]] = [{} for _ in range(n)]
        self._bytes = [0.0] * n
        self._busy = [0.0] * n
        self._since = [0.0] * n
        self._peak = [0] * n
        self._lmark = [-1] * n
        self._solver = _Solver(n)
        self._heap: list[tuple[float, int, int, Flow]] = []
        self._stale = 0  # stale entries in the heap (estimate, for compaction)
        self._wake_at = _INF
        self._wake_event: Event | None = None
        self._dirty: dict[int, None] = {}
        self._recompute_pending = False
        self._epoch = 0
        self._next_id = 0
        self._active: dict[int, Flow] = {}
        self._in_flight = 0
        self._routes: dict[int, tuple[Any, tuple[int, ...]]] = {}
        self.recomputations = 0
        self.flows_started = 0
        self.flows_completed = 0
        self.flows_rerated = 0
        self.rate_changes = 0
        self.solver_calls = 0

    # ----------------------------------------------------------------- public

    @property
    def active_flows(self) -> int:
        """Flows in their bandwidth phase (holding bandwidth) now."""
        return len(self._active)

    @property
    def in_flight(self) -> int:
        """Transfers started and not yet complete (latency or bandwidth phase)."""
        return self._in_flight

    def active(self) -> list[Flow]:
        """The flows in their bandwidth phase, in order of arrival."""
        return list(self._active.values())

    def bandwidth_Bps(self, link_index: int) -> float:
        """Current capacity of a link in bytes/s."""
        return self._cap[link_index]

    def transfer(self, route: RouteLike, size_bytes: float) -> Event:
        """Start moving ``size_bytes`` bytes over ``route`` now.

        Returns an event that succeeds, with the :class:`Flow` as value, at the
        instant the last byte arrives: ``route.latency_s`` seconds later the
        flow starts to share bandwidth; a zero-byte transfer finishes after the
        latency alone, and a transfer over an empty route at once (the event is
        still triggered through the SimPy queue).
        """
        size = float(size_bytes)
        if not (size >= 0.0 and size < _INF):
            raise SimulationError(
                f"transfer size must be finite and >= 0 bytes, got {size_bytes!r}"
            )
        env = self.env
        now = env.now
        links = self._route_links(route)
        event = Event(env)
        flow = Flow(self._next_id, route, links, size, now, event)
        self._next_id += 1
        self.flows_started += 1
        self._in_flight += 1
        if not links:
            flow.arrival_s = now
            self._finish(flow, now)
            return event
        latency = float(route.latency_s)
        if latency > 0.0:
            heappush(self._heap, (now + latency, flow.id, -1, flow))
            if not self._recompute_pending:
                self._arm()
        elif latency == 0.0:
            self._arrive(flow, now)
        else:
            raise SimulationError(f"route latency must be >= 0 s, got {route.latency_s!r}")
        return event

    def set_bandwidth(self, link_index: int, bandwidth_Bps: float) -> None:
        """Set a link's capacity (bytes/s) from now on.

        Bytes already moved are kept; the rates of the flows on the link (and
        of their component) are recomputed in the batched recomputation of
        this instant.
        """
        link = self._links[link_index]
        bw = self._check_bandwidth(bandwidth_Bps, link.name)
        if bw == self._cap[link_index]:
            return
        self._cap[link_index] = bw
        if self._link_flows[link_index]:
            self._dirty[link_index] = None
            self._schedule_recompute()

    def link_stats(self) -> list[LinkStats]:
        """Per-link bytes, busy time and peak concurrency up to ``env.now``."""
        now = self.env.now
        out = []
        for i, link in enumerate(self._links):
            busy = self._busy[i]
            if self._link_flows[i]:
                busy += now - self._since[i]
            out.append(LinkStats(i, link.name, self._bytes[i], busy, self._peak[i]))
        return out

    # --------------------------------------------------------------- internals

    @staticmethod
    def _check_bandwidth(value: float, name: str) -> float:
        bw = float(value)
        if not bw >= 0.0:
            raise SimulationError(f"link {name!r}: bandwidth must be >= 0 B/s, got {value!r}")
        return bw

    def _route_links(self, route: RouteLike) -> tuple[int, ...]:
        """Link indices of a route (distinct, validated), cached per route object."""
        key = id(route)
        hit = self._routes.get(key)
        if hit is not None and hit[0] is route:
            return hit[1]
        n = len(self._links)
        idx = []
        for link in route.links:
            i = link.index
            if not (isinstance(i, int) and 0 <= i < n):
                raise SimulationError(
                    f"link {getattr(link, 'name', link)!r}: index {i!r} not in 0..{n - 1}"
                )
            idx.append(i)
        links = tuple(dict.fromkeys(idx))
        if len(self._routes) >= _ROUTE_CACHE_MAX:
            self._routes.clear()
        # The cache keeps a reference to the route, so its id cannot be reused.
        self._routes[key] = (route, links)
        return links

    def _schedule_recompute(self) -> None:
        if not self._recompute_pending:
            self._recompute_pending = True
            _Callback(self.env, self._recompute, RECOMPUTE_PRIORITY, 0.0)

    def _arm(self) -> None:
        """Make sure a wake-up is pending for the earliest valid heap entry."""
        heap = self._heap
        while heap:
            t, _, ver, flow = heap[0]
            if ver >= 0 and (ver != flow._version or flow._state != _ACTIVE):
                heappop(heap)
                self._stale -= 1
                continue
            if t < self._wake_at:
                self._wake_at = t
                delay = t - self.env.now
                self._wake_event = _Callback(
                    self.env, self._on_wake, NORMAL, delay if delay > 0.0 else 0.0
                )
            return

    def _on_wake(self, event: Event) -> None:
        if event is not self._wake_event:
            return  # superseded by an earlier wake-up
        self._wake_event = None
        target = self._wake_at
        self._wake_at = _INF
        now = self.env.now
        if now > target:
            target = now
        heap = self._heap
        while heap and heap[0][0] <= target:
            _, _, ver, flow = heappop(heap)
            if ver < 0:
                self._arrive(flow, now)
            elif ver == flow._version and flow._state == _ACTIVE:
                self._depart(flow, now)
            else:
                self._stale -= 1
        if not self._recompute_pending:
            self._arm()

    def _arrive(self, flow: Flow, now: float) -> None:
        """End of the latency phase: the flow starts to hold bandwidth."""
        flow.arrival_s = now
        if flow.size_bytes == 0.0:
            self._finish(flow, now)
            return
        flow._state = _ACTIVE
        flow._last = now
        fid = flow.id
        self._active[fid] = flow
        link_flows = self._link_flows
        peak = self._peak
        for link in flow.links:
            lf = link_flows[link]
            if not lf:
                self._since[link] = now
            lf[fid] = flow
            if len(lf) > peak[link]:
                peak[link] = len(lf)
        # One link suffices: the component search reaches all of the flow's links.
        self._dirty[flow.links[0]] = None
        self._schedule_recompute()

    def _depart(self, flow: Flow, now: float) -> None:
        """The flow's last byte arrived: release its links."""
        fid = flow.id
        del self._active[fid]
        link_flows = self._link_flows
        size = flow.size_bytes
        nbytes = self._bytes
        dirty = False
        for link in flow.links:
            lf = link_flows[link]
            del lf[fid]
            nbytes[link] += size
            if lf:
                self._dirty[link] = None
                dirty = True
            else:
                self._busy[link] += now - self._since[link]
        flow._remaining = 0.0
        flow._last = now
        flow.rate_Bps = 0.0
        if dirty:
            self._schedule_recompute()
        self._finish(flow, now)

    def _finish(self, flow: Flow, now: float) -> None:
        flow._state = _DONE
        flow.end_s = now
        self._in_flight -= 1
        self.flows_completed += 1
        flow.event.succeed(flow)

    def _recompute(self, _event: Event) -> None:
        """The batched recomputation of this instant (priority 2)."""
        self._recompute_pending = False
        dirty = self._dirty
        self._dirty = {}
        now = self.env.now
        self._epoch += 1
        epoch = self._epoch
        lmark = self._lmark
        link_flows = self._link_flows
        cap = self._cap
        heap = self._heap
        rerated = 0
        for start in dirty:
            if lmark[start] == epoch or not link_flows[start]:
                continue
            # Breadth-first search of the component of `start`.
            lmark[start] = epoch
            comp_links = [start]
            comp_flows: list[Flow] = []
            i = 0
            while i < len(comp_links):
                lf = link_flows[comp_links[i]]
                i += 1
                for flow in lf.values():
                    if flow._mark != epoch:
                        flow._mark = epoch
                        comp_flows.append(flow)
                        for l2 in flow.links:
                            if lmark[l2] != epoch:
                                lmark[l2] = epoch
                                comp_links.append(l2)
            if len(comp_flows) == 1:
                flow = comp_flows[0]
                flow._new = min([cap[link] for link in flow.links])
            else:
                self.solver_calls += 1
                self._solver.fill(comp_links, comp_flows, link_flows, cap)
            rerated += len(comp_flows)
            for flow in comp_flows:
                rate = flow._new
                old = flow.rate_Bps
                if rate == old:
                    continue
                self.rate_changes += 1
                if old > 0.0:
                    # Materialise the bytes moved at the old rate; the old entry goes stale.
                    dt = now - flow._last
                    if dt > 0.0:
                        rest = flow._remaining - old * dt
                        flow._remaining = rest if rest > 0.0 else 0.0
                    self._stale += 1
                flow._last = now
                flow.rate_Bps = rate
                flow._version += 1
                if rate > 0.0:
                    heappush(heap, (now + flow._remaining / rate, flow.id, flow._version, flow))
        if rerated:
            self.recomputations += 1
            self.flows_rerated += rerated
        if self._stale > 1024 and self._stale > len(heap) // 2:
            self._compact()
        self._arm()

    def _compact(self) -> None:
        """Drop stale entries from the heap."""
        heap = [
            e for e in self._heap if e[2] < 0 or (e[2] == e[3]._version and e[3]._state == _ACTIVE)
        ]
        heapify(heap)
        self._heap = heap
        self._stale = 0
