"""A ring played whole: the sends of an uncontended regular ring timed step by step in numpy.

The flow-level network plays a ring all-reduce over ``n`` ranks as ``2 (n - 1) n`` sends,
each an arrival and a departure in its timer queue and a step of the schedule: about 4 us
of Python a send, 9 s for a 1 GB all-reduce over 1,024 GPUs.  Where nothing else can
touch the ring's links while it runs, every send is alone on its links when it arrives,
so the network rates it at its narrowest link at once, and the times of all its sends
follow from the ring's recurrence (position ``p`` sends to ``p + 1``; a send waits for
what its sender received and for its sender's previous send)::

    start[0, p]   = t0
    arrive[s, p]  = start[s, p] + latency[p]
    end[s, p]     = arrive[s, p] + bytes[s, p] x wire[p] / rate[p]
    start[s+1, p] = max(end[s, p - 1], end[s, p])

-- the operations :meth:`Network.transfer <clustersim.network.Network.transfer>` and its
timer queue do per send, in the same order, so the same floats to the last bit (IEEE
arithmetic is the same in numpy), one numpy step per ring step (plain Python for rings of
at most :data:`SMALL_SENDS` sends, where numpy's fixed cost per call is larger than the
arithmetic).  The links then carry what
the sends would have left on them (bytes and busy seconds added send by send in time
order, a peak of one flow), the counters count the sends, and each rank gets its
``collective`` record (and each send its ``transfer`` record where the schedule records
them) from the same times.

When (:func:`replayable`): the schedule is one regular ring (:attr:`Schedule.ring`) with
nothing to reduce at a cost, every send has bytes, every hop one route of its own with a
latency and no link of another hop, and the network is the flow-level one, idle (no
transfer in flight, no wake-up armed), with no failure model and nothing wrapped around it
but the invariant checker (which is then told the bytes the ring put on each link).

How it stays exact while the rest of the simulation goes on (:class:`RingReplay`):

1. At the call nothing is sent: the ring *reserves* the network and arms a wake-up at its
   first arrival, where the network would have armed its own.
2. Anything that touches the network before that -- a transfer, a bandwidth change --
   first *materialises* the ring: its first sends are put into the timer queue as they
   would have been at the call (same flow ids, same order) and the wake-up becomes the
   network's; from there it plays send by send as before.
3. At the first arrival the ring's times are computed step by step, stopping as soon as a
   send would end at or after the next event in SimPy's queue.  If none does, nothing can
   happen until the ring ends (only events make anything happen), so the ring is
   *committed*: one wake-up at its end books what it did and ends it.  Otherwise it is
   materialised there and plays send by send.
4. A run that stops before the first arrival (``run(until)``) materialises it
   (:meth:`Network.settle <clustersim.network.Network.settle>`).

So a ring runs whole only where it is alone in the whole simulation until it ends: an
nccl-tests point, a collective benchmark, a program of collectives one after another, a
ZeRO step's rings while every GPU waits for them.  A ring beside other work plays as it
always did.
"""

from __future__ import annotations

import math
from heapq import heappush
from typing import TYPE_CHECKING, Any

import numpy as np
from simpy.events import NORMAL, Event

from ..errors import SimulationError
from ..network import Network
from ..network.flow import NO_FLOWS, Flow, WakeAt
from .connections import pair_route

if TYPE_CHECKING:
    from .call import CollectiveCall
    from .execution import _Execution

REPLAY = True
"""Whether regular rings alone in the simulation are played whole (tests switch it off to
compare with the send-by-send play)."""

SMALL_SENDS = 4096
"""Rings of at most this many sends are timed in plain Python, larger ones in numpy."""

_INF = math.inf
_WRAPPED = ("transfer", "set_bandwidth", "_on_wake", "_arrive")
"""Network methods something may replace on the instance: a ring is played whole only
where nothing has but the invariant checker (:class:`~clustersim.network.monitor.
NetworkMonitor`, which is then told the bytes the ring's sends put on its links)."""


class _Hop:
    """Position ``p``'s hop to ``p + 1``: its route, links, latency, wire and rate alone."""

    __slots__ = ("route", "links", "latency", "wire", "rate")

    def __init__(self, route: Any, links: tuple[int, ...], latency: float, wire: float) -> None:
        self.route = route
        self.links = links
        self.latency = latency
        self.wire = wire
        self.rate = _INF


