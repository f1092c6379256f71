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
as a heap of links keyed by ``(fair share, link index)``, the fair share of a
link being ``remaining capacity / unfrozen flows on it``.  The top entry, once
up to date, is the next bottleneck: its unfrozen flows are frozen at that
share and the capacity and flow count of every link they cross are reduced.
Freezing never lowers a link's fair share, so heap keys are lower bounds and
an out-of-date top entry is simply pushed back with its current share (lazy
increase-key, one entry per link).  Ties go to the lowest link index, so the
result is deterministic.  Cost ``O((L + F k) log L)`` for ``L`` links and
``F`` flows of ``k`` links each.  Components of at least
:data:`NUMPY_FILL_MIN_FLOWS` flows are solved by :func:`fill_arrays`, the same
steps vectorised with numpy (one step per bottleneck link), giving
bit-identical rates.

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

Determinism: all iteration is over lists and insertion-ordered dicts keyed by
integers or float times; entries due at the same time are handled in the
order they were scheduled (departures before arrivals).  Nothing depends on
hash seeds or ``id()`` (``id`` only keys a cache of validated routes), so the
same sequence of calls gives bit-identical times.

The module does not import :mod:`clustersim.topology`; it only reads these
attributes: a link has ``index`` (its position in the list given to
:class:`Network`), ``name``, ``bandwidth_Bps``, ``latency_s``; a route has
``links`` (a tuple of links) and ``latency_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush, heapreplace
from itertools import chain
from typing import Any, Protocol

import numpy as np
import simpy
from simpy.events import NORMAL, PENDING, Event

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
_NAN = math.nan

RECOMPUTE_PRIORITY = 2
"""SimPy priority of the batched rate recomputation: after URGENT (0) and NORMAL (1)."""

_ROUTE_CACHE_MAX = 1 << 18

