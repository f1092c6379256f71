"""Flow-level network model: latency, then max-min fair sharing of link bandwidth.

A transfer of ``S`` bytes over a route (a sequence of directed links) is a
*flow*.  It first spends the route's latency ``route.latency_s`` (seconds; the
sum of its links' latencies), then moves its bytes at the rate (bytes/s) that
**max-min fair sharing** with equal weights gives it among all flows active on
its links.  Uncontended, a transfer therefore takes exactly
``latency_s + S / min(bandwidth_Bps)``: the alpha-beta model.

It is the *flow-level max-min* model.  The progressive filling that computes
the rates is in :mod:`clustersim.network.solver`; flows and what the network
reads from links and routes in :mod:`clustersim.network.flow`.

*The network* (:class:`Network`) is event-driven without a SimPy process per
flow:

* A timer queue holds the end of each flow's latency phase and its
  completion, as ``(flow id, version, flow)`` entries in per-time buckets
  under a heap of distinct times (collectives start and end many flows at the
  same instant; a heap of floats is cheap).  An entry whose version is no
  longer the flow's is stale and skipped (lazy invalidation).  One SimPy
  wake-up is pending for the earliest time; if an earlier time appears, a new
  wake-up is scheduled and the old one is ignored when it fires.
* Bytes remaining are materialised lazily: a flow stores
  ``(remaining, rate, last_update)`` and only updates ``remaining`` when its
  rate changes.  A flow completes exactly when its valid entry comes due.
* A flow whose latency ends while all its links are idle gets
  ``min(capacity)`` at once.  Otherwise arrivals, departures that leave other
  flows on a link, and bandwidth changes mark links dirty and schedule one
  recomputation at the current instant with priority 2 (after SimPy's
  ``URGENT`` = 0 and ``NORMAL`` = 1): all changes of one instant cost a single
  recomputation, run after every other event of that instant.  (A flow rated
  at once and joined by another flow later in the same instant is re-rated by
  that recomputation; no time has passed, so nothing differs.)
* A recomputation only visits the connected components (flows sharing links,
  transitively) of the dirty links.  A flow alone on its links gets
  ``min(capacity)`` without the solver.  Flows whose rate does not change keep
  their timer entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from typing import Any

import simpy
from simpy.events import NORMAL, Event

from ..errors import SimulationError
from .flow import (
    NO_FLOWS,
    Callback,
    Flow,
    LinkLike,
    LinkStats,
    RouteLike,
    overflow_message,
    stats_of_links,
)
from .routes import check_bandwidth, link_capacities, route_info
from .solver import _Solver
from .weighted import leave_weighted, recompute_weighted

_INF = math.inf

RECOMPUTE_PRIORITY = 2
"""SimPy priority of the batched rate recomputation: after URGENT (0) and NORMAL (1)."""

_ROUTE_CACHE_MAX = 1 << 18


class Network:
    """All links of a cluster and the flows on them.  See the module docstring.

    ``links[i].index`` must be ``i``.  Units: seconds, bytes, bytes/s.

    Counters: ``recomputations`` (batched rate recomputations that re-rated at
    least one flow), ``flows_started``, ``flows_completed``, ``flows_rerated``
    (flows whose rate a recomputation evaluated; flows outside the changed
    components are not counted), ``rate_changes`` (flows whose rate a
    recomputation changed) and ``solver_calls`` (components that needed
    progressive filling).  A flow that finds all its links idle when its
    latency ends is rated at once, without a recomputation.
    """

    def __init__(self, env: simpy.Environment, links: Sequence[LinkLike]) -> None:
        self.env = env
        self._links: list[Any] = list(links)
        n = len(self._links)
        self._cap = link_capacities(self._links)
        self._link_flows: list[Any] = [NO_FLOWS] * n  # a dict of its flows once it has one
        self._bytes = [0.0] * n
        self._busy = [0.0] * n
        self._since = [0.0] * n
        self._peak = [0] * n
        self._lmark = [-1] * n
        self._solver = _Solver(n)
        self._times: list[float] = []  # heap of the times that have a bucket
        self._buckets: dict[float, list[tuple[int, int, Flow]]] = {}
        self._stale = 0  # stale entries in the buckets (for compaction)
        self._wake_at = _INF
        self._wake_event: Event | None = None
        self._dirty: dict[int, None] = {}
        self._recompute_pending = False
        self._epoch = 0
        self._next_id = 0
        self._n_active = 0
        self._routes: dict[int, tuple[Any, tuple[int, ...], float, Any, float]] = {}
        self._weighted = 0  # weighted flows in their bandwidth phase
        self._wstate: Any = None  # the weighted recomputation's arrays (weighted.WeightedState)
        self.recomputations = 0
        self.flows_completed = 0
        self.flows_rerated = 0
        self.rate_changes = 0
        self.solver_calls = 0

    # ----------------------------------------------------------------- public

    @property
    def flows_started(self) -> int:
        """Transfers started so far."""
        return self._next_id

    @property
    def active_flows(self) -> int:
        """Flows in their bandwidth phase (holding bandwidth) now."""
        return self._n_active

    @property
    def in_flight(self) -> int:
        """Transfers started and not yet complete (latency or bandwidth phase)."""
        return self._next_id - self.flows_completed

    def active(self) -> list[Flow]:
        """The flows in their bandwidth phase, by id (O(links + flows))."""
        found = {fid: flow for lf in self._link_flows for fid, flow in lf.items()}
        return [found[fid] for fid in sorted(found)]

    def bandwidth_Bps(self, link_index: int) -> float:
        """Current capacity of a link in bytes/s."""
        return self._cap[link_index]

    def transfer(
        self, route: RouteLike, size_bytes: float, notify: Any = None, tag: Any = None
    ) -> Flow:
        """Start moving ``size_bytes`` bytes over ``route`` now.

        Returns the :class:`Flow`, a SimPy event that succeeds (value ``None``)
        at the instant the last byte arrives.  ``route.latency_s`` seconds
        after the call the flow starts to share bandwidth; a zero-byte
        transfer finishes after the latency alone, and a transfer over an
        empty route at once (still through the SimPy queue, so the waiting
        process resumes in the same instant).

        With ``notify``, the flow is not used as an event: ``notify(flow)`` is
        called directly at completion (no SimPy event per flow; what
        high-volume callers such as collective schedules use), and ``tag`` is
        stored on the flow for the caller.

        *Weighted flows*: a route with a ``weights`` attribute makes a weighted
        flow (:mod:`clustersim.network.weighted`); a ``wire`` attribute (>= 1) puts
        ``wire x size_bytes`` on the links (:mod:`clustersim.collectives.bus`).
        """
        size = float(size_bytes)
        if not 0.0 <= size < _INF:
            raise SimulationError(f"transfer size must be finite and >= 0 B, got {size_bytes!r}")
        info = self._routes.get(id(route))
        if info is None or info[0] is not route:
            info = self._route_info(route)
        links, size = info[1], size * info[4]  # wire bytes
        env = self.env
        now = env._now  # Environment.now without the property call (hot path)
        fid = self._next_id
        self._next_id = fid + 1
        flow = Flow(env, fid, route, links, size, now)
        if info[3] is not None:
            flow.weights = info[3]
            flow.rate_cap = getattr(route, "rate_cap", _INF)
        if notify is not None:
            flow.notify = notify
            flow.tag = tag
        if not links:
            flow.arrival_s = now
            self._finish(flow, now)
        elif info[2] > 0.0:
            t = now + info[2]
            bucket = self._buckets.get(t)
            if bucket is None:
                self._buckets[t] = [(fid, -1, flow)]
                heappush(self._times, t)
                if t < self._wake_at and not self._recompute_pending:
                    self._arm()
            else:
                bucket.append((fid, -1, flow))
        else:
            self._arrive(flow, now)
        return flow

    def set_bandwidth(self, link_index: int, bandwidth_Bps: float) -> None:
        """Set a link's capacity (bytes/s) from now on.

        Bytes already moved are kept; the rates of the flows on the link (and
        of their component) are recomputed in the batched recomputation of
        this instant.
        """
        link = self._links[link_index]
        bw = check_bandwidth(bandwidth_Bps, link.name)
        if bw == self._cap[link_index]:
            return
        self._cap[link_index] = bw
        if self._link_flows[link_index]:
            self._dirty[link_index] = None
            if not self._recompute_pending:
                self._schedule_recompute()

    def link_stats(self, used_only: bool = False) -> list[LinkStats]:
        """Per-link bytes, busy time and peak concurrency up to ``env.now`` (of the links that
        ever held a flow only, with ``used_only``): :func:`.flow.stats_of_links`."""
        return stats_of_links(self, used_only)

    # --------------------------------------------------------------- internals

    def _route_info(self, route: RouteLike) -> tuple[Any, tuple[int, ...], float, Any, float]:
        """:func:`route_info` of ``route``, cached by ``id`` (the entry holds the route, so
        its id is not reused) unless weighted: a collective's phase, used once."""
        info = route_info(route, len(self._links))
        if len(self._routes) >= _ROUTE_CACHE_MAX:
            self._routes.clear()
        if info[3] is None:
            self._routes[id(route)] = info
        return info

    def _push(self, t: float, fid: int, version: int, flow: Flow) -> None:
        """Schedule a timer-queue entry at time ``t`` (does not arm)."""
        bucket = self._buckets.get(t)
        if bucket is None:
            self._buckets[t] = [(fid, version, flow)]
            heappush(self._times, t)
        else:
            bucket.append((fid, version, flow))

    def _schedule_recompute(self) -> None:
        self._recompute_pending = True
        Callback(self.env, self._recompute, RECOMPUTE_PRIORITY, 0.0)

    def _arm(self) -> None:
        """Make sure a wake-up is pending for the earliest time with a valid entry."""
        times = self._times
        buckets = self._buckets
        while times:
            t = times[0]
            for _, ver, flow in buckets[t]:
                if ver < 0 or ver == flow._version:
                    break
            else:  # only stale entries: drop the bucket
                heappop(times)
                self._stale -= len(buckets.pop(t))
                continue
            if not t < _INF:
                raise SimulationError(overflow_message(buckets[t]) or f"t = {t}")
            if t < self._wake_at:
                self._wake_at = t
                delay = t - self.env.now
                self._wake_event = Callback(
                    self.env, self._on_wake, NORMAL, delay if delay > 0.0 else 0.0
                )
            return

    def _on_wake(self, event: Event) -> None:
        """Process every entry due at the wake-up's target time.

        Per bucket, completions first, then arrivals, so a link freed and
        taken at the same instant does not count both flows at once.  The
        bodies of :meth:`_arrive` and :meth:`_finish` are inlined here: this
        is the per-transfer hot path.
        """
        if event is not self._wake_event:
            return  # superseded by an earlier wake-up
        self._wake_event = None
        target = self._wake_at
        self._wake_at = -_INF  # no wake-ups while the due entries are processed
        env = self.env
        now = env._now
        if now > target:
            target = now
        times = self._times
        buckets = self._buckets
        link_flows = self._link_flows
        nbytes = self._bytes
        busy = self._busy
        since = self._since
        peak = self._peak
        cap = self._cap
        dirty = self._dirty
        schedule = env.schedule
        completed = 0
        n_active = self._n_active
        direct: list[Flow] = []  # completed flows whose caller asked for a direct call
        while times and times[0] <= target:
            bucket = buckets.pop(heappop(times))
            arrivals = None
            for fid, ver, flow in bucket:
                if ver < 0:
                    if arrivals is None:
                        arrivals = [flow]
                    else:
                        arrivals.append(flow)
                elif ver == flow._version:
                    # Departure: the last byte arrived.
                    size = flow.size_bytes
                    freed = False
                    if flow.weights is not None:
                        freed = leave_weighted(self, flow, now)
                    else:
                        for link in flow.links:
                            lf = link_flows[link]
                            del lf[fid]
                            nbytes[link] += size
                            if lf:
                                dirty[link] = None
                                freed = True
                            else:
                                busy[link] += now - since[link]
                    n_active -= 1
                    flow._version = ver + 1  # no entry of this flow is valid any more
                    flow._remaining = 0.0
                    flow._last = now
                    flow.rate_Bps = 0.0
                    if freed and not self._recompute_pending:
                        self._schedule_recompute()
                    flow.end_s = now
                    completed += 1
                    flow._ok = True
                    flow._value = None
                    if flow.notify is None:
                        schedule(flow)
                    else:
                        direct.append(flow)
                else:
                    self._stale -= 1
            if arrivals is None:
                continue
            for flow in arrivals:
                # Arrival: the latency is over (see _arrive).
                flow.arrival_s = now
                size = flow.size_bytes
                if size == 0.0:
                    flow.end_s = now
                    completed += 1
                    flow._ok = True
                    flow._value = None
                    if flow.notify is None:
                        schedule(flow)
                    else:
                        direct.append(flow)
                    continue
                flow._last = now
                n_active += 1
                fid = flow.id
                alone = True
                rate = _INF
                for link in flow.links:
                    lf = link_flows[link]
                    if lf:
                        alone = False
                        lf[fid] = flow
                        if len(lf) > peak[link]:
                            peak[link] = len(lf)
                    else:
                        since[link] = now
                        link_flows[link] = {fid: flow}
                        if not peak[link]:
                            peak[link] = 1
                        c = cap[link]
                        if c < rate:
                            rate = c
                if alone and flow.weights is None:
                    ver = flow._version + 1
                    flow._version = ver
                    flow.rate_Bps = rate
                    if rate > 0.0:
                        t = now + size / rate
                        bucket = buckets.get(t)
                        if bucket is None:
                            buckets[t] = [(fid, ver, flow)]
                            heappush(times, t)
                        else:
                            bucket.append((fid, ver, flow))
                else:
                    if flow.weights is not None:
                        self._weighted += 1
                    dirty[flow.links[0]] = None
                    if not self._recompute_pending:
                        self._schedule_recompute()
        self._n_active = n_active
        self.flows_completed += completed
        self._wake_at = _INF
        for flow in direct:  # state is consistent again: callers may start new flows
            flow.notify(flow)
        if not self._recompute_pending:
            self._arm()

    def _arrive(self, flow: Flow, now: float) -> None:
        """End of the latency phase: the flow starts to hold bandwidth.

        A flow that finds all its links idle is given ``min(capacity)`` at
        once (no recomputation).  If another flow joins one of its links at
        the same instant, the link is marked dirty and the recomputation of
        this instant re-rates both; no time passes in between, so the result
        is the same as if the flow had waited for the recomputation.
        """
        flow.arrival_s = now
        if flow.size_bytes == 0.0:
            self._finish(flow, now)
            return
        flow._last = now
        self._n_active += 1
        fid = flow.id
        link_flows = self._link_flows
        peak = self._peak
        cap = self._cap
        alone = True
        rate = _INF
        for link in flow.links:
            lf = link_flows[link]
            if lf:
                alone = False
                lf[fid] = flow
                if len(lf) > peak[link]:
                    peak[link] = len(lf)
            else:
                self._since[link] = now
                link_flows[link] = {fid: flow}
                if not peak[link]:
                    peak[link] = 1
                c = cap[link]
                if c < rate:
                    rate = c
        if alone and flow.weights is None:
            flow._version += 1
            flow.rate_Bps = rate
            if rate > 0.0:
                t = now + flow.size_bytes / rate
                self._push(t, fid, flow._version, flow)
                if t < self._wake_at and not self._recompute_pending:
                    self._arm()
            return
        if flow.weights is not None:
            self._weighted += 1
        self._dirty[flow.links[0]] = None  # one link: the component search reaches the rest
        if not self._recompute_pending:
            self._schedule_recompute()

    def _finish(self, flow: Flow, now: float) -> None:
        """Trigger the flow's event (as ``Event.succeed(None)`` does)."""
        flow.end_s = now
        self.flows_completed += 1
        flow._ok = True
        flow._value = None
        if flow.notify is not None:
            flow.callbacks.append(flow.notify)
        self.env.schedule(flow)

    def _recompute(self, _event: Event) -> None:
        """The batched recomputation of this instant (runs at priority 2).

        For each dirty link not yet visited: find its component by
        breadth-first search over link -> flows -> links, rate a lone flow
        with the minimum capacity of its links and larger components with
        :meth:`_Solver.fill`, then re-time the flows whose rate changed.
        """
        self._recompute_pending = False
        if self._weighted:
            recompute_weighted(self)
            return
        dirty, now, epoch = self._take_dirty()
        lmark = self._lmark
        link_flows = self._link_flows
        cap = self._cap
        rerated = 0
        changed = 0
        for start in dirty:
            lf = link_flows[start]
            if not lf or lmark[start] == epoch:
                continue
            if len(lf) == 1:
                # Fast path: a flow alone on all its links needs no solver.
                (flow,) = lf.values()
                links = flow.links
                rate = _INF
                for link in links:
                    if len(link_flows[link]) != 1:
                        break
                    c = cap[link]
                    if c < rate:
                        rate = c
                else:
                    for link in links:
                        lmark[link] = epoch
                    flow._mark = epoch
                    rerated += 1
                    if rate != flow.rate_Bps:
                        changed += 1
                        self._retime(flow, rate, now)
                    continue
            # Breadth-first search of the component of `start` (the list grows
            # while it is walked).  Links with a single flow are not walked:
            # only the tightest of each flow goes to the solver.
            lmark[start] = epoch
            comp_links = [start]
            comp_flows: list[Flow] = []
            private: list[int] = []
            for link in comp_links:
                for flow in link_flows[link].values():
                    if flow._mark == epoch:
                        continue
                    flow._mark = epoch
                    comp_flows.append(flow)
                    best = -1
                    best_cap = _INF
                    for l2 in flow.links:
                        if lmark[l2] != epoch:
                            lmark[l2] = epoch
                            if len(link_flows[l2]) > 1:
                                comp_links.append(l2)
                            else:
                                c = cap[l2]
                                if c < best_cap or (c == best_cap and l2 < best):
                                    best_cap = c
                                    best = l2
                    if best >= 0:
                        private.append(best)
            self.solver_calls += 1
            self._solver.fill(comp_links, comp_flows, link_flows, cap, private)
            rerated += len(comp_flows)
            changed += self._apply_rates(comp_flows, now)
        self._end_recompute(rerated, changed)

    def _take_dirty(self) -> tuple[dict[int, None], float, int]:
        """Start a recomputation: the dirty links (cleared), the time, a new search epoch."""
        dirty = self._dirty
        self._dirty = {}
        self._epoch += 1
        return dirty, self.env.now, self._epoch

    def _apply_rates(self, comp_flows: Sequence[Flow], now: float) -> int:
        """Re-time the flows whose solved rate (``_new``) differs; return how many did."""
        changed = 0
        for flow in comp_flows:
            if flow._new != flow.rate_Bps:
                changed += 1
                self._retime(flow, flow._new, now)
        return changed

    def _end_recompute(self, rerated: int, changed: int) -> None:
        """Count a recomputation, compact the timer queue if it is mostly stale, re-arm."""
        if rerated:
            self.recomputations += 1
            self.flows_rerated += rerated
            self.rate_changes += changed
        if self._stale > 4096 and self._stale > 4 * (self._next_id - self.flows_completed):
            self._compact()
        self._arm()

    def _retime(self, flow: Flow, rate: float, now: float) -> None:
        """Give ``flow`` a new rate from ``now``: materialise the bytes moved
        at the old rate, invalidate its entry, schedule the new completion."""
        old = flow.rate_Bps
        if old > 0.0:
            dt = now - flow._last
            if dt > 0.0:
                rest = flow._remaining - old * dt
                flow._remaining = rest if rest > 0.0 else 0.0
            self._stale += 1  # its previous entry
        flow._last = now
        flow.rate_Bps = rate
        flow._version += 1
        if rate > 0.0:
            self._push(now + flow._remaining / rate, flow.id, flow._version, flow)

    def _compact(self) -> None:
        """Drop stale entries (the valid ones keep their order)."""
        buckets: dict[float, list[tuple[int, int, Flow]]] = {}
        for t, bucket in self._buckets.items():
            keep = [e for e in bucket if e[1] < 0 or e[1] == e[2]._version]
            if keep:
                buckets[t] = keep
        self._buckets = buckets
        self._times = list(buckets)
        heapify(self._times)
        self._stale = 0
