"""Ring algorithms: every rank talks only to its neighbours in the group order.

Rank i sends to rank i + 1 (mod n).  Each operation is a sequence of *steps*;
in a step some ranks ("positions" of the ring) each send one message to their
successor.  A message can be split into ``c`` equal pieces (``call.chunk_bytes``)
and the pieces pipeline under two rules, like the FIFO of a NCCL channel:

* piece k of step s from a rank waits for piece k of step s - 1 to have
  arrived at that rank (and been reduced there, if the step reduces);
* a rank sends one piece at a time: each piece waits for the rank's previous
  piece (piece k - 1 of the same step, or the last piece of its previous step).

Operations (S = ``call.size_bytes``, see :mod:`clustersim.collectives.ops`):

=============== ================================================================
allreduce       reduce-scatter then all-gather: 2(n-1) steps, every rank sends S/n
reducescatter   n-1 steps of S/n, each summed at the receiver
allgather       n-1 steps of S/n
alltoall        ring relay: in step s (0-based) every rank forwards the
                (n-1-s) blocks of S/n still travelling; each rank sends (n-1) S / 2
broadcast       pipelined chain root -> root+1 -> ... -> root-1 (n-1 hops)
reduce          pipelined chain root+1 -> ... -> root-1 -> root, summing on the way
gather          ring forwarding to the root: position p after the root sends its
                block, then the p blocks it receives (n-1 steps)
scatter         the reverse: the root sends the farthest rank's block first
barrier         n-1 steps of zero-byte messages around the ring: after step n-2
                a rank has heard (transitively) from every other rank
=============== ================================================================

Chunking: ``chunk_bytes=None`` means no sub-chunking, except for the chain
broadcast and reduce, where pipelining is the point: they default to
:data:`CHAIN_CHUNK_BYTES` (4 MiB, NCCL's default buffer).  A message of m bytes
is split into c = ceil(m / chunk) equal pieces.

Bidirectional (``call.bidirectional``): two rings run at once, the group order
and its reverse, each carrying half the data (barrier: one ring).  On full-duplex
ring or fully-connected links this halves the bandwidth term; on a switch both
directions leave through the same uplink, so it does not (the cost says so).

Cost (analytical mode).  Each hop's cost is alpha (route latency) + bytes x
beta, where beta = the most loaded link of the hop's route: flows on it (among
the hops in use at once, both rings counted) / its bandwidth.  With t_h the
time of one piece on hop h (reduction at the receiver included):

* allreduce, reducescatter, allgather, alltoall, barrier: sum over steps of
  c x max_h t_h -- the longest path of the pipeline stays on the slowest hop.
  Exact whenever hops do not share links (uniform ring, switch, fully connected,
  and heterogeneous rings whose hops use disjoint links, e.g. across nodes).
  For a uniform ring, allreduce = 2(n-1)(alpha + S/n beta).
* broadcast, reduce (chains of n-1 hops): sum_h t_h + (c - 1) max_h t_h
  (tandem pipeline), = (n - 1 + c - 1)(alpha + piece beta) on a uniform ring.
  Exact when hops do not share links.
* gather, scatter (fans of n-1 hops, hop j from the root carrying (n-1-j)
  messages): max over j of sum_{i<=j} t_i + ((n-1-j) c - 1) max_{i<=j} t_i,
  = (n-1) c (alpha + piece beta) on a uniform ring.  Exact when hops do not
  share links.

It is an approximation when hops share links (the load-based beta assumes every
hop busy at once, which is false in the fill/drain of chains and fans), with
reduce costs and two rings (their reductions share one compute stream), and for
ECMP routes (the first route is priced).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from ..caches import registered
from ..memo import kept
from ..topology import Topology
from .algorithm import Algorithm
from .bus import route_latency
from .call import CollectiveCall, HopCost
from .ops import OPERATIONS
from .ring_latency import ring_shape, ring_steps_latency_s
from .schedule import Schedule

CHAIN_CHUNK_BYTES = 4 * 2**20
"""Default pipelining chunk (bytes) of the chain broadcast and reduce: 4 MiB."""

FULL_OPS = frozenset({"allreduce", "reducescatter", "allgather", "alltoall", "barrier"})
"""Operations in which every rank sends in every step."""
CHAIN_OPS = frozenset({"broadcast", "reduce"})


@dataclass(frozen=True)
class _Step:
    """One ring step: the positions that send, bytes each sends, whether the receiver sums."""

    positions: Sequence[int]
    nbytes: float
    reduces: bool


@dataclass(frozen=True)
class _Plan:
    """An operation on one ring: its steps and the number of pieces per message."""

    steps: list[_Step]
    pieces: int
    hops: list[int]
    """Positions whose hop (position -> position + 1) the plan uses."""


def pieces(nbytes: float, chunk: float | None) -> int:
    """Number of equal pieces a message of ``nbytes`` is split into (at most ``chunk`` bytes each)."""
    if chunk is None or nbytes <= chunk:
        return 1
    return max(1, math.ceil(nbytes / chunk * (1.0 - 1e-12)))


def _plan(call: CollectiveCall, n: int, root_pos: int, share: float) -> _Plan:
    """The steps of ``call`` on a ring of ``n`` whose root sits at ``root_pos``, carrying
    ``share`` of the data; kept per operation, size, chunk and ring (a bucket priced for
    every call of its group, twice: at its size and at zero bytes).  Not to be changed."""
    return _plan_of(call.op, call.size_bytes, call.chunk_bytes, n, root_pos, share)


@lru_cache(maxsize=1024)
def _plan_of(
    op: str, size_bytes: float, chunk_bytes: float | None, n: int, root_pos: int, share: float
) -> _Plan:
    """:func:`_plan` of the call's fields it reads."""
    size = size_bytes * share
    everyone = range(n)
    block = size / n
    if op == "allreduce":
        steps = [_Step(everyone, block, s < n - 1) for s in range(2 * (n - 1))]
    elif op in ("reducescatter", "allgather"):
        steps = [_Step(everyone, block, op == "reducescatter") for _ in range(n - 1)]
    elif op == "alltoall":
        steps = [_Step(everyone, (n - 1 - s) * block, False) for s in range(n - 1)]
    elif op == "barrier":
        steps = [_Step(everyone, 0.0, False) for _ in range(n - 1)]
    elif op == "broadcast":
        steps = [_Step([(root_pos + j) % n], size, False) for j in range(n - 1)]
    elif op == "reduce":
        steps = [_Step([(root_pos + 1 + j) % n], size, True) for j in range(n - 1)]
    elif op == "gather":
        steps = [
            _Step([(root_pos + 1 + p) % n for p in range(s, n - 1)], block, False)
            for s in range(n - 1)
        ]
    else:  # scatter
        steps = [
            _Step([(root_pos + p) % n for p in range(s + 1)], block, False) for s in range(n - 1)
        ]
    if op in FULL_OPS:
        hops = list(everyone)
    elif op in ("broadcast", "scatter"):
        hops = [(root_pos + j) % n for j in range(n - 1)]
    else:
        hops = [(root_pos + 1 + j) % n for j in range(n - 1)]
    chunk = chunk_bytes
    if chunk is None and op in CHAIN_OPS:
        chunk = CHAIN_CHUNK_BYTES
    largest = max((s.nbytes for s in steps), default=0.0)
    return _Plan(steps, pieces(largest, chunk), hops)