NUMPY_FILL_MIN_FLOWS = 8192
"""Components with at least this many flows are solved by :func:`fill_arrays`
(vectorised); smaller ones by the heap loop of :meth:`_Solver.fill`, which has
no per-call set-up cost.  Both give bit-identical rates.  Measured (2 cores,
numpy 2.4): the heap loop is faster up to a few thousand flows (the arrays are
built from the flows at every call); at 19,000 flows over 1,024 shared links
the vectorised fill takes about 0.7x the loop's time."""


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

    __slots__ = ("rem", "cnt", "epoch", "g2l")

    def __init__(self, n_links: int) -> None:
        self.rem = [0.0] * n_links  # remaining capacity, bytes/s
        self.cnt = [0] * n_links  # unfrozen flows
        self.epoch = 0  # marks the flows frozen by the current fill
        self.g2l: np.ndarray | None = None  # link index -> local index (numpy fill), else -1

    def fill(
        self,
        comp_links: Sequence[int],
        comp_flows: Sequence[Any],
        users: Sequence[dict[int, Any]],
        cap: Sequence[float],
        private: Sequence[int] = (),
    ) -> None:
        """Set ``flow._new`` to the max-min fair rate of every flow in ``comp_flows``.

        ``users[l]`` holds the flows on link ``l``, all of them in
        ``comp_flows`` (a union of connected components).  Every link crossed
        by a flow of ``comp_flows`` must be in ``comp_links``, except links
        with a single flow: of those, it suffices to give in ``private`` the
        one with the smallest ``(capacity, index)`` of each flow (the others
        could only come out of the heap after it, when their flow is already
        frozen), which keeps the heap small.

        Progressive filling with a heap of ``(fair share, link)``.  Freezing
        flows at the current level ``s`` never lowers another link's fair
        share (``(rem - k s) / (n - k) >= rem / n`` when ``s <= rem / n``),
        so a heap key is a lower bound of the link's current share: the heap
        holds one entry per link, and an entry found out of date when it
        reaches the top is pushed back with the current share (lazy
        increase-key).  An up-to-date top entry is the bottleneck; ties go to
        the lowest link index.
        """
        if len(comp_flows) >= NUMPY_FILL_MIN_FLOWS:
            self._fill_numpy(comp_links, comp_flows, cap, private)
            return
        rem = self.rem
        cnt = self.cnt
        self.epoch += 1
        epoch = self.epoch
        heap = []
        for link in comp_links:
            n = len(users[link])
            cnt[link] = n
            c = cap[link]
            rem[link] = c
            heap.append((c / n if c > 0.0 else 0.0, link))
        for link in private:
            cnt[link] = 1
            c = cap[link]
            rem[link] = c
            heap.append((c if c > 0.0 else 0.0, link))
        heapify(heap)
        left = len(comp_flows)
        while heap:
            key, link = heap[0]
            n = cnt[link]
            if not n:
                heappop(heap)
                continue
            r = rem[link]
            share = r / n if r > 0.0 else 0.0
            if share > key:
                heapreplace(heap, (share, link))  # out of date: back in at its share
                continue
            heappop(heap)
            if share == _INF:
                break  # only unbounded links are left
            # `link` is the bottleneck: freeze its unfrozen flows at `share`.
            for flow in users[link].values():
                if flow._frz != epoch:
                    flow._frz = epoch
                    flow._new = share
                    left -= 1
                    for l2 in flow.links:
                        rem[l2] -= share
                        cnt[l2] -= 1
            if not left:
                break
        if left:
            for flow in comp_flows:
                if flow._frz != epoch:
                    flow._frz = epoch
                    flow._new = _INF

    def _fill_numpy(
        self,
        comp_links: Sequence[int],
        comp_flows: Sequence[Any],
        cap: Sequence[float],
        private: Sequence[int],
    ) -> None:
        """:meth:`fill` by :func:`fill_arrays`: same arguments (``users`` is not needed)."""
        local = sorted(chain(comp_links, private))  # by link index: ties go to the lowest
        g2l = self.g2l
        if g2l is None or len(g2l) < len(cap):
            g2l = self.g2l = np.full(len(cap), -1, dtype=np.intp)
        where = np.array(local, dtype=np.intp)
        g2l[where] = np.arange(len(local), dtype=np.intp)
        lengths = np.fromiter(
            (len(flow.links) for flow in comp_flows), dtype=np.intp, count=len(comp_flows)
        )
        links = np.fromiter(
            chain.from_iterable(flow.links for flow in comp_flows),
            dtype=np.intp,
            count=int(lengths.sum()),
        )
        entry_link = g2l[links]
        g2l[where] = -1  # leave the scratch array clean
        entry_flow = np.repeat(np.arange(len(comp_flows), dtype=np.intp), lengths)
        keep = entry_link >= 0  # links with a single flow that is not its tightest
        capacity = np.array([cap[link] for link in local], dtype=np.float64)
        rates = fill_arrays(entry_link[keep], entry_flow[keep], len(comp_flows), capacity)
        for flow, rate in zip(comp_flows, rates.tolist()):
            flow._new = rate


