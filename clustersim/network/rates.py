"""The flow-level network's rate recomputation: max-min fair rates, once per instant.

:class:`RateRecomputation` is the part of :class:`~clustersim.network.Network` that
re-rates flows: changes of one instant (arrivals, departures that leave other flows on
a link, bandwidth changes) mark links dirty and schedule one recomputation at priority
:data:`RECOMPUTE_PRIORITY`, after every other event of that instant; it visits only the
connected components of the dirty links, rates a lone flow with the minimum capacity of
its links and the others by progressive filling (:mod:`clustersim.network.solver`;
weighted flows: :mod:`clustersim.network.weighted`) -- a small component whose routes met
before, with no capacity changed since, takes the rates it got then, and a large one that
has only lost flows since its last search is solved again without searching for it
(:meth:`RateRecomputation._kept_component`) -- and re-times the flows whose rate changed.  It works on the state :class:`~clustersim.network.Network` sets up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heappush
from operator import attrgetter
from typing import NamedTuple

from simpy.events import Event

from .flow import Callback, Flow
from .weighted import recompute_weighted

_INF = math.inf

RECOMPUTE_PRIORITY = 2
"""SimPy priority of the batched rate recomputation: after URGENT (0) and NORMAL (1)."""

FILL_MEMO_MAX_FLOWS = 256
"""Components of at most this many flows have their rates remembered by their routes
(:meth:`RateRecomputation._fill_remembered`); larger ones (parameter servers: thousands of
flows whose mix changes at every recomputation) are always solved."""
FILL_MEMO_LIMIT = 16_384
"""Most components remembered (all forgotten when full)."""
KEEP_COMPONENTS = True
"""Whether a large component solved is kept for the next recomputation on it, which then
skips the search (:meth:`RateRecomputation._kept_component`); the rates and times are the
same either way (tests/test_rate_kept.py runs shipped scenarios and random networks both
ways)."""
KEEP_MIN_FLOWS = 256
"""A component of more flows than this is large: kept after its search, and re-timed in
flow-id order (so that same-time completions queue alike whether it was searched or kept);
smaller ones are searched every time (and remembered by their routes: ``FILL_MEMO_MAX_FLOWS``)."""

_flow_id = attrgetter("id")


class KeptComponent(NamedTuple):
    """A large component as its last search found it (:meth:`RateRecomputation._kept_component`)."""

    joins: int
    """The network's ``_joins`` then: the component is whole but for departures while equal."""
    linkset: set[int]
    """Its links of several flows then (a recomputation starting on one of them reuses it)."""
    links: list[int]
    """The same links, in order (those still of several flows, after a reuse)."""
    flows: list[Flow]
    """Its flows, by id (a large component is re-timed in that order)."""
    own: dict[int, tuple[float, int]]
    """Flow id -> (capacity, index) of its tightest link of its own."""