def _send_count(call: CollectiveCall, n: int, share: float) -> float:
    """Sends of :func:`_plan` on one ring of ``n`` carrying ``share`` of the data, counted:
    the positions that send in all steps, times the pieces of the largest message."""
    op, size = call.op, call.size_bytes * share
    block = size / n
    if op == "allreduce":
        positions, largest = 2 * (n - 1) * n, block
    elif op in ("reducescatter", "allgather", "barrier"):
        positions, largest = (n - 1) * n, 0.0 if op == "barrier" else block
    elif op == "alltoall":
        positions, largest = (n - 1) * n, (n - 1) * block
    elif op in CHAIN_OPS:
        positions, largest = n - 1, size
    else:  # gather, scatter
        positions, largest = n * (n - 1) // 2, block
    chunk = call.chunk_bytes
    if chunk is None and op in CHAIN_OPS:
        chunk = CHAIN_CHUNK_BYTES
    return float(positions) * pieces(largest, chunk)


def _orders(call: CollectiveCall) -> list[tuple[list[int], float]]:
    """The rings to run: (rank order, share of the data)."""
    forward = list(range(call.n))
    if call.bidirectional and call.op != "barrier" and call.n > 1:
        return [(forward, 0.5), (forward[::-1], 0.5)]
    return [(forward, 1.0)]