def fill_arrays(
    entry_link: np.ndarray, entry_flow: np.ndarray, n_flows: int, capacity: np.ndarray
) -> np.ndarray:
    """Max-min fair rates by progressive filling, vectorised over flows and links.

    The flow-link incidence is given as entries: entry ``e`` says flow
    ``entry_flow[e]`` crosses link ``entry_link[e]`` (local indices, each pair
    at most once, entries grouped by flow in increasing flow order);
    ``capacity[l]`` is link ``l``'s capacity in bytes/s.  Returns the rate of
    each of the ``n_flows`` flows (``inf`` for a flow on no finite link).

    The same algorithm, step for step, as the heap loop of
    :meth:`_Solver.fill`, so the rates are bit-identical: each step takes the
    link of smallest ``(fair share, local index)`` among links with unfrozen
    flows (local indices must therefore follow link indices), freezes its
    unfrozen flows at that share and subtracts the share from every link
    they cross, one subtraction per flow in sequence (``np.subtract.at``),
    as the loop does.  One step per bottleneck link, each ``O(links)`` plus
    the frozen flows' entries.  (A weighted variant would take a weight per
    entry: shares ``rem / sum of unfrozen weights``, subtracting
    ``weight x share``.)
    """
    n_links = len(capacity)
    rem = np.array(capacity, dtype=np.float64)
    cnt = np.bincount(entry_link, minlength=n_links)
    by_link = np.argsort(entry_link, kind="stable")
    link_start = np.zeros(n_links + 1, dtype=np.intp)
    np.cumsum(cnt, out=link_start[1:])
    flow_len = np.bincount(entry_flow, minlength=n_flows)
    flow_start = np.zeros(n_flows + 1, dtype=np.intp)
    np.cumsum(flow_len, out=flow_start[1:])
    rates = np.full(n_flows, _INF)
    frozen = np.zeros(n_flows, dtype=bool)
    left = n_flows
    with np.errstate(divide="ignore", invalid="ignore"):
        share = _shares(rem, cnt)
        while left:
            link = int(np.argmin(share))
            level = float(share[link])
            if level == _INF:
                break  # only unbounded links (or none) are left
            flows = entry_flow[by_link[link_start[link] : link_start[link + 1]]]
            flows = flows[~frozen[flows]]
            frozen[flows] = True
            rates[flows] = level
            left -= len(flows)
            # The entries of the frozen flows: ranges flow_start[f] .. flow_start[f + 1].
            lens = flow_len[flows]
            offsets = np.repeat(flow_start[flows] - np.cumsum(lens) + lens, lens)
            touched = entry_link[offsets + np.arange(len(offsets), dtype=np.intp)]
            np.subtract.at(rem, touched, level)
            np.subtract.at(cnt, touched, 1)
            touched = np.unique(touched)
            share[touched] = _shares(rem[touched], cnt[touched])
    return rates


def _shares(rem: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Fair shares ``rem / cnt`` as :meth:`_Solver.fill` computes them: 0 where
    ``rem`` is not positive, ``inf`` where no unfrozen flow is left."""
    share = rem / cnt
    share[~(rem > 0.0)] = 0.0
    share[cnt == 0] = _INF
    return share


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
    flows = [_SolverFlow(tuple(links)) for links in flow_links]
    for i, flow in enumerate(flows):
        for link in flow.links:
            if link < 0 or link >= n_links:
                raise IndexError(f"flow {i}: link index {link} out of range 0..{n_links - 1}")
            lf = users[link]
            if i in lf:  # a link listed twice: keep one of each
                flow.links = tuple(dict.fromkeys(flow.links))
                for link2 in flow.links:
                    if link2 < 0 or link2 >= n_links:
                        raise IndexError(
                            f"flow {i}: link index {link2} out of range 0..{n_links - 1}"
                        )
                    users[link2][i] = flow
                break
            lf[i] = flow
    active = [f for f in flows if f.links]
    if active:
        comp_links = [link for link in range(n_links) if users[link]]
        _Solver(n_links).fill(comp_links, active, users, cap)
    return [flow._new if flow.links else _INF for flow in flows]


def _fill_weighted(
    comp_links: Sequence[int],
    comp_flows: Sequence[Flow],
    users: Sequence[dict[int, Flow]],
    cap: Sequence[float],
) -> None:
    """Set ``flow._new`` to the weighted max-min fair rate of every flow of a component.

    A flow with weight ``w`` on link ``l`` (1 when the flow has no weights)
    uses ``w x rate`` of its capacity.  Progressive filling: every unfrozen
    flow's rate rises at the same pace; the link whose ``remaining capacity /
    sum of its unfrozen flows' weights`` is smallest saturates first and its
    flows freeze at that level.  As in :meth:`_Solver.fill`, freezing at a
    level ``s <= rem / W`` never lowers another link's level (``(rem - w s) /
    (W - w) >= rem / W``), so the heap keys are lower bounds (lazy
    increase-key) and ties go to the lowest link index.  ``comp_links`` must
    hold every link the flows cross.
    """
    rem: dict[int, float] = {}
    wsum: dict[int, float] = {}
    cnt: dict[int, int] = {}
    for link in comp_links:
        rem[link] = cap[link]
        wsum[link] = 0.0
        cnt[link] = len(users[link])
    for flow in comp_flows:
        for link, w in flow.link_loads():
            wsum[link] += w
    heap = [(_level(rem[link], wsum[link]), link) for link in comp_links]
    capped = {}
    for flow in comp_flows:
        if flow.rate_cap < _INF:
            capped[-1 - flow.id] = flow
            heap.append((flow.rate_cap, -1 - flow.id))
    heapify(heap)
    frozen: set[int] = set()

    def freeze(flow: Flow, rate: float) -> None:
        """Fix ``flow``'s rate and take its use off every link it crosses."""
        frozen.add(flow.id)
        flow._new = rate
        for l2, w in flow.link_loads():
            rem[l2] -= w * rate
            wsum[l2] -= w
            cnt[l2] -= 1

    while heap:
        key, link = heap[0]
        if link < 0:  # a flow's rate cap
            heappop(heap)
            if capped[link].id not in frozen:
                freeze(capped[link], key)
            continue
        if not cnt[link]:
            heappop(heap)
            continue
        share = _level(rem[link], wsum[link])
        if share > key:
            heapreplace(heap, (share, link))
            continue
        heappop(heap)
        if share == _INF:
            break
        for flow in users[link].values():
            if flow.id not in frozen:
                freeze(flow, share)
        if len(frozen) == len(comp_flows):
            break
    for flow in comp_flows:
        if flow.id not in frozen:
            flow._new = _INF