def replayable(run: _Execution) -> list[_Hop] | None:
    """The hops of ``run``'s ring when it can be played whole (module docstring), else None."""
    s = run.s
    net = run.network
    if not (REPLAY and s.ring and type(net) is Network and not run.reduce_cost):
        return None
    if s.stream is not None or s.routes is not None or getattr(run.sim, "_failures", None):
        return None
    own = vars(net)
    checker = own.get("_monitor")  # an invariant checker: it is told what the ring did
    installed = checker.installed if checker is not None else {}
    if any(k in own and own[k] is not installed.get(k) for k in _WRAPPED):
        return None
    if net._reservation is not None or net.in_flight or net._wake_at != _INF:
        return None
    if net._recompute_pending or net._weighted or net._wake_event is not None:
        return None
    n = s.n_ranks
    if n < 2 or len(s) % n or min(s.nbytes) <= 0.0:
        return None
    hops = []
    seen: set[int] = set()
    cap = net._cap
    for p in range(n):
        src, dst = s.src[p], s.dst[p]
        route = run._route(run.devices[src], run.devices[dst])
        if route is False:
            return None
        run.routes[src * run.n + dst] = route  # as start() keeps it
        info = net._routes.get(id(route))
        if info is None or info[0] is not route:
            info = net._route_info(route)
        _, links, latency, weights, wire = info
        if weights is not None or not _own_hop(links, latency, seen):
            return None
        hop = _Hop(route, links, latency, wire)
        hop.rate = min(cap[link] for link in links)  # the network's rate of a flow alone
        if not hop.rate > 0.0:
            return None
        hops.append(hop)
    return hops


def _own_hop(links: Any, latency: float, seen: set[int]) -> bool:
    """Whether a hop over ``links`` (indices) has a latency and none of the links ``seen``
    on the ring's hops before it; if so they are seen now."""
    if not links or not latency > 0.0 or not seen.isdisjoint(links):
        return False
    seen.update(links)
    return True


def plays_whole(call: CollectiveCall, topology: Any) -> bool:
    """Whether ``call`` (one slice, on the first channel), run alone on an idle network, is
    played whole: the ring algorithm's one-ring schedule built in bulk, with bytes, each hop
    on one route with a latency and no link of another hop (:func:`replayable`'s conditions
    that do not depend on the network's state); for work estimates."""
    if not (REPLAY and call.algorithm == "ring" and call.size_bytes > 0 and call.op != "barrier"):
        return False
    from .algorithm import algorithm
    from .protocol import PROTOCOLS, protocol_call
    from .ring import regular_ring

    protocol = PROTOCOLS.get(call.protocol) if call.protocol else None
    if protocol is not None:  # its routes (hop latency) and call (wire bytes), as run
        topology, call = protocol_call(algorithm(call.algorithm), call, topology, protocol)
    if not regular_ring(call):
        return False
    devices = call.devices
    seen: set[int] = set()
    for p, src in enumerate(devices):
        route = pair_route(topology, src, devices[(p + 1) % len(devices)])
        if route is False or not _own_hop({x.index for x in route.links}, route.latency_s, seen):
            return False
    return True