REGULAR_OPS = frozenset({"allreduce", "reducescatter", "allgather", "barrier"})
"""Operations whose one-ring, unchunked schedule is built in bulk by :func:`_regular_ring`."""


def regular_ring(call: CollectiveCall) -> bool:
    """Whether the ring's schedule of ``call`` is one ring built in bulk
    (:func:`_regular_ring`): an operation of :data:`REGULAR_OPS` on one ring (not
    bidirectional), one piece a message."""
    orders = _orders(call)
    if call.n < 2 or len(orders) != 1 or call.op not in REGULAR_OPS:
        return False
    order, share = orders[0]
    return _plan(call, call.n, order.index(call.root), share).pieces == 1


def _regular_ring(order: list[int], plan: _Plan) -> Schedule:
    """The schedule :func:`_play` builds for a one-ring, one-piece plan in which every
    position sends in every step, built in bulk with dependents computed from ids.

    Send ``s * n + p`` is position p's send of step s; it waits for send
    ``(s-1) * n + p - 1`` (what p received) and ``(s-1) * n + p`` (p's own
    previous send), so its dependents are ``(s+1) * n + p`` and
    ``(s+1) * n + p + 1``.  Same sends, same order, a fraction of the memory
    of a 2-million-send all-reduce.
    """
    n = len(order)
    steps = len(plan.steps)
    src = order * steps
    nxt = order[1:] + order[:1]
    dst = nxt * steps
    nbytes: list[float] = []
    reduce_bytes: list[float] = []
    step_of: list[int] = []
    for s, step in enumerate(plan.steps):
        nbytes += [step.nbytes] * n
        reduce_bytes += [step.nbytes if step.reduces else 0.0] * n
        step_of += [s] * n
    n_deps = [0] * n + [2] * (n * (steps - 1))
    last_step_start = (steps - 1) * n

    def dependents(i: int) -> tuple[int, ...]:
        if i >= last_step_start:
            return ()
        p = i % n
        base = i - p + n
        a, b = base + p, base + (p + 1) % n
        return (a, b) if a < b else (b, a)

    out = Schedule.regular(n, src, dst, nbytes, reduce_bytes, n_deps, step_of, dependents)
    out.ring = True
    return out


def _play(schedule: Schedule, order: list[int], plan: _Plan) -> None:
    """Add the sends of ``plan`` on the ring ``order`` to ``schedule`` (see the module rules)."""
    n = len(order)
    c = plan.pieces
    send = schedule.send
    previous: dict[int, list[int]] = {}  # position -> piece ids it sent in the previous step
    last_sent: dict[int, int] = {}  # position -> id of the last piece it sent
    for s, step in enumerate(plan.steps):
        piece = step.nbytes / c
        reduce_bytes = piece if step.reduces else 0.0
        current: dict[int, list[int]] = {}
        for pos in step.positions:
            src, dst = order[pos], order[(pos + 1) % n]
            arrived = previous.get((pos - 1) % n)
            last = last_sent.get(pos, -1)
            ids = []
            for k in range(c):
                after = (last,) if arrived is None else (arrived[k], last)
                last = send(src, dst, piece, after, reduce_bytes, s)
                ids.append(last)
            current[pos] = ids
            last_sent[pos] = last
        previous = current