def _level(rem: float, wsum: float) -> float:
    """Rate at which a link with ``rem`` bytes/s left fills up under flows of total weight ``wsum``."""
    if wsum <= 0.0:
        return _INF
    return rem / wsum if rem > 0.0 else 0.0


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

    Timer queue: a heap of distinct times plus, per time, a bucket (list) of
    ``(flow id, version, flow)`` entries due then, in the order they were
    scheduled.  Collectives start and finish many flows at the same instant,
    and a heap of plain floats is much cheaper than one of tuples.

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
        self._routes: dict[int, tuple[Any, tuple[int, ...], float, Any]] = {}
        self._weighted = 0  # weighted flows in their bandwidth phase
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
        found: dict[int, Flow] = {}
        for lf in self._link_flows:
            found.update(lf)
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

        *Weighted flows*: a route with a ``weights`` attribute (one positive
        float per link, or None) makes a flow that uses ``weights[i] x rate``
        bytes/s of link ``i`` -- a stand-in for several flows moving in step,
        such as a whole collective in the congestion-aware analytical model
        (:mod:`clustersim.collectives.fluid`).  Its ``size_bytes`` and rate
        are per unit of weight.  Rates are then *weighted* max-min fair:
        every flow's rate rises at the same pace until a link is full, a
        weight-2 flow using twice the capacity of a weight-1 flow on a link.
        With all weights 1 this is plain max-min fairness.
        """
        size = float(size_bytes)
        if not 0.0 <= size < _INF:
            raise SimulationError(
                f"transfer size must be finite and >= 0 bytes, got {size_bytes!r}"
            )
        info = self._routes.get(id(route))
        if info is None or info[0] is not route:
            info = self._route_info(route)
        links = info[1]
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
        bw = self._check_bandwidth(bandwidth_Bps, link.name)
        if bw == self._cap[link_index]:
            return
        self._cap[link_index] = bw
        if self._link_flows[link_index]:
            self._dirty[link_index] = None
            if not self._recompute_pending:
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

    def _route_info(self, route: RouteLike) -> tuple[Any, tuple[int, ...], float]:
        """``(route, distinct link indices, latency_s)``, validated and cached by ``id``.

        The cache holds a reference to the route, so its ``id`` cannot be
        reused by another object while the entry exists.
        """
        n = len(self._links)
        idx = []
        for link in route.links:
            i = link.index
            if not (isinstance(i, int) and 0 <= i < n):
                raise SimulationError(
                    f"link {getattr(link, 'name', link)!r}: index {i!r} not in 0..{n - 1}"
                )
            idx.append(i)
        latency = float(route.latency_s)
        if not 0.0 <= latency < _INF:
            raise SimulationError(
                f"route latency must be finite and >= 0 s, got {route.latency_s!r}"
            )
        weights = getattr(route, "weights", None)
        if weights is None:
            info = (route, tuple(dict.fromkeys(idx)), latency, None)
        else:
            info = self._weighted_route_info(route, idx, weights, latency)
        if len(self._routes) >= _ROUTE_CACHE_MAX:
            self._routes.clear()
        self._routes[id(route)] = info
        return info

    @staticmethod
    def _weighted_route_info(
        route: RouteLike, idx: list[int], weights: Sequence[float], latency: float
    ) -> tuple[Any, tuple[int, ...], float, tuple[float, ...]]:
        """Route info of a weighted route: a link listed twice adds its weights."""
        if len(weights) != len(idx):
            raise SimulationError(f"weighted route: {len(weights)} weights for {len(idx)} links")
        merged: dict[int, float] = {}
        for link, w in zip(idx, weights, strict=True):
            w = float(w)
            if not 0.0 < w < _INF:
                raise SimulationError(f"link weight must be finite and > 0, got {w!r}")
            merged[link] = merged.get(link, 0.0) + w
        return (route, tuple(merged), latency, tuple(merged.values()))

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
        _Callback(self.env, self._recompute, RECOMPUTE_PRIORITY, 0.0)

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
            if t < self._wake_at:
                self._wake_at = t
                delay = t - self.env.now
                self._wake_event = _Callback(
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
                        freed = self._leave_weighted(flow, now)
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
                        lf[fid] = flow
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
                lf[fid] = flow
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
        # One link suffices: the component search reaches all of the flow's links.
        if flow.weights is not None:
            self._weighted += 1
        self._dirty[flow.links[0]] = None
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
            self._recompute_weighted()
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

    def _leave_weighted(self, flow: Flow, now: float) -> bool:
        """Departure bookkeeping of a weighted flow (see :meth:`_on_wake`): remove it from
        its links, count ``size x weight`` bytes on each; True if a link keeps flows."""
        freed = False
        fid = flow.id
        size = flow.size_bytes
        for link, w in zip(flow.links, flow.weights or (), strict=True):
            lf = self._link_flows[link]
            del lf[fid]
            self._bytes[link] += size * w
            if lf:
                self._dirty[link] = None
                freed = True
            else:
                self._busy[link] += now - self._since[link]
        self._weighted -= 1
        return freed

    def _recompute_weighted(self) -> None:
        """The batched recomputation while weighted flows are active.

        Like :meth:`_recompute`, but every link of a component goes to the
        solver (a lone weighted flow's rate is ``min(capacity / weight)``,
        not ``min(capacity)``), and components holding a weighted flow are
        solved by :func:`_fill_weighted`.  Few flows are weighted (one per
        collective phase), so this path is not tuned for size.
        """
        dirty, now, epoch = self._take_dirty()
        lmark = self._lmark
        link_flows = self._link_flows
        rerated = changed = 0
        for start in dirty:
            if not link_flows[start] or lmark[start] == epoch:
                continue
            lmark[start] = epoch
            comp_links = [start]
            comp_flows: list[Flow] = []
            weighted = False
            for link in comp_links:
                for flow in link_flows[link].values():
                    if flow._mark == epoch:
                        continue
                    flow._mark = epoch
                    comp_flows.append(flow)
                    weighted = weighted or flow.weights is not None
                    for l2 in flow.links:
                        if lmark[l2] != epoch:
                            lmark[l2] = epoch
                            comp_links.append(l2)
            self.solver_calls += 1
            if weighted:
                _fill_weighted(comp_links, comp_flows, link_flows, self._cap)
            else:
                self._solver.fill(comp_links, comp_flows, link_flows, self._cap)
            rerated += len(comp_flows)
            changed += self._apply_rates(comp_flows, now)
        self._end_recompute(rerated, changed)

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
