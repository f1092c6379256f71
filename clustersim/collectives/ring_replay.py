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
arithmetic is the same in numpy), one numpy step per ring step.  The links then carry what
the sends would have left on them (bytes and busy seconds added send by send in time
order, a peak of one flow), the counters count the sends, and each rank gets its
``collective`` record (and each send its ``transfer`` record where the schedule records
them) from the same times.

When (:func:`replayable`): the schedule is one regular ring (:attr:`Schedule.ring`) with
nothing to reduce at a cost, every send has bytes, every hop one route of its own with a
latency and no link of another hop, and the network is the flow-level one, idle (no
transfer in flight, no wake-up armed), with no checker or failure model wrapped around it.

How it stays exact while the rest of the simulation goes on (:class:`RingReplay`):

1. At the call nothing is sent: the ring *reserves* the network and arms a wake-up at its
   first arrival, where the network would have armed its own.
2. Anything that touches the network before that -- a transfer, a bandwidth change --
   first *materialises* the ring: its first sends are put into the timer queue as they
   would have been at the call (same flow ids, same order) and the wake-up becomes the
   network's; from there it plays send by send as before.
3. At the first arrival the ring's end time is computed.  If SimPy's queue holds nothing
   due before that end, nothing can happen until then (only events make anything happen),
   so the ring is *committed*: one wake-up at its end books what it did and ends it.
   Otherwise it is materialised there and plays send by send.

So a ring runs whole only where it is alone in the whole simulation until it ends: an
nccl-tests point, a collective benchmark, a program of collectives one after another.  A
ring beside other work plays as it always did.
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

if TYPE_CHECKING:
    from .execution import _Execution

REPLAY = True
"""Whether regular rings alone in the simulation are played whole (tests switch it off to
compare with the send-by-send play)."""

_INF = math.inf
_WRAPPED = ("transfer", "set_bandwidth", "_on_wake", "_arrive")
"""Network methods a checker or failure model replaces on the instance: a ring is not
played whole on such a network (it must see every send)."""


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
    if s.stream is not None or s.routes is not None or any(k in vars(net) for k in _WRAPPED):
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
        if weights is not None or not links or not latency > 0.0 or seen.intersection(links):
            return None
        seen.update(links)
        hop = _Hop(route, links, latency, wire)
        for link in links:  # the network's rate of a flow alone: its narrowest link
            c = cap[link]
            if c < hop.rate:
                hop.rate = c
        if not hop.rate > 0.0:
            return None
        hops.append(hop)
    return hops


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
        for p, hop in enumerate(self.hops):
            fid = net._next_id
            net._next_id = fid + 1
            size = float(s.nbytes[p])
            flow = Flow(env, fid, hop.route, hop.links, size * hop.wire, self.t0, run._arrived, p)
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
        starts, ends = self._timeline()
        end = float(ends.max())
        env = self.run.env
        if not env.peek() > end:
            self.materialise(event)
            return
        self.network._reservation = _COMMITTED
        self.times = (starts, ends)
        WakeAt(env, self._finish, NORMAL, end)

    def _timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of every send, shape (steps, n), by the ring's recurrence."""
        hops = self.hops
        s = self.run.s
        n = len(hops)
        steps = len(s) // n
        latency = np.array([hop.latency for hop in hops])
        wire = np.array([hop.wire for hop in hops])
        rate = np.array([hop.rate for hop in hops])
        sizes = np.array(s.nbytes, dtype=np.float64).reshape(steps, n) * wire
        starts = np.empty((steps, n))
        ends = np.empty((steps, n))
        start = np.full(n, self.t0)
        for k in range(steps):
            starts[k] = start
            end = (start + latency) + sizes[k] / rate
            ends[k] = end
            start = np.maximum(np.roll(end, 1), end)
        return starts, ends

    def _finish(self, _event: Event) -> None:
        """The ring's end: book on the links, the counters and the records what its sends
        did, then end the collective as its last send would have."""
        net = self.network
        net._reservation = None
        run = self.run
        s = run.s
        starts, ends = self.times  # type: ignore[misc]
        n = len(self.hops)
        arrivals = starts + np.array([hop.latency for hop in self.hops])
        sizes = np.array(s.nbytes, dtype=np.float64).reshape(-1, n) * np.array(
            [hop.wire for hop in self.hops]
        )
        moving = ends - arrivals
        self._book_links(sizes, moving, arrivals[-1])
        total = len(s)
        net._next_id += total
        net.flows_completed += total
        net._joins += 1
        net.rings_whole += 1
        last = run.last
        rank_end = np.maximum(ends.max(axis=0), np.roll(ends, 1, axis=1).max(axis=0))
        for p, value in enumerate(rank_end.tolist()):  # p sends to p + 1, receives from p - 1
            rank = s.src[p]
            if value > last[rank]:
                last[rank] = value
        if run.record_transfers:
            self._book_transfers(starts, ends)
        run.left = 0
        run.finish()

    def _book_links(self, sizes: np.ndarray, moving: np.ndarray, last_arrival: np.ndarray) -> None:
        """Each link's bytes and busy seconds, added send by send in time order (as the
        departures add them), its peak of one flow and its last arrival."""
        net = self.network
        links = [link for hop in self.hops for link in hop.links]
        column = np.array([p for p, hop in enumerate(self.hops) for _ in hop.links], dtype=np.intp)
        carried = np.array([net._bytes[link] for link in links])
        busy = np.array([net._busy[link] for link in links])
        for k in range(len(sizes)):  # sequential sums: the order the network adds them in
            carried = carried + sizes[k][column]
            busy = busy + moving[k][column]
        link_flows, peak, since = net._link_flows, net._peak, net._since
        for link, b, t, arrived in zip(
            links, carried.tolist(), busy.tolist(), last_arrival[column].tolist(), strict=True
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