def _fan_time(times: list[float], c: int) -> float:
    """Seconds of a fan pipeline (scatter) over hops whose piece times are ``times``.

    Hop j (counted from the root) forwards (n-1-j) c pieces, each waiting for
    the same piece on hop j-1 and for the hop's previous piece.  The longest
    path to hop j's last piece stays on the slowest hop so far:
    sum_{i<=j} t_i + ((n-1-j) c - 1) max_{i<=j} t_i; the answer is the max over j.
    Gather is the mirror image: the same with ``times`` listed from the root's
    incoming hop backwards.  Exact when hops share no links.
    """
    best = total = slowest = 0.0
    for j, t in enumerate(times):
        total += t
        slowest = max(slowest, t)
        best = max(best, total + ((len(times) - j) * c - 1) * slowest)
    return best


def _hop_costs(
    call: CollectiveCall, topology: Topology, pairs: list[tuple[int, int]], group: object
) -> dict[tuple[int, int], HopCost]:
    """Alpha-beta cost of each (src rank, dst rank) hop when all ``pairs`` send at once:
    alpha the latency of the hop's first route in ``topology`` (seconds: its
    :attr:`~clustersim.topology.TopologyView.uniform_latency_s` where it has one), beta from
    :func:`_hop_betas` on the topology that has its bandwidths
    (:attr:`~clustersim.topology.TopologyView.same_bandwidths`: a protocol's views differ
    in latencies alone, so the betas of a group are found once for all of them).
    ``group`` names ``call.devices`` in the caches (their orbit where they have one)."""
    shared = getattr(topology, "same_bandwidths", topology)
    key = (call.op, group, call.root, call.bidirectional, shared)
    betas = kept(_HOP_BETAS, key, lambda: _hop_betas(call, shared, pairs), _HOP_CACHE_LIMIT)
    latency = getattr(topology, "uniform_latency_s", None)
    if latency is not None:  # every route's: no need to find them
        return {pair: HopCost(latency, beta) for pair, beta in betas.items()}
    devices = call.devices
    latency_s = route_latency(topology)
    return {
        pair: HopCost(latency_s(devices[pair[0]], devices[pair[1]]), beta)
        for pair, beta in betas.items()
    }


def _hop_betas(
    call: CollectiveCall, topology: Topology, pairs: list[tuple[int, int]]
) -> dict[tuple[int, int], float]:
    """Seconds per byte of each (src rank, dst rank) hop when all ``pairs`` send at once:
    the max over the route's links of (hops crossing the link) / bandwidth, i.e. the hop's
    max-min fair share when every hop sends equal bytes."""
    routes = {
        pair: topology.first_route(call.devices[pair[0]], call.devices[pair[1]]) for pair in pairs
    }
    load = Counter(link.index for pair in pairs for link in routes[pair].links)
    return {
        pair: max((load[link.index] / link.bandwidth_Bps for link in route.links), default=0.0)
        for pair, route in routes.items()
    }


_HOP_CACHE_LIMIT = 1024
_HOP_COSTS: dict[tuple[object, ...], dict[tuple[int, int], HopCost]] = registered({})
"""Hop costs of a ring by (operation, group, root, bidirectional, topology): the same for
every size, so a call priced again (DDP buckets, ``auto``) does not route again."""
_HOP_BETAS: dict[tuple[object, ...], dict[tuple[int, int], float]] = registered({})
"""Hop betas of a ring by (operation, group, root, bidirectional, the topology with its
bandwidths): the same for every protocol and send latency, so that the sizes of a group,
whose ring latencies differ (:meth:`Ring.send_latency_s`), do not route again."""


