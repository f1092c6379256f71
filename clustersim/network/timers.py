"""The flow-level network's timer queue: when latencies end and flows complete.

:class:`FlowTimers` is the part of :class:`~clustersim.network.Network` that keeps the
timer queue (``(flow id, version, flow)`` entries in per-time buckets under a heap of
distinct times; stale entries skipped and compacted) and handles what comes due: a flow's
arrival (its latency is over: it takes its links, rated at once when it is alone on
them) and its departure (its last byte arrived: it leaves its links and its event
succeeds).  It works on the state :class:`~clustersim.network.Network` sets up; the
module docstring of :mod:`clustersim.network.flow_level` states the model.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush

from simpy.events import NORMAL, Event

from ..errors import SimulationError
from .flow import NO_FLOWS, Flow, WakeAt, overflow_message
from .weighted import leave_weighted

_INF = math.inf


class FlowTimers:
    """The timer queue of a :class:`~clustersim.network.Network`, and the arrivals and
    departures it brings (a part of the network class: see the module docstring)."""

    def _push(self, t: float, fid: int, version: int, flow: Flow) -> None:
        """Schedule a timer-queue entry at time ``t`` (does not arm)."""
        bucket = self._buckets.get(t)
        if bucket is None:
            self._buckets[t] = [(fid, version, flow)]
            heappush(self._times, t)
        else:
            bucket.append((fid, version, flow))

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
                now = self.env._now
                self._wake_event = WakeAt(self.env, self._on_wake, NORMAL, t if t > now else now)
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
        left = self._left
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
                        self._swaps_only = False
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
                        if freed:  # its rate, for a flow of its route arriving now
                            rates = left.get(flow.links)
                            if rates is None:
                                left[flow.links] = [flow.rate_Bps]
                            else:
                                rates.append(flow.rate_Bps)
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
            self._joins += 1  # flows take links: a kept component may have grown
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
                        if lf is NO_FLOWS:
                            link_flows[link] = {fid: flow}
                        else:  # the link's own dict, emptied: no new dict per send
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
                        self._swaps_only = False
                    else:
                        self._joined.append(flow)
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
        self._joins += 1
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
                if lf is NO_FLOWS:
                    link_flows[link] = {fid: flow}
                else:
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
        if flow.weights is not None:
            self._weighted += 1
            self._swaps_only = False
        else:
            self._joined.append(flow)
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