class RateRecomputation:
    """The batched rate recomputation of a :class:`~clustersim.network.Network` (a part of
    the network class: see the module docstring)."""

    def _schedule_recompute(self) -> None:
        self._recompute_pending = True
        Callback(self.env, self._recompute, RECOMPUTE_PRIORITY, 0.0)

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
        if self._swaps_only and self._joined and self._swapped():
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
            kept = self._kept
            if (
                KEEP_COMPONENTS
                and kept is not None
                and kept.joins == self._joins
                and start in kept.linkset
            ):
                comp_links, comp_flows, private = self._kept_component(kept, epoch)
                self.kept_reuses += 1
                self.solver_calls += 1
                self._solver.fill(comp_links, comp_flows, link_flows, cap, private)
                rerated += len(comp_flows)
                changed += self._apply_rates(comp_flows, now)
                continue
            # Breadth-first search of the component of `start` (the list grows
            # while it is walked).  Links with a single flow are not walked:
            # only the tightest of each flow goes to the solver.
            lmark[start] = epoch
            comp_links = [start]
            comp_flows: list[Flow] = []
            private: list[int] = []
            owners: list[int] = []  # the flow (id) of each link of ``private``
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
                        owners.append(flow.id)
            self.solver_calls += 1
            if len(comp_flows) <= FILL_MEMO_MAX_FLOWS:
                self._fill_remembered(comp_links, comp_flows, private)
            else:
                self._solver.fill(comp_links, comp_flows, link_flows, cap, private)
                if len(comp_flows) > KEEP_MIN_FLOWS:
                    comp_flows.sort(key=_flow_id)  # re-timed in one order, however found
                    own = dict(zip(owners, ((cap[x], x) for x in private), strict=True))
                    self._kept = KeptComponent(
                        self._joins, set(comp_links), comp_links, comp_flows, own
                    )
            rerated += len(comp_flows)
            changed += self._apply_rates(comp_flows, now)
        self._end_recompute(rerated, changed)

    def _kept_component(
        self,
        kept: KeptComponent,
        epoch: int,
    ) -> tuple[list[int], list[Flow], list[int]]:
        """The links, flows and single-flow links the search would find now for the
        component kept after its last search (one of more than :data:`KEEP_MIN_FLOWS`
        flows: parameter servers' thousands), marked visited in ``epoch``: what the solver
        gets is what it would get from the search, so the rates are the same to the bit.
        (A large component's flows are re-timed in flow-id order, so that same-time
        completions queue alike whether it was searched or kept.)

        Valid while no flow has taken a link since it was found (``_joins`` unchanged): its
        flows have only left, so what is left of it is the same flows less the departed, on
        the same links -- one component or several, which the solver takes together (it
        gives each flow what its own component gives it).  A link that had several flows
        keeps several (a link of the component) or one (then a candidate for its flow's
        tightest link of its own, beside the one kept); a link that had one still has it."""
        links, flows, own = kept.links, kept.flows, kept.own
        link_flows = self._link_flows
        lmark = self._lmark
        cap = self._cap
        comp_links = []
        for link in links:
            lmark[link] = epoch
            users = link_flows[link]
            if len(users) > 1:
                comp_links.append(link)
            elif users:  # one flow left: a link of its own now, for good
                (flow,) = users.values()
                key = (cap[link], link)
                found = own.get(flow.id)
                if found is None or key < found:
                    own[flow.id] = key
        comp_flows = []
        private = []
        for flow in flows:
            if flow.end_s == flow.end_s:  # left the network
                continue
            flow._mark = epoch
            comp_flows.append(flow)
            found = own.get(flow.id)
            if found is not None:
                lmark[found[1]] = epoch
                private.append(found[1])
        self._kept = kept._replace(joins=self._joins, links=comp_links, flows=comp_flows)
        return comp_links, comp_flows, private

    def _fill_remembered(
        self, comp_links: list[int], comp_flows: list[Flow], private: list[int]
    ) -> None:
        """:meth:`_Solver.fill` of a small component, remembered by the routes of its flows.

        Max-min rates depend only on the routes present (with their counts) and the
        capacities: the component's links, their flow counts and the private links the
        search hands the solver all follow from its routes, and every flow of one route is
        frozen at one rate.  So a component seen before with the same routes gets the same
        rates, to the bit, without the solver (the rings of a data-parallel flush meet the
        same routes at every step: 93% of the 1,024-GPU cut's components, 99.8% of a ring
        attention run's).  Routes are keyed by their links tuple's ``id``; the memo holds the
        tuples, so an id cannot be reused while it is remembered (a route made again with
        equal links is only a miss).  A capacity change forgets everything
        (:meth:`~clustersim.network.Network.set_bandwidth`)."""
        key = tuple(sorted([id(flow.links) for flow in comp_flows]))
        memo = self._fill_memo
        found = memo.get(key)
        if found is not None:
            self.fill_memo_hits += 1
            rates = found[0]
            for flow in comp_flows:
                flow._new = rates[id(flow.links)]
            return
        self._solver.fill(comp_links, comp_flows, self._link_flows, self._cap, private)
        if len(memo) >= FILL_MEMO_LIMIT:
            memo.clear()
        memo[key] = (
            {id(flow.links): flow._new for flow in comp_flows},
            [f.links for f in comp_flows],
        )

    def _take_dirty(self) -> tuple[dict[int, None], float, int]:
        """Start a recomputation: the dirty links (cleared), the time, a new search epoch."""
        dirty = self._dirty
        self._dirty = {}
        self._left = {}
        self._joined = []
        self._swaps_only = True
        self._epoch += 1
        return dirty, self.env.now, self._epoch

    def _swapped(self) -> bool:
        """The recomputation of an instant whose only changes are flows that left shared
        links and flows that arrived on exactly the same routes (a stream's next piece, a
        ring's next step), as many of each route: then every rate stays as it was, and
        each arrival takes the rate of a flow of its route that left.  True if so (the
        arrivals are rated and timed); False, with nothing changed, for the full
        recomputation.

        Exact, to the bit: max-min rates depend only on the routes present (with their
        counts) and the capacities, which are the same; progressive filling freezes the
        flows of one route together, at one rate, and its result does not depend on the
        order in which it meets flows or links (ties go by link index, and the equal
        shares it subtracts from a link commute).  It holds while every rate is that of the
        routes present, which each recomputation leaves true; a flow rated on its own this
        instant and joined since is the exception, checked."""
        left = self._left
        joined = self._joined
        for flow in joined:
            rates = left.get(flow.links)
            if not rates:
                return False
            flow._new = rates.pop()
        if any(left.values()):
            return False
        # A flow that arrived this instant onto idle links was rated on its own, at once,
        # trusting this recomputation to re-rate it if a later arrival joined it: then
        # the rates before the instant are not all still standing.
        now = self.env.now
        ids = {flow.id for flow in joined}
        link_flows = self._link_flows
        for flow in joined:
            for link in flow.links:
                for other in link_flows[link].values():
                    if other.arrival_s == now and other.id not in ids:
                        return False
        self._take_dirty()
        self._end_recompute(len(joined), self._apply_rates(joined, now))
        return True

    def _apply_rates(self, comp_flows: Sequence[Flow], now: float) -> int:
        """Re-time the flows whose solved rate (``_new``) differs; return how many did.

        :meth:`_retime` and :meth:`_push`, inlined: a component of thousands of flows that
        share links (parameter servers) re-times most of them at every recomputation."""
        changed = 0
        stale = 0
        buckets = self._buckets
        times = self._times
        for flow in comp_flows:
            rate = flow._new
            old = flow.rate_Bps
            if rate == old:
                continue
            changed += 1
            if old > 0.0:
                dt = now - flow._last
                if dt > 0.0:
                    rest = flow._remaining - old * dt
                    flow._remaining = rest if rest > 0.0 else 0.0
                stale += 1  # its previous entry
            flow._last = now
            flow.rate_Bps = rate
            version = flow._version + 1
            flow._version = version
            if rate > 0.0:
                t = now + flow._remaining / rate
                bucket = buckets.get(t)
                if bucket is None:
                    buckets[t] = [(flow.id, version, flow)]
                    heappush(times, t)
                else:
                    bucket.append((flow.id, version, flow))
        self._stale += stale
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
        at the old rate, invalidate its entry, schedule the new completion (as
        :meth:`_apply_rates` does for each flow of a component)."""
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