def _hops(call: CollectiveCall) -> list[tuple[str, str]]:
    """The (src, dst) device pairs of the ring's hops in use (both rings if two)."""
    n = call.n
    return [
        (call.devices[order[h]], call.devices[order[(h + 1) % n]])
        for order, share in _orders(call)
        for h in _plan(call, n, order.index(call.root), share).hops
    ]


def _rate_key(
    call: CollectiveCall, topology: Topology, hops: Sequence[tuple[str, str]] | None = None
) -> tuple[object, ...]:
    """What :data:`_COST_RATES` keeps a ring's one-route rate by: its hops (``hops``, if
    already made) and first connection."""
    return (tuple(_hops(call) if hops is None else hops), call.connections[0], topology)


def _rate_alone(flows: dict[int, float], topology: Topology) -> float:
    """The rate alone (B/s) of ``flows`` on the links flows run on (a view's real links)."""
    from .fluid import FluidPhase

    plain = getattr(topology, "same_links", topology)
    return FluidPhase(0.0, 0.0, flows).rate_alone_Bps(plain.links)


_COST_RATES: dict[tuple[object, ...], float] = registered({})
"""A ring's :meth:`Ring.cost_rate_Bps` by (its hops, first connection, topology)."""

_LINK_FLOWS: dict[tuple[object, ...], dict[int, float]] = registered({})
"""A ring's link flows by (its hops, connections, topology).  The hops in use and their routes are the same for every size and
for every operation that takes the same hops -- a data-parallel group's reduce-scatter and
then its all-gather, its buckets again and again -- so a group routes once (a ring of 1,024
GPUs over four channels crosses some 10,000 links; dense_131k's 128 groups are asked for
288 times).  Callers read the dict and do not change it (the same dict for every call of
the group lets the fluid model and the network reuse what they made of it)."""


def _orbit_key(topology: Topology, devices: tuple[str, ...]) -> object | None:
    """The orbit of ``devices`` in ``topology`` (:mod:`clustersim.topology.symmetry`), or
    None where the topology (or view) cannot vouch for one."""
    key = getattr(topology, "orbit_key", None)
    return None if key is None else key(devices)


