"""Link failures: links that go down and come back up, and the flows they move or stall.

A link that is *down* carries nothing: its capacity is 0 and no flow sits on it.
:class:`LinkFailures` attaches to one :class:`~clustersim.network.Network` *instance*
the first time a failure is scheduled (the class and its hot path stay unchanged,
so a run without failures pays nothing):

* **Down.**  When a link goes down, every flow on it (bandwidth phase) leaves it with
  the bytes it has already moved kept: only its remaining bytes continue.  It moves to
  one of the equal-cost routes between its ends that avoids every down link (chosen
  by a CRC-32 of ``"src|dst|flow id"`` among those left, as ECMP chooses), or, when
  none is left, it *stalls*: it holds no link, has rate 0 and makes no progress.  A
  flow still in its latency phase moves the same way (its latency is not paid again),
  or stalls until its route is back.
* **New flows** whose route touches a down link take another route that avoids every
  down link, or start stalled.
* **Up.**  When a link comes back (every window that took it down has ended), its
  capacity is restored, and the stalled flows whose route (or one of its equal-cost
  alternatives) is whole again resume, in the order they stalled, from the bytes they
  had left; a flow still owing latency pays the rest of it.  Flows in flight that
  were moved *stay where they are*: only new flows and resumed flows use the link
  again (a real fabric does not move a connection back either).

Weighted flows (the analytical model's collectives) have no alternative route: they
stall while a link of theirs is down.  Windows of one link may overlap: the link is
down while any of them is open.

Byte accounting: a link is credited with the bytes a flow moved while on it, so links
on both routes are credited the whole flow and each link once per byte.  (The network
credits a flow's size to the links it completes on; a moved flow's new links are
debited the bytes it moved before, so in the middle of a run their count can be
transiently low.)

The timeline: each down window is a ``link_down`` record (resource: the link's name)
and each stall a ``stall`` record on the flow's source device (bytes: those left when
it stalled), all booked at the end of :meth:`Simulation.run` and clipped to the end of the
run's work (so a failure after the workload ended does not lengthen the run).  Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from simpy.events import NORMAL

from ..errors import ScenarioError, SimulationError
from .cancel import leave_links
from .flow import Callback, Flow
from .flow_level import Network

_INF = math.inf

LINK_DOWN = "link_down"
"""Record kind of a window in which a link is down."""
STALL = "stall"
"""Record kind of a flow that had no route left, from the stall to its resumption."""
FAULT_KINDS = frozenset({LINK_DOWN, STALL})
"""Record kinds booked by link failures."""

Book = Callable[..., None]
"""``Simulation.book``: resource, kind, label, start_s, end_s, bytes, flops, src, dst."""
RoutesBetween = Callable[[str, str], Sequence[Any]]
"""``Topology.routes``: the equal-cost routes between two devices."""


@dataclass(slots=True)
class _Stall:
    """A stalled flow: since when, when its latency phase ends (nan: it had ended), from
    when its stall is not booked yet, and its bytes left."""

    flow: Flow
    since_s: float
    due_s: float
    booked_s: float
    bytes_left: float


class LinkFailures:
    """The down links of one network and the flows they moved or stalled (module doc)."""

    def __init__(self, network: Network, routes_between: RoutesBetween, book: Book) -> None:
        self.network = network
        self.env = network.env
        self.routes_between = routes_between
        self.book = book
        n = len(network._cap)
        self.down = [0] * n
        """Open down windows per link (down while above 0)."""
        self.n_down = 0
        """Links down now."""
        self.restore: dict[int, float] = {}
        """Capacity (bytes/s) each down link gets back when it comes up."""
        self.down_since: dict[int, float] = {}
        """Down link -> start of the part of its window not booked yet."""
        self.stalled: dict[int, _Stall] = {}
        """Flow id -> its stall, in the order flows stalled."""
        self.reroutes = 0
        """Flows moved to another route because a link of theirs went down (or was down
        when they started)."""
        self.stalls = 0
        """Times a flow stalled with no route left."""
        self.links_failed = 0
        """Down windows that began."""
        self._windows: list[tuple[int, _Stall | None, float, float]] = []
        """Down windows ``(link, None, start_s, end_s)`` and stalls ``(-1, stall, start_s,
        end_s)`` that ended, booked by :meth:`close`."""
        self._transfer = network.transfer
        self._set_bandwidth = network.set_bandwidth
        network.transfer = self._transfer_avoiding_down  # type: ignore[method-assign]
        network.set_bandwidth = self._set_bandwidth_unless_down  # type: ignore[method-assign]
        network.failures = self  # type: ignore[attr-defined]

    # ----------------------------------------------------------------- public

    def schedule(self, indices: Iterable[int], at_s: float, repair_s: float | None) -> None:
        """Take links ``indices`` down at ``at_s`` (seconds) and up again at ``repair_s``
        (None: never).  SimulationError for a time that is not finite and >= now, or a
        repair not after the failure."""
        links = list(dict.fromkeys(int(i) for i in indices))
        for i in links:
            if not 0 <= i < len(self.down):
                raise SimulationError(f"link index {i} not in 0..{len(self.down) - 1}")
        now = self.env.now
        if not now <= at_s < _INF:
            raise SimulationError(f"a link failure at {at_s!r} s is not a finite time >= now")
        if repair_s is not None and not at_s < repair_s < _INF:
            raise SimulationError(
                f"a link repair at {repair_s!r} s is not a finite time after the failure"
            )
        if not links:
            return
        Callback(self.env, lambda _e: self.take_down(links), NORMAL, at_s - now)
        if repair_s is not None:
            Callback(self.env, lambda _e: self.bring_up(links), NORMAL, repair_s - now)

    def take_down(self, indices: Sequence[int]) -> None:
        """Links ``indices`` go down now: their flows move or stall."""
        now = self.env.now
        newly = []
        for i in indices:
            self.links_failed += 1
            self.down[i] += 1
            if self.down[i] == 1:
                newly.append(i)
                self.n_down += 1
                self.restore[i] = self.network._cap[i]
                self.down_since[i] = now
                self._set_bandwidth(i, 0.0)
        if newly:
            self._evacuate(newly, now)

    def bring_up(self, indices: Sequence[int]) -> None:
        """One down window of each of links ``indices`` ends now; links with none left come
        up, and the stalled flows that have a route again resume."""
        now = self.env.now
        repaired = False
        for i in indices:
            if self.down[i] <= 0:
                continue
            self.down[i] -= 1
            if self.down[i]:
                continue
            repaired = True
            self.n_down -= 1
            self._windows.append((i, None, self.down_since.pop(i), now))
            self._set_bandwidth(i, self.restore.pop(i))
        if repaired:
            self._resume(now)

    def close(self, now: float, records: Iterable[Any]) -> None:
        """Book the down windows and stalls of the run that ends at ``now``, clipped to the
        end of its work (the latest end of ``records``, fault records left out): a link that
        fails or comes back after the workload ended does not lengthen the run.  Windows
        still open continue in the records of a later run of the same simulation."""
        for i in self.down_since:
            self._windows.append((i, None, self.down_since[i], now))
            self.down_since[i] = now
        for stall in self.stalled.values():
            self._windows.append((-1, stall, stall.booked_s, now))
            stall.booked_s = now
        end = max((r.end_s for r in records if r.kind not in FAULT_KINDS), default=0.0)
        windows, self._windows = self._windows, []
        for i, stall, start, stop in windows:
            if stop > end:
                stop = end
            if start >= stop and not (start == stop and stall is not None):
                continue
            if stall is None:
                link = self.network._links[i]
                self.book(
                    link.name, LINK_DOWN, "link down", start, stop, 0.0, 0.0, link.src, link.dst
                )
            else:
                flow = stall.flow
                src, dst = flow.route.links[0].src, flow.route.links[-1].dst
                label = "stall: no route"
                self.book(src, STALL, label, start, stop, stall.bytes_left, 0.0, src, dst)

    def is_down(self, route: Any) -> bool:
        """True when a link of ``route`` is down."""
        down = self.down
        return any(down[link.index] for link in route.links)

    # --------------------------------------------------------------- internals

    def _set_bandwidth_unless_down(self, link_index: int, bandwidth_Bps: float) -> None:
        """Network.set_bandwidth, deferred to the repair while the link is down (a
        degradation window that opens or closes while it is down)."""
        if self.down[link_index]:
            self.restore[link_index] = bandwidth_Bps
        else:
            self._set_bandwidth(link_index, bandwidth_Bps)

    def _transfer_avoiding_down(
        self, route: Any, size_bytes: float, notify: Any = None, tag: Any = None
    ) -> Flow:
        """Network.transfer, on a route that avoids the down links, or stalled."""
        if not self.n_down or not self.is_down(route):
            return self._transfer(route, size_bytes, notify, tag)
        net = self.network
        other = self._choose(route, net.flows_started)
        if other is not None:
            self.reroutes += 1
            return self._transfer(other, size_bytes, notify, tag)
        flow = self._transfer(route, size_bytes, notify, tag)
        self._stall(flow, self.env.now)
        return flow

    def _choose(self, route: Any, key: int) -> Any:
        """A route between ``route``'s ends that avoids every down link (``route`` itself
        when it is whole and has no alternatives), or None."""
        links = route.links
        options: Sequence[Any] = ()
        if getattr(route, "weights", None) is None:
            try:
                options = self.routes_between(links[0].src, links[-1].dst)
            except ScenarioError:  # an end is a switch (in-network reduction)
                options = ()
        if not any(tuple(o.links) == tuple(links) for o in options):
            options = (route, *options)
        alive = [o for o in options if not self.is_down(o)]
        if not alive:
            return None
        if len(alive) == 1:
            return alive[0]
        text = f"{links[0].src}|{links[-1].dst}|{key}"
        return alive[zlib.crc32(text.encode()) % len(alive)]

    def _evacuate(self, newly: Sequence[int], now: float) -> None:
        """Move or stall every flow that uses one of the links ``newly`` down."""
        net = self.network
        hit: dict[int, Flow] = {}
        for i in newly:
            hit.update(net._link_flows[i])
        for t in sorted(net._buckets):  # flows still in their latency phase
            for _fid, ver, flow in net._buckets[t]:
                if ver < 0 and any(self.down[i] for i in flow.links):
                    hit[flow.id] = flow
        for fid in sorted(hit):
            flow = hit[fid]
            other = self._choose(flow.route, fid)
            if other is None:
                self._stall(flow, now)
            else:
                self.reroutes += 1
                self._move(flow, other, now)

    def _move(self, flow: Flow, route: Any, now: float) -> None:
        """Put ``flow`` on ``route`` from now, keeping the bytes it has moved."""
        self._hook("on_flow_leaving", flow, now)
        if flow.arrival_s != flow.arrival_s:  # latency phase: nothing held yet
            self._set_route(flow, route)
        else:
            self._leave(flow, now)
            self._set_route(flow, route)
            self._enter(flow, now)
        self._hook("on_flow_entered", flow, now)

    def _stall(self, flow: Flow, now: float) -> None:
        """Take ``flow`` off the network until a route of it is whole again."""
        if flow.done or flow.id in self.stalled:
            return
        self._hook("on_flow_leaving", flow, now)
        due = math.nan
        if flow.arrival_s != flow.arrival_s:
            due = self._unschedule_arrival(flow)
        else:
            self._leave(flow, now)
        self.stalls += 1
        self.stalled[flow.id] = _Stall(flow, now, due, now, flow._remaining)

    def _resume(self, now: float) -> None:
        """Every stalled flow with a whole route again goes back on the network."""
        for fid, stall in list(self.stalled.items()):
            flow = stall.flow
            route = self._choose(flow.route, fid)
            if route is None:
                continue
            del self.stalled[fid]
            self._windows.append((-1, stall, stall.booked_s, now))
            self._set_route(flow, route)
            if stall.due_s == stall.due_s:  # its latency had not ended
                self._reschedule_arrival(flow, stall.due_s, now)
            else:
                self._enter(flow, now)
            self._hook("on_flow_entered", flow, now)

    def _hook(self, name: str, flow: Flow, now: float) -> None:
        """Tell a watcher of the network (the invariant checker's monitor) that ``flow`` is
        leaving its route (``on_flow_leaving``) or is on its new one (``on_flow_entered``)."""
        hook = getattr(self.network, name, None)
        if hook is not None:
            hook(flow, now)

    def _set_route(self, flow: Flow, route: Any) -> None:
        info = self.network._route_info(route)
        flow.route = route
        flow.links = info[1]
        if info[3] is not None:
            flow.weights = info[3]

    def _unschedule_arrival(self, flow: Flow) -> float:
        """Remove the latency-end entry of ``flow`` from the timer queue; return its time."""
        net = self.network
        for t, bucket in net._buckets.items():
            for k, entry in enumerate(bucket):
                if entry[1] < 0 and entry[2] is flow:
                    del bucket[k]
                    return t
        raise SimulationError(f"flow {flow.id} is in its latency phase but has no entry")

    def _reschedule_arrival(self, flow: Flow, due_s: float, now: float) -> None:
        net = self.network
        if due_s <= now:
            net._arrive(flow, now)
            return
        net._push(due_s, flow.id, -1, flow)
        if due_s < net._wake_at and not net._recompute_pending:
            net._arm()

    def _leave(self, flow: Flow, now: float) -> None:
        """Take ``flow`` (bandwidth phase) off its links, its moved bytes credited to them."""
        leave_links(self.network, flow, now)
        self.network._joins += 1  # off the network but not ended: no kept component holds

    def _enter(self, flow: Flow, now: float) -> None:
        """Put ``flow`` (bandwidth phase, off the network) on its links; the recomputation
        of this instant rates it."""
        net = self.network
        before = flow.size_bytes - flow._remaining
        link_flows, peak = net._link_flows, net._peak
        for link, weight in flow.link_loads():
            lf = link_flows[link]
            if not lf:
                net._since[link] = now
                lf = link_flows[link] = {}
            lf[flow.id] = flow
            if len(lf) > peak[link]:
                peak[link] = len(lf)
            net._bytes[link] -= before * weight  # the network credits the whole size at the end
        flow._last = now
        net._n_active += 1
        net._joins += 1
        if flow.weights is not None:
            net._weighted += 1
        net._swaps_only = False
        net._dirty[flow.links[0]] = None
        if not net._recompute_pending:
            net._schedule_recompute()


def apply_degradations(
    env: Any,
    network: Network,
    windows: Iterable[tuple[int, float, float, float]],
    fail: Callable[[list[int], float, float | None], None],
) -> None:
    """Schedule link degradation windows ``(link index, factor, start_s, end_s)``: a
    factor of 0 takes the link down for the window (``fail(indices, at_s, repair_s)``,
    repair None for an endless one); the others scale its bandwidth at the window's
    edges, multiplying where windows overlap."""
    by_link: dict[int, list[tuple[float, float, float]]] = {}
    for index, factor, start, end in windows:
        if factor == 0.0:
            fail([index], start, None if end == _INF else end)
        else:
            by_link.setdefault(index, []).append((start, end, factor))
    for index, scaled in by_link.items():
        env.process(_degrade(env, network, index, scaled))


def _degrade(
    env: Any, network: Network, link_index: int, windows: list[tuple[float, float, float]]
) -> Any:
    nominal = network._links[link_index].bandwidth_Bps
    edges = sorted({t for start, end, _ in windows for t in (start, end) if t != _INF})
    for t in edges:
        if t > env.now:
            yield env.timeout(t - env.now)
        factor = 1.0
        for start, end, f in windows:
            if start <= t < end:
                factor *= f
        network.set_bandwidth(link_index, nominal * factor)


def stalled_flows(network: Network) -> list[Flow]:
    """The flows of ``network`` stalled with no route now (none without failures)."""
    failures = getattr(network, "failures", None)
    return [s.flow for s in failures.stalled.values()] if failures is not None else []
