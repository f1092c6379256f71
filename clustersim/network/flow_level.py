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

*The network* (:class:`Network`: its state and interface here, its timer queue in
:mod:`clustersim.network.timers`, its rate recomputation in
:mod:`clustersim.network.rates`) is event-driven without a SimPy process per flow:

* A timer queue holds the end of each flow's latency phase and its
  completion, as ``(flow id, version, flow)`` entries in per-time buckets
  under a heap of distinct times (collectives start and end many flows at the
  same instant; a heap of floats is cheap).  An entry whose version is no
  longer the flow's is stale and skipped (lazy invalidation).  One SimPy
  wake-up is pending for the earliest time, put into SimPy's queue at that time
  itself (:class:`~clustersim.network.flow.WakeAt`: a flow's arrival and completion are
  exactly ``start + latency`` and ``arrival + bytes / rate``, never an ulp off through
  ``now + delay``); if an earlier time appears, a new wake-up is scheduled and the old
  one is ignored when it fires.
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
from dataclasses import dataclass
from heapq import heappush
from typing import Any

import numpy as np
import simpy
from simpy.events import Event

from ..errors import SimulationError
from ..memo import RepeatMemo
from .flow import NO_FLOWS, Flow, LinkLike, RouteLike
from .rates import RateRecomputation
from .routes import check_bandwidth, link_capacities, route_info, route_timing
from .solver import _Solver
from .timers import FlowTimers

_INF = math.inf

_ROUTE_CACHE_MAX = 1 << 18
_WEIGHTED_ROUTES_KEPT = 1024
"""Weighted routes (by their links and weights tuples) whose checked parts are kept."""


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


