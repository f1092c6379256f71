"""Watching a :class:`~clustersim.network.Network` for broken invariants as it runs.

A :class:`NetworkMonitor` wraps a few methods of one network *instance* (the
class and its hot path stay unchanged) and reports, through a callback:

* ``link capacity``: whenever rates change (a recomputation, a flow alone on
  idle links, a bandwidth change), the rates of the flows on every link whose
  flows changed sum to at most its bandwidth (relative :data:`RATE_REL_TOL`);
* ``bytes``: a flow completes with its bytes delivered; a flow moved to another
  route or stalled by a link failure (:mod:`clustersim.network.failures`) goes on
  with exactly the bytes it had left when it left its route; and at the end
  (:meth:`NetworkMonitor.final`), every flow started completed and every link
  carried exactly the bytes of the flows that crossed it (a moved flow: the bytes
  it moved on each of its routes);
* ``link down``: whenever rates change, no flow sits on a link that is down, and a
  down link's capacity is 0.

It lives in the network package because it reads the network's private state;
:class:`clustersim.invariants.Checker` uses it.  Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..units import format_bandwidth
from .failures import stalled_flows
from .flow_level import Network

RATE_REL_TOL = 1e-9
"""Relative tolerance of link capacity and byte accounting."""

TIME_TOL_S = 1e-12
"""Rounding tolerance of times, seconds per second of simulated time (flow completions;
:mod:`clustersim.invariants` also counts compute records overlapping by less as none)."""


WRAPPED = (
    "transfer",
    "_arrive",
    "_on_wake",
    "_recompute",
    "_retime",
    "set_bandwidth",
    "_apply_rates",
    "on_flow_leaving",
    "on_flow_entered",
)
"""What :class:`NetworkMonitor` puts on a network in place of its own methods (and hooks)."""


class NetworkMonitor:
    """Checks one network's invariants as it runs; ``violate(message)`` gets each violation."""

    def __init__(self, net: Network, violate: Callable[[str], None]) -> None:
        self.network = net
        self.violate = violate
        self.expected_bytes: list[float] = [0.0] * len(net._cap)
        """Bytes of the flows started over each link, by link index."""
        self._pending: set[int] = set()
        self._leaving: dict[int, float] = {}
        """Flow id -> bytes it had left when it left its route (moved or stalled)."""
        self._wrap(net)

    def final(self) -> list[str]:
        """Violations of the final state: flows that never completed, bytes unaccounted for."""
        out = _network_final(self.network, self.expected_bytes)
        for flow in stalled_flows(self.network):
            out.append(
                f"bytes: flow {flow.id} ({_flow_ends(flow)}) stalled with "
                f"{flow._remaining:.6g} bytes left and never resumed (no route came back)"
            )
        return out

    def flow_leaving(self, flow: Any, now: float) -> None:
        """``flow`` leaves its route (a failure moves or stalls it): what it had left no
        longer crosses its links."""
        left = flow.remaining_bytes(now)
        self._leaving[flow.id] = left
        for link, weight in flow.link_loads():
            self.expected_bytes[link] -= left * weight
        self._pending.update(flow.links)

    def flow_entered(self, flow: Any, now: float) -> None:
        """``flow`` is on its new route: it must go on with the bytes it had left."""
        left = self._leaving.pop(flow.id, flow.size_bytes)
        if abs(flow._remaining - left) > RATE_REL_TOL * max(flow.size_bytes, 1.0):
            self.violate(
                f"bytes: flow {flow.id} ({_flow_ends(flow)}) went on at t = {now:.12g} s with "
                f"{flow._remaining:.6g} bytes left, but had {left:.6g} left when it left its route"
            )
        for link, weight in flow.link_loads():
            self.expected_bytes[link] += left * weight
        self._pending.update(flow.links)

    def _wrap(self, net: Network) -> None:
        transfer, arrive, on_wake = net.transfer, net._arrive, net._on_wake
        recompute, retime, set_bw = net._recompute, net._retime, net.set_bandwidth
        apply_rates = net._apply_rates
        expected, pending = self.expected_bytes, self._pending

        def _transfer(route: Any, size_bytes: float, notify: Any = None, tag: Any = None) -> Any:
            flow = transfer(route, size_bytes, notify, tag)
            size = flow.size_bytes
            if flow.weights is None:  # flow.link_loads(), every weight 1, without the list
                for link in flow.links:
                    expected[link] += size
            else:
                for link, weight in flow.link_loads():
                    expected[link] += size * weight
            return flow

        def _arrive(flow: Any, now: float) -> None:
            arrive(flow, now)
            pending.update(flow.links)
            self._flush()

        def _on_wake(event: Any) -> None:
            if event is net._wake_event:
                self._before_wake(net)
            on_wake(event)
            self._flush()

        def _recompute(event: Any) -> None:
            recompute(event)
            self._flush()

        def _retime(flow: Any, rate: float, now: float) -> None:
            retime(flow, rate, now)
            pending.update(flow.links)

        def _apply_rates(comp_flows: Any, now: float) -> int:
            for flow in comp_flows:  # those it re-times (it inlines _retime)
                if flow._new != flow.rate_Bps:
                    pending.update(flow.links)
            return apply_rates(comp_flows, now)

        def _set_bandwidth(link_index: int, bandwidth_Bps: float) -> None:
            set_bw(link_index, bandwidth_Bps)
            pending.add(link_index)
            self._flush()

        net.transfer, net._arrive, net._on_wake = _transfer, _arrive, _on_wake
        net._recompute, net._retime, net.set_bandwidth = _recompute, _retime, _set_bandwidth
        net._apply_rates = _apply_rates  # type: ignore[method-assign]
        net.on_flow_leaving, net.on_flow_entered = self.flow_leaving, self.flow_entered  # type: ignore[attr-defined]
        self.installed = {name: net.__dict__[name] for name in WRAPPED}
        """The wrappers this monitor put on the network, by name."""
        net._monitor = self  # type: ignore[attr-defined]

    def flow_started(self, flow: Any) -> None:
        """A flow put into the network without :meth:`Network.transfer` (a ring played whole
        that is played send by send after all: :mod:`clustersim.collectives.ring_replay`):
        its bytes cross its links."""
        for link, weight in flow.link_loads():
            self.expected_bytes[link] += flow.size_bytes * weight

    def bytes_sent(self, link: int, sizes: Any) -> None:
        """Sends of ``sizes`` bytes each crossed ``link`` without passing through
        :meth:`Network.transfer` (a ring played whole); the network's own sum of them is
        checked at the end like any other."""
        total = self.expected_bytes[link]
        for size in sizes:
            total += size
        self.expected_bytes[link] = total

    def release(self) -> None:
        """Take the wrappers off the network (its own methods again): they and the network
        refer to each other, a cycle that would keep a finished run's state (and, through
        the checker, its records) until the collector found it."""
        for name in (*WRAPPED, "_monitor"):
            self.network.__dict__.pop(name, None)

    def _before_wake(self, net: Network) -> None:
        """Check the flows due at this wake-up: departures have delivered their bytes.

        The links of arrivals are checked after the wake-up (a flow alone on idle links is
        rated there, with no recomputation); a departure only takes load off its links, and
        the flows it leaves are re-rated through ``_apply_rates`` or ``_retime``, which
        mark their links."""
        now = net.env.now
        targets = {net._wake_at, now}
        pending = self._pending.update
        scale = max(1.0, now)
        for t in targets:
            for _fid, ver, flow in net._buckets.get(t, ()):
                if ver < 0:
                    pending(flow.links)
                    continue
                if ver != flow._version:
                    continue
                rate = flow.rate_Bps
                left = flow._remaining - rate * (now - flow._last)
                tol = RATE_REL_TOL * flow.size_bytes + rate * TIME_TOL_S * scale
                if abs(left) > tol:
                    self.violate(
                        f"bytes: flow {flow.id} ({_flow_ends(flow)}) completed at t = {now:.12g} s "
                        f"with {left:.6g} of {flow.size_bytes:.6g} bytes not delivered"
                    )

    def _flush(self) -> None:
        """Check the links whose rates changed, once no recomputation is pending."""
        net = self.network
        if net._recompute_pending:
            return
        failures = getattr(net, "failures", None)
        if failures is not None and failures.down_since:
            self._check_down(failures.down_since)
        if not self._pending:
            return
        link_flows, cap, links = net._link_flows, net._cap, net._links
        totals: dict[int, float] = {}
        weighted: dict[int, Any] = {}  # flows that load their links unevenly, by id
        for link in self._pending:
            flows = link_flows[link]
            if not flows:
                continue
            total = 0.0
            for flow in flows.values():
                if flow.weights is None:
                    total += flow.rate_Bps
                else:
                    weighted[flow.id] = flow
            totals[link] = total
        for flow in weighted.values():  # each once: its links with their weights, in step
            rate = flow.rate_Bps
            for link, weight in zip(flow.links, flow.weights, strict=True):
                if link in totals:
                    totals[link] += rate * weight
        for link, total in totals.items():
            if total > cap[link] * (1.0 + RATE_REL_TOL):
                flows = link_flows[link]
                self.violate(
                    f"link capacity: {links[link].name} carried {format_bandwidth(total)} "
                    f"({total!r} B/s, {len(flows)} flows) > its bandwidth "
                    f"{format_bandwidth(cap[link])} at t = {net.env.now:.12g} s"
                )
        self._pending.clear()

    def _check_down(self, down: Any) -> None:
        """No flow on a down link, and its capacity 0."""
        net = self.network
        for link in down:
            flows = net._link_flows[link]
            if flows or net._cap[link] > 0.0:
                ids = ", ".join(str(fid) for fid in list(flows)[:5])
                self.violate(
                    f"link down: {net._links[link].name} is down at t = {net.env.now:.12g} s "
                    f"but has capacity {net._cap[link]!r} B/s and {len(flows)} flows on it"
                    + (f" ({ids})" if ids else "")
                )


def _flow_ends(flow: Any) -> str:
    links = getattr(flow.route, "links", ())
    return f"{links[0].src} -> {links[-1].dst}" if links else "local"


def _network_final(net: Network, expected: list[float]) -> list[str]:
    """Every flow completed; every link carried the bytes of the flows that crossed it."""
    out = []
    if net.flows_completed != net.flows_started:
        out.append(f"bytes: {net.flows_started} flows started but {net.flows_completed} completed")
    carried = net._bytes
    for link, want in enumerate(expected):
        got = carried[link]
        if abs(got - want) > RATE_REL_TOL * max(abs(want), 1.0):
            out.append(
                f"bytes: link {net._links[link].name} carried {got!r} bytes, "
                f"the flows over it sent {want!r}"
            )
    return out