class Ring(Algorithm):
    """Ring collectives: neighbour-to-neighbour steps in group order (see the module docstring)."""

    name = "ring"
    description = "ring: rank i sends to rank i+1; bandwidth-optimal, 2(n-1) steps for all-reduce"
    ops = frozenset(OPERATIONS)

    def unsupported(self, call: CollectiveCall, topology: Topology) -> str | None:
        """Why ``call`` cannot run as a ring (a non-positive chunk), or None."""
        if call.chunk_bytes is not None and not call.chunk_bytes > 0:
            return f"chunk must be positive bytes, got {call.chunk_bytes}"
        return super().unsupported(call, topology)

    def send_latency_s(
        self, call: CollectiveCall, topology: Topology, protocol: str
    ) -> float | None:
        """NCCL's ring latency beyond its base (:func:`.ring_latency.ring_steps_latency_s`)
        spread evenly over the sends of one chain of the ring: each step of a piece waits
        for the step before it and for its rank's previous piece, so a rank's chain is the
        steps x the pieces, and a send of each pays that share.  None for the operations
        NCCL does not price so (:mod:`~clustersim.collectives.ring_latency`)."""
        if call.n < 2:
            return None
        total = ring_steps_latency_s(call.op, protocol, ring_shape(call, topology))
        if total is None:
            return None
        order, share = _orders(call)[0]
        plan = _plan(call, call.n, order.index(call.root), share)
        return total / (len(plan.steps) * plan.pieces)

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The ring's sends: one ring, or two opposite rings with half the data each."""
        schedule = Schedule(call.n)
        if call.n < 2:
            return schedule
        orders = _orders(call)
        if regular_ring(call):
            order, share = orders[0]
            return _regular_ring(order, _plan(call, call.n, order.index(call.root), share))
        for order, share in orders:
            _play(schedule, order, _plan(call, call.n, order.index(call.root), share))
        return schedule

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The schedule's sends, counted: every ring's positions x pieces."""
        if call.n < 2:
            return 0.0
        return sum(_send_count(call, call.n, share) for _order, share in _orders(call))

    def link_flows(self, call: CollectiveCall, topology: Topology) -> dict[int, float]:
        """Link index -> hops in use crossing it (both rings counted), from the hops' routes
        (:func:`.fluid.hop_flows`); kept per hops (:data:`_LINK_FLOWS`), not to be changed."""
        from .fluid import hop_flows

        if call.n < 2:
            return {}
        hops = _hops(call)
        key = (tuple(hops), call.connections, topology)
        found = _LINK_FLOWS.get(key)
        if found is not None:
            return found
        first: dict[int, float] | None = {} if len(call.connections) > 1 else None
        flows = hop_flows(topology, hops, call.connections, first)
        kept(_LINK_FLOWS, key, lambda: flows, _HOP_CACHE_LIMIT)
        if first:  # the one-route rate beside it, from the same routes
            rate = _rate_alone(first, topology)
            kept(_COST_RATES, _rate_key(call, topology, hops), lambda: rate, _HOP_CACHE_LIMIT)
        return flows

    def cost_rate_Bps(self, call: CollectiveCall, topology: Topology) -> float:
        """:meth:`Algorithm.cost_rate_Bps`, kept per group as a number (:data:`_COST_RATES`):
        the one-route flows it is found from are not kept beside the spread ones."""
        from .fluid import hop_flows

        return kept(
            _COST_RATES,
            _rate_key(call, topology),
            lambda: _rate_alone(hop_flows(topology, _hops(call), call.connections[:1]), topology),
            _HOP_CACHE_LIMIT,
        )

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds by the alpha-beta formulas of the module docstring (slowest ring if two)."""
        n = call.n
        if n < 2:
            return 0.0
        rings = [
            (order, _plan(call, n, order.index(call.root), share)) for order, share in _orders(call)
        ]
        # Groups that sit alike (topology/symmetry.py) have alike hops: price the first.
        orbit = _orbit_key(topology, call.devices)
        group = call.devices if orbit is None else orbit
        key = (call.op, group, call.root, call.bidirectional, topology)
        costs = _HOP_COSTS.get(key)
        if costs is None:
            pairs = [(order[h], order[(h + 1) % n]) for order, plan in rings for h in plan.hops]
            if len(_HOP_COSTS) >= _HOP_CACHE_LIMIT:
                _HOP_COSTS.clear()
            priced = call
            if orbit is not None:
                priced = replace(call, devices=tuple(topology.canonical(orbit)))
            costs = _HOP_COSTS[key] = _hop_costs(priced, topology, pairs, group)
        return max(self._ring_cost(call, topology, order, plan, costs) for order, plan in rings)

    def _ring_cost(
        self,
        call: CollectiveCall,
        topology: Topology,
        order: list[int],
        plan: _Plan,
        costs: dict[tuple[int, int], HopCost],
    ) -> float:
        """Seconds of one ring's plan, given each hop's cost."""
        n, c = len(order), plan.pieces
        hops = [costs[(order[h], order[(h + 1) % n])] for h in plan.hops]

        def piece_times(step: _Step) -> list[float]:
            piece = step.nbytes / c
            extra = self.reduce_time(call, topology, piece) if step.reduces else 0.0
            return [hop.time(piece) + extra for hop in hops]

        if call.op in CHAIN_OPS:
            times = piece_times(plan.steps[0])
            return sum(times) + (c - 1) * max(times)
        if call.op == "scatter":
            return _fan_time(piece_times(plan.steps[0]), c)
        if call.op == "gather":
            return _fan_time(piece_times(plan.steps[0])[::-1], c)
        total = 0.0
        memo: dict[tuple[float, bool], float] = {}
        for step in plan.steps:
            key = (step.nbytes, step.reduces)
            if key not in memo:
                memo[key] = max(piece_times(step))
            total += c * memo[key]
        return total