class Network(FlowTimers, RateRecomputation):
    """All links of a cluster and the flows on them.  See the module docstring.

    ``links[i].index`` must be ``i``.  Units: seconds, bytes, bytes/s.

    Counters: ``recomputations`` (batched rate recomputations that re-rated at
    least one flow), ``flows_started``, ``flows_completed``, ``flows_rerated``
    (flows whose rate a recomputation evaluated; flows outside the changed
    components are not counted), ``rate_changes`` (flows whose rate a
    recomputation changed), ``solver_calls`` (components that needed
    progressive filling), ``fill_memo_hits`` (of those, the small ones whose rates were
    remembered from a component of the same routes: :mod:`clustersim.network.rates`) and
    ``kept_reuses`` (of those, large ones solved again without a search: only flows had
    left them since their last search); ``rings_whole``: rings played whole, without their
    sends in the timer queue (:mod:`clustersim.collectives.ring_replay`).  A flow that finds
    all its links idle when its latency ends is rated at once, without a recomputation.
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
        self._joins = 0
        """Bumped whenever flows take links or a capacity changes (arrivals, a failure's
        moves, :meth:`set_bandwidth`): a component found since is whole but for departures."""
        self._kept: Any = None
        """The last large component solved, for the next recomputation on it
        (:meth:`RateRecomputation._kept_component`)."""
        self._fill_memo: dict[tuple[int, ...], tuple[dict[int, float], list[Any]]] = {}
        """Small components' rates by their routes (:meth:`RateRecomputation._fill_remembered`)."""
        self._times: list[float] = []  # heap of the times that have a bucket
        self._buckets: dict[float, list[tuple[int, int, Flow]]] = {}
        self._stale = 0  # stale entries in the buckets (for compaction)
        self._wake_at = _INF
        self._wake_event: Event | None = None
        self._dirty: dict[int, None] = {}
        self._left: dict[tuple[int, ...], list[float]] = {}
        """This instant's departures from links that keep other flows: route -> their rates."""
        self._joined: list[Flow] = []
        """This instant's arrivals onto links that carry other flows."""
        self._swaps_only = True
        """Whether nothing else changed this instant (a bandwidth, a cancel, a new route)."""
        self._recompute_pending = False
        self._epoch = 0
        self._next_id = 0
        self._n_active = 0
        self._routes: dict[int, tuple[Any, tuple[int, ...], float, Any, float]] = {}
        self._weighted_routes: RepeatMemo[tuple[Any, Any, tuple[int, ...], Any]] = RepeatMemo(
            _WEIGHTED_ROUTES_KEPT
        )
        self._weighted = 0  # weighted flows in their bandwidth phase
        self._wstate: Any = None  # the weighted recomputation's arrays (weighted.WeightedState)
        self._reservation: Any = None
        """A ring reserved to be played whole (:mod:`clustersim.collectives.ring_replay`):
        anything that touches the network first puts its sends in (``materialise()``)."""
        self.recomputations = 0
        self.flows_completed = 0
        self.flows_rerated = 0
        self.rate_changes = 0
        self.solver_calls = 0
        self.fill_memo_hits = 0
        self.kept_reuses = 0
        self.rings_whole = 0

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
        if self._reservation is not None:
            self._reservation.materialise()
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
        if self._reservation is not None:
            self._reservation.materialise()
        size = float(size_bytes)
        if not 0.0 <= size < _INF:
            raise SimulationError(f"transfer size must be finite and >= 0 B, got {size_bytes!r}")
        info = self._routes.get(id(route))
        if info is None or info[0] is not route:
            info = self._route_info(route)
        _, links, latency, weights, wire = info
        env = self.env
        now = env._now  # Environment.now without the property call (hot path)
        fid = self._next_id
        self._next_id = fid + 1
        flow = Flow(env, fid, route, links, size * wire, now, notify, tag)  # wire bytes
        if weights is not None:
            flow.weights = weights
            flow.rate_cap = getattr(route, "rate_cap", _INF)
        if not links:
            flow.arrival_s = now
            self._finish(flow, now)
        elif latency > 0.0:
            t = now + latency
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
        if self._reservation is not None:
            self._reservation.materialise()
        link = self._links[link_index]
        bw = check_bandwidth(bandwidth_Bps, link.name)
        if bw == self._cap[link_index]:
            return
        self._cap[link_index] = bw
        self._fill_memo.clear()
        self._joins += 1
        if self._link_flows[link_index]:
            self._swaps_only = False
            self._dirty[link_index] = None
            if not self._recompute_pending:
                self._schedule_recompute()

    def settle(self) -> None:
        """Put a ring reserved to be played whole and not yet begun into the timer queue
        (its first sends as they were started), so that what is read between two runs is
        what the send-by-send play leaves (:mod:`clustersim.collectives.ring_replay`)."""
        if self._reservation is not None and self._reservation.pending:
            self._reservation.materialise()

    def link_stats(self, used_only: bool = False) -> list[LinkStats]:
        """Per-link bytes, busy time and peak concurrency up to ``env.now``; with
        ``used_only``, of the links :func:`used_links` finds (that ever held a flow)."""
        now, out = self.env.now, []
        used = used_links(self._peak, self._bytes, self._busy) if used_only else None
        for i in used if used is not None else range(len(self._links)):
            busy = self._busy[i]
            if self._link_flows[i]:
                busy += now - self._since[i]
            out.append(LinkStats(i, self._links[i].name, self._bytes[i], busy, self._peak[i]))
        return out

    # --------------------------------------------------------------- internals

    def _route_info(self, route: RouteLike) -> tuple[Any, tuple[int, ...], float, Any, float]:
        """:func:`route_info` of ``route``, cached by ``id`` (the entry holds the route, so
        its id is not reused).  A weighted route (a collective's phase) is made anew for
        each call, but a group's calls share its links and weights tuples: their checked
        link indices and merged weights are kept by the two tuples' ids."""
        weights = getattr(route, "weights", None)
        if weights is not None:
            key = (id(route.links), id(weights))
            kept = self._weighted_routes.get(key)
            if kept is not None and kept[0] is route.links and kept[1] is weights:
                latency, wire = route_timing(route)
                return (route, kept[2], latency, kept[3], wire)
        info = route_info(route, len(self._links))
        if info[3] is None:
            if len(self._routes) >= _ROUTE_CACHE_MAX:
                self._routes.clear()
            self._routes[id(route)] = info
        elif isinstance(route.links, tuple) and isinstance(weights, tuple):  # not changed later
            kept_parts = (route.links, weights, info[1], info[3])
            self._weighted_routes.offer((id(route.links), id(weights)), kept_parts)
        return info


# --------------------------------------------------------------------------- the link table


def used_links(peak: list[int], nbytes: list[float], busy: list[float]) -> list[int]:
    """Indices of the links that ever held a flow, carried bytes or were busy, from the
    network's per-link lists (numpy: a 131,072-GPU cluster has 1.4 M links, most of them
    idle in a one-replica run)."""
    held = (np.asarray(peak) > 0) | (np.asarray(nbytes) > 0.0) | (np.asarray(busy) > 0.0)
    return np.flatnonzero(held).tolist()  # type: ignore[no-any-return]


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
    net._fill_memo = {}
    net._solver = net._wstate = None