class RingReplay:
    """A regular ring reserved on its network (see the module docstring)."""

    pending = True
    """Not begun: :meth:`materialise` puts it into the network."""

    def __init__(self, run: _Execution, hops: list[_Hop]) -> None:
        self.run = run
        self.hops = hops
        self.network = run.network
        env = run.env
        self.t0 = t0 = env._now
        first = run.first
        s = run.s
        for p in range(len(hops)):  # as start() marks them
            for rank in (s.src[p], s.dst[p]):
                if t0 < first[rank]:
                    first[rank] = t0
        self.t1 = min(t0 + hop.latency for hop in hops)
        self.network._reservation = self
        self.event = WakeAt(env, self._due, NORMAL, self.t1)
        self.times: tuple[np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------ send by send

    def materialise(self, wake: Event | None = None) -> None:
        """Put the ring's first sends into the network as they would have been at the call,
        hand its wake-up to the network, and let the ring play send by send; ``wake``: the
        wake-up being processed now (the first arrival), which the network then handles."""
        net = self.network
        net._reservation = None
        run = self.run
        s = run.s
        env = run.env
        buckets, times = net._buckets, net._times
        checker = vars(net).get("_monitor")
        for p, hop in enumerate(self.hops):
            fid = net._next_id
            net._next_id = fid + 1
            size = float(s.nbytes[p])
            flow = Flow(env, fid, hop.route, hop.links, size * hop.wire, self.t0, run._arrived, p)
            if checker is not None:
                checker.flow_started(flow)
            t = self.t0 + hop.latency
            bucket = buckets.get(t)
            if bucket is None:
                buckets[t] = [(fid, -1, flow)]
                heappush(times, t)
            else:
                bucket.append((fid, -1, flow))
        net._wake_at = self.t1
        net._wake_event = self.event
        if wake is None:
            self.event.callbacks[0] = net._on_wake
        else:
            net._on_wake(wake)

    # ------------------------------------------------------------ whole

    def _due(self, event: Event) -> None:
        """The first arrival: commit the ring if nothing can happen before it ends, else
        play it send by send from here."""
        env = self.run.env
        small = len(self.run.s) <= SMALL_SENDS
        times = (self._timeline_lists if small else self._timeline)(env.peek())
        if times is None:
            self.materialise(event)
            return
        self.network._reservation = _COMMITTED
        self.times = times
        end = max(times[1][-1]) if small else float(times[1][-1].max())
        WakeAt(env, self._finish_lists if small else self._finish, NORMAL, end)

    def _timeline_lists(self, limit: float) -> tuple[list[list[float]], list[list[float]]] | None:
        """:meth:`_timeline` in plain Python (the same operations on the same floats): a
        small ring costs less so than in numpy, whose fixed cost per call is larger there."""
        hops = self.hops
        nbytes = self.run.s.nbytes
        n = len(hops)
        latency = [hop.latency for hop in hops]
        wire = [hop.wire for hop in hops]
        rate = [hop.rate for hop in hops]
        positions = range(n)
        starts: list[list[float]] = []
        ends: list[list[float]] = []
        start = [self.t0] * n
        for base in range(0, len(nbytes), n):
            end = [
                (start[p] + latency[p]) + (float(nbytes[base + p]) * wire[p]) / rate[p]
                for p in positions
            ]
            if not max(end) < limit:
                return None
            starts.append(start)
            ends.append(end)
            start = [max(end[p - 1], end[p]) for p in positions]
        return starts, ends

    def _finish_lists(self, _event: Event) -> None:
        """:meth:`_finish` of a ring timed by :meth:`_timeline_lists`."""
        net = self.network
        run = self.run
        s = run.s
        starts, ends = self.times  # type: ignore[misc]
        nbytes = s.nbytes
        n = len(self.hops)
        steps = range(len(ends))
        carried, busy, since, peak, link_flows = (
            net._bytes,
            net._busy,
            net._since,
            net._peak,
            net._link_flows,
        )
        last = run.last
        checker = vars(net).get("_monitor")
        final = ends[-1]  # a position's sends end later step by step: its last ends last
        for p, hop in enumerate(self.hops):
            wire, latency = hop.wire, hop.latency
            sizes = [float(nbytes[k * n + p]) * wire for k in steps]
            moving = [ends[k][p] - (starts[k][p] + latency) for k in steps]
            for link in hop.links:  # added send by send in time order, as departures do
                if checker is not None:
                    checker.bytes_sent(link, sizes)
                b, t = carried[link], busy[link]
                for size, seconds in zip(sizes, moving, strict=True):
                    b += size
                    t += seconds
                carried[link], busy[link] = b, t
                since[link] = starts[-1][p] + latency
                if not peak[link]:
                    peak[link] = 1
                if link_flows[link] is NO_FLOWS:
                    link_flows[link] = {}
            value = max(final[p], final[p - 1])  # p sends to p + 1, receives from p - 1
            rank = s.src[p]
            if value > last[rank]:
                last[rank] = value
        self._count(len(s))
        if run.record_transfers:
            flat_start = [x for row in starts for x in row]
            flat_end = [x for row in ends for x in row]
            for _, i in sorted(zip(flat_end, range(len(flat_end)))):
                run._record_transfer(i, flat_start[i], end_s=flat_end[i])
        run.left = 0
        run.finish()

    def _count(self, sends: int) -> None:
        """The network's counters of ``sends`` started and completed, and of this ring."""
        net = self.network
        net._reservation = None
        net._next_id += sends
        net.flows_completed += sends
        net._joins += 1
        net.rings_whole += 1

    def _timeline(self, limit: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Start and end of every send, shape (steps, n), by the ring's recurrence; None as
        soon as a send would end at or after ``limit`` (the next event of the simulation).
        A step's sends end after the step before's, so the last step ends the ring."""
        hops = self.hops
        s = self.run.s
        n = len(hops)
        steps = len(s) // n
        latency = np.array([hop.latency for hop in hops])
        wire = np.array([hop.wire for hop in hops])
        rate = np.array([hop.rate for hop in hops])
        nbytes = s.nbytes
        starts = np.empty((steps, n))
        ends = np.empty((steps, n))
        start = np.full(n, self.t0)
        for k in range(steps):  # a step's row at a time: only the times are kept whole
            starts[k] = start
            sizes = np.array(nbytes[k * n : (k + 1) * n], dtype=np.float64) * wire
            end = (start + latency) + sizes / rate
            if not end.max() < limit:
                return None
            ends[k] = end
            start = np.maximum(np.roll(end, 1), end)
        return starts, ends

    def _finish(self, _event: Event) -> None:
        """The ring's end: book on the links, the counters and the records what its sends
        did, then end the collective as its last send would have."""
        run = self.run
        s = run.s
        starts, ends = self.times  # type: ignore[misc]
        self._book_links(starts, ends)
        self._count(len(s))
        last = run.last
        final = ends[-1]  # a position's sends end later step by step: its last ends last
        rank_end = np.maximum(final, np.roll(final, 1))  # p sends to p + 1, receives from p - 1
        for p, value in enumerate(rank_end.tolist()):
            rank = s.src[p]
            if value > last[rank]:
                last[rank] = value
        if run.record_transfers:
            self._book_transfers(starts, ends)
        run.left = 0
        run.finish()

    def _book_links(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Each link's bytes and busy seconds, added send by send in time order (as the
        departures add them; a step's row at a time, no array of the whole ring beyond its
        times), its peak of one flow and its last arrival; and, under the invariant
        checker, the bytes its sends put on each link."""
        net = self.network
        hops = self.hops
        n = len(hops)
        nbytes = self.run.s.nbytes
        latency = np.array([hop.latency for hop in hops])
        wire = np.array([hop.wire for hop in hops])
        links = [link for hop in hops for link in hop.links]
        column = np.array([p for p, hop in enumerate(hops) for _ in hop.links], dtype=np.intp)
        carried = np.array([net._bytes[link] for link in links])
        busy = np.array([net._busy[link] for link in links])
        checker = vars(net).get("_monitor")
        expected = None if checker is None else np.array([checker.expected_bytes[i] for i in links])
        for k in range(len(ends)):  # sequential sums: the order the network adds them in
            sizes = np.array(nbytes[k * n : (k + 1) * n], dtype=np.float64) * wire
            carried = carried + sizes[column]
            busy = busy + (ends[k] - (starts[k] + latency))[column]
            if expected is not None:
                expected = expected + sizes[column]
        if checker is not None:
            for link, value in zip(links, expected.tolist(), strict=True):  # type: ignore[union-attr]
                checker.expected_bytes[link] = value
        link_flows, peak, since = net._link_flows, net._peak, net._since
        last_arrival = (starts[-1] + latency)[column].tolist()
        for link, b, t, arrived in zip(
            links, carried.tolist(), busy.tolist(), last_arrival, strict=True
        ):
            net._bytes[link] = b
            net._busy[link] = t
            since[link] = arrived
            if not peak[link]:
                peak[link] = 1
            if link_flows[link] is NO_FLOWS:
                link_flows[link] = {}

    def _book_transfers(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Each send's ``transfer`` record, in the order the sends ended."""
        run = self.run
        order = np.lexsort((np.arange(ends.size), ends.reshape(-1)))
        begin = starts.reshape(-1).tolist()
        finish = ends.reshape(-1).tolist()
        for i in order.tolist():
            run._record_transfer(i, begin[i], end_s=finish[i])


class _Committed:
    """The reservation of a committed ring: nothing may touch the network until it ends."""

    pending = False

    def materialise(self, wake: Event | None = None) -> None:
        raise SimulationError(
            "internal error: the network was touched while a ring played whole was running "
            "(clustersim.collectives.ring_replay); set ring_replay.REPLAY = False to go on"
        )


_COMMITTED = _Committed()
