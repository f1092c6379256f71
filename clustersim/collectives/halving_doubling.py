"""Recursive halving and doubling: hypercube exchanges in log2(n) steps.

Every operation here is a sequence of *steps*; in a step some pairs of ranks
exchange (or one of them sends).  A rank's sends of a step wait until both it
and its partner have finished all their sends and receives of earlier steps
(the partner's included: a rank posts a receive only once it is ready), so
within a step every rank sends at most one message and receives at most one.

Operations (S = ``call.size_bytes``, see :mod:`clustersim.collectives.ops`;
``lg`` = log2; m = n a power of two; gamma = seconds per byte of a reduction,
0 unless ``call.reduce_cost``):

=============== ================================================================
allreduce       Rabenseifner: reduce-scatter by recursive halving (step s sends
                S / 2^(s+1) to the partner at distance m / 2^(s+1), which sums
                it), then all-gather by recursive doubling (the same exchanges
                in reverse).  2 lg(m) alpha + 2 (m-1)/m S beta + (m-1)/m S gamma;
                every rank sends 2 (m-1)/m S.
reducescatter   recursive halving: lg(m) alpha + (m-1)/m S (beta + gamma)
allgather       recursive doubling: step t sends the 2^t S/m gathered so far to
                the partner at distance 2^t: lg(m) alpha + (m-1)/m S beta
barrier         dissemination: ceil(lg n) rounds, in round s rank i sends a
                zero-byte message to i + 2^s (mod n): ceil(lg n) alpha
broadcast       binomial tree from the root: in step s the ranks that have the
                data (relative ranks i < 2^s) send all of it to i + 2^s:
                ceil(lg n) (alpha + S beta)
reduce          the mirror binomial tree: in step s relative rank i with
                i mod 2^(s+1) = 2^s sends its partial sum to i - 2^s:
                ceil(lg n) (alpha + S beta + S gamma)
=============== ================================================================

(Binomial broadcast and reduce are the latency-optimal choice; for large S a
scatter + all-gather does better, use ``ring`` or the tree algorithms there.)

:class:`RecursiveDoubling` is the small-message all-reduce: lg(m) exchanges of
the whole vector, each summed: lg(m) (alpha + S beta + S gamma).

Non-power-of-two n (Thakur, Rabenseifner & Gropp 2005): with m the largest
power of two <= n and r = n - m, the first 2r ranks pair up and each even rank
sends its data to the odd rank after it (which sums it, for the reducing
operations); the m ranks left (the odd ones of the first 2r and the last
n - 2r) run the power-of-two algorithm; then each odd rank sends the result
back to its even neighbour.  For allreduce both extra steps carry S:
allreduce = (alpha + S beta + S gamma) + Rabenseifner on m ranks + (alpha + S beta).
For reducescatter the m ranks halve over blocks of S/n, an odd rank of the
first 2r keeping its neighbour's block too (so some exchanges are uneven) and
handing it back at the end; for allgather an even rank first hands its block
S/n to its neighbour and gets the other (n-1)/n S back at the end.

Cost (analytical mode): the same steps, each send priced alpha + bytes beta
from its route (:class:`HopCost`) plus the reduction at the receiver, a rank
starting a step when it and its partner are both done with the previous ones.
This evaluation is the closed forms above on uniform hops, and it is exact
(what the flow-level run gives) whenever the messages of a step do not share
links -- on "switch" and "fully_connected" clusters they never do, since a
rank has at most one message out and one in at a time.  Where routes of
different pairs share links (rings, oversubscribed trees) it is a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable

from ..topology import Topology
from .algorithm import Algorithm
from .call import CollectiveCall, HopCost
from .ops import OPERATIONS
from .schedule import Schedule

Transfer = tuple[int, int, float, float]
"""(source position, destination position, bytes, bytes summed at the destination)."""
Plan = list[list[Transfer]]
"""Steps of transfers between positions (relative ranks)."""


def largest_power_of_two(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def ceil_log2(n: int) -> int:
    """ceil(log2 n) for n >= 1."""
    return (n - 1).bit_length()


def _fold(n: int) -> tuple[list[int], int]:
    """The m = 2^k ranks that run the power-of-two algorithm (positions), and r = n - m."""
    m = largest_power_of_two(n)
    r = n - m
    return [2 * i + 1 for i in range(r)] + list(range(2 * r, n)), r


def _pre_step(r: int, nbytes: float, reduce: bool) -> list[Transfer]:
    """Even rank 2i of the first 2r sends ``nbytes`` to odd rank 2i+1."""
    return [(2 * i, 2 * i + 1, nbytes, nbytes if reduce else 0.0) for i in range(r)]


def _post_step(r: int, nbytes: float) -> list[Transfer]:
    """Odd rank 2i+1 of the first 2r hands ``nbytes`` of result back to 2i."""
    return [(2 * i + 1, 2 * i, nbytes, 0.0) for i in range(r)]


def _with_fold(
    n: int, size: float, reduce: bool, core: Callable[[list[int]], Plan], back: float
) -> Plan:
    """Pre-step, ``core`` on the power-of-two members, post-step (only the core if n = 2^k)."""
    members, r = _fold(n)
    plan: Plan = [_pre_step(r, size, reduce)] if r else []
    plan += core(members)
    if r:
        plan.append(_post_step(r, back))
    return plan


def _halving(members: list[int], blocks: list[float], reduce: bool) -> Plan:
    """Recursive halving over ``members``: member i ends with ``blocks[i]`` bytes.

    Step s pairs members at distance m / 2^(s+1); each sends the part of its
    current range that belongs to the partner's half.
    """
    m = len(members)
    plan: Plan = []
    dist = m // 2
    while dist >= 1:
        step = []
        for i in range(m):
            base = i & ~(2 * dist - 1)
            give = base + dist if i & dist == 0 else base
            nbytes = sum(blocks[give : give + dist])
            step.append((members[i], members[i ^ dist], nbytes, nbytes if reduce else 0.0))
        plan.append(step)
        dist //= 2
    return plan


def _doubling(members: list[int], blocks: list[float]) -> Plan:
    """Recursive doubling over ``members``: member i starts with ``blocks[i]`` bytes, ends with all.

    Step t pairs members at distance 2^t; each sends everything gathered so far.
    """
    m = len(members)
    plan: Plan = []
    dist = 1
    while dist < m:
        step = []
        for i in range(m):
            base = i & ~(dist - 1)
            nbytes = sum(blocks[base : base + dist])
            step.append((members[i], members[i ^ dist], nbytes, 0.0))
        plan.append(step)
        dist *= 2
    return plan


def _exchanges(members: list[int], nbytes: float, reduce: bool) -> Plan:
    """lg(m) exchanges of ``nbytes`` at distances 1, 2, 4, ... (recursive doubling of a full vector)."""
    m = len(members)
    plan: Plan = []
    dist = 1
    while dist < m:
        step = [
            (members[i], members[i ^ dist], nbytes, nbytes if reduce else 0.0) for i in range(m)
        ]
        plan.append(step)
        dist *= 2
    return plan


def rabenseifner_plan(n: int, size: float) -> Plan:
    """All-reduce of ``size`` bytes: halving reduce-scatter then doubling all-gather."""

    def core(members: list[int]) -> Plan:
        blocks = [size / len(members)] * len(members)
        return _halving(members, blocks, True) + _doubling(members, blocks)

    return _with_fold(n, size, True, core, size)


def reducescatter_plan(n: int, size: float) -> Plan:
    """Reduce-scatter by recursive halving; every rank ends with its size / n."""
    block = size / n

    def core(members: list[int]) -> Plan:
        r = n - len(members)
        blocks = [2 * block if i < r else block for i in range(len(members))]
        return _halving(members, blocks, True)

    return _with_fold(n, size, True, core, block)


def allgather_plan(n: int, size: float) -> Plan:
    """All-gather by recursive doubling; every rank starts with size / n."""
    block = size / n

    def core(members: list[int]) -> Plan:
        r = n - len(members)
        blocks = [2 * block if i < r else block for i in range(len(members))]
        return _doubling(members, blocks)

    members, r = _fold(n)
    plan: Plan = [_pre_step(r, block, False)] if r else []
    plan += core(members)
    if r:
        plan.append(_post_step(r, size - block))
    return plan


def recursive_doubling_plan(n: int, size: float) -> Plan:
    """All-reduce by lg(m) exchanges of the whole vector."""
    return _with_fold(n, size, True, lambda members: _exchanges(members, size, True), size)


def barrier_plan(n: int) -> Plan:
    """Dissemination barrier: ceil(lg n) rounds, rank i sends zero bytes to i + 2^s."""
    return [[(i, (i + (1 << s)) % n, 0.0, 0.0) for i in range(n)] for s in range(ceil_log2(n))]


def broadcast_plan(n: int, size: float) -> Plan:
    """Binomial broadcast from position 0: in step s, i < 2^s sends to i + 2^s."""
    return [
        [(i, i + (1 << s), size, 0.0) for i in range(1 << s) if i + (1 << s) < n]
        for s in range(ceil_log2(n))
    ]


def reduce_plan(n: int, size: float) -> Plan:
    """Binomial reduce to position 0: in step s, i with i mod 2^(s+1) = 2^s sends to i - 2^s."""
    plan = []
    for s in range(ceil_log2(n)):
        half = 1 << s
        plan.append([(i, i - half, size, size) for i in range(half, n, 2 * half)])
    return plan


def plan_sends(algorithm: str, op: str, n: int) -> int:
    """Sends of the plan of ``op`` over ``n`` ranks, counted without building it: lg(m)
    steps of m sends (two sets for Rabenseifner's all-reduce) plus the 2r fold sends
    (m the largest power of two <= n, r = n - m); the dissemination barrier n ceil(lg n);
    binomial broadcast and reduce n - 1."""
    if n < 2:
        return 0
    m = largest_power_of_two(n)
    lg, fold = m.bit_length() - 1, 2 * (n - m)
    if op == "barrier":
        return n * ceil_log2(n)
    if op in ("broadcast", "reduce"):
        return n - 1
    rounds = 2 if op == "allreduce" and algorithm == "halving_doubling" else 1
    return rounds * lg * m + fold


def plan_schedule(plan: Plan, n: int, ranks: list[int]) -> Schedule:
    """The sends of ``plan``; position q is played by rank ``ranks[q]``.

    A send waits for the previous-step sends of both its ends.
    """
    sched = Schedule(n)
    last: dict[int, list[int]] = {}
    for index, step in enumerate(plan):
        now: dict[int, list[int]] = {}
        for src, dst, nbytes, reduce_bytes in step:
            after = list(last.get(src, ()))
            after += [d for d in last.get(dst, ()) if d not in after]
            i = sched.send(ranks[src], ranks[dst], nbytes, after, reduce_bytes, index)
            now.setdefault(src, []).append(i)
            now.setdefault(dst, []).append(i)
        last.update(now)
    return sched


def plan_time(
    plan: Plan,
    call: CollectiveCall,
    topology: Topology,
    ranks: list[int],
    reduce_time: Callable[[float], float],
) -> float:
    """Seconds ``plan`` takes: each send alpha + bytes beta (+ its reduction), started when
    both ends are done with the previous steps (the longest path of :func:`plan_schedule`)."""
    hops: dict[tuple[int, int], HopCost] = {}
    done: dict[int, float] = {}
    for step in plan:
        ends: dict[int, float] = {}
        for src, dst, nbytes, reduce_bytes in step:
            a, b = ranks[src], ranks[dst]
            hop = hops.get((a, b))
            if hop is None:
                hop = hops[a, b] = HopCost.between(topology, call.devices[a], call.devices[b])
            start = max(done.get(src, 0.0), done.get(dst, 0.0))
            end = start + hop.time(nbytes) + reduce_time(reduce_bytes)
            ends[src] = max(ends.get(src, end), end)
            ends[dst] = max(ends.get(dst, end), end)
        done.update(ends)
    return max(done.values(), default=0.0)


class _StepAlgorithm(Algorithm):
    """An algorithm given by a :data:`Plan` over positions (relative ranks)."""

    def plan(self, call: CollectiveCall) -> Plan:
        """The steps of ``call`` over positions 0 .. n-1 (position 0 = the root)."""
        raise NotImplementedError

    @staticmethod
    def ranks(call: CollectiveCall) -> list[int]:
        """Rank playing each position: rooted operations count from the root."""
        root = call.root if OPERATIONS[call.op].rooted else 0
        return [(q + root) % call.n for q in range(call.n)]

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The sends of ``call`` (flow-level mode)."""
        return plan_schedule(self.plan(call), call.n, self.ranks(call))

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The plan's sends, counted (:func:`plan_sends`)."""
        return float(plan_sends(self.name, call.op, call.n))

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds by the alpha-beta evaluation of the steps (see the module docstring)."""
        return plan_time(
            self.plan(call),
            call,
            topology,
            self.ranks(call),
            lambda nbytes: self.reduce_time(call, topology, nbytes),
        )


class HalvingDoubling(_StepAlgorithm):
    """Rabenseifner all-reduce, recursive halving/doubling, dissemination barrier, binomial trees."""

    name = "halving_doubling"
    description = "recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner)"
    ops = frozenset({"allreduce", "reducescatter", "allgather", "barrier", "broadcast", "reduce"})

    def plan(self, call: CollectiveCall) -> Plan:
        """The steps of ``call`` (see the module docstring)."""
        n, size = call.n, call.size_bytes
        if n == 1:
            return []
        builders: dict[str, Callable[[], Plan]] = {
            "allreduce": lambda: rabenseifner_plan(n, size),
            "reducescatter": lambda: reducescatter_plan(n, size),
            "allgather": lambda: allgather_plan(n, size),
            "barrier": lambda: barrier_plan(n),
            "broadcast": lambda: broadcast_plan(n, size),
            "reduce": lambda: reduce_plan(n, size),
        }
        return builders[call.op]()


class RecursiveDoubling(_StepAlgorithm):
    """Small-message all-reduce: lg(n) exchanges of the whole vector, summed at each step."""

    name = "recursive_doubling"
    description = "all-reduce by recursive doubling of the full vector (latency-optimal)"
    ops = frozenset({"allreduce"})

    def plan(self, call: CollectiveCall) -> Plan:
        """lg(m) full exchanges, with the fold-in/fold-out steps when n is not a power of two."""
        if call.n == 1:
            return []
        return recursive_doubling_plan(call.n, call.size_bytes)
