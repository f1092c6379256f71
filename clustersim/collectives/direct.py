"""Direct (one-shot) algorithms: every rank sends straight to every rank that needs its data.

S = ``call.size_bytes`` (see :mod:`clustersim.collectives.ops`), n ranks:

=============== ==================================================================
broadcast       the root sends S to each other rank
reduce          each other rank sends S to the root, which sums each arrival
gather          each other rank sends its S/n to the root
scatter         the root sends each other rank its S/n
allgather       every rank sends its S/n to every other rank
alltoall        every rank sends S/n to every other rank (a distinct block each)
reducescatter   every rank sends block j (S/n) to rank j, which sums the arrivals
allreduce       direct reduce-scatter, then direct all-gather of the summed blocks
                (a rank's all-gather sends wait for its own reduce-scatter phase)
barrier         a zero-byte message from every rank to every other rank
=============== ==================================================================

All sends of a phase start at once and share the links of their routes.

Cost (analytical mode), per phase: the largest route latency + the largest link
load, where a link's load is the bytes of the phase crossing it over its
bandwidth; plus, with ``reduce_cost``, the largest per-receiver sum of reduced
bytes over that receiver's memory bandwidth (arrivals reduce one after another).
Phases add up.  On a switch a rank's uplink carries n-1 flows, so direct
all-gather = alpha + (n-1)(S/n) beta; on fully connected links each pair has its
own link: alpha + (S/n) beta.  Endpoint sharing is modelled exactly.

The formula is exact when every flow of a phase has the same size and latency
and crosses a link that is the busiest one for it, so that all finish together
(symmetric groups on switch, fully connected, one node's PCIe or NVSwitch).
It is an approximation when flows differ (multi-hop ring routes, mixed
intra/inter-node groups: some flows finish early and leave bandwidth to the
others), and for ECMP routes (the first route is priced).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..topology import Topology
from .algorithm import Algorithm
from .call import CollectiveCall
from .ops import OPERATIONS
from .schedule import Schedule

Send = tuple[int, int, float, float]
"""(src rank, dst rank, bytes, bytes the receiver reduces)."""
Phase = list[Send]


def play_phases(n: int, phases: Sequence[Phase]) -> Schedule:
    """A schedule of ``phases``; a rank's sends in a phase wait for its sends and receives of the previous one."""
    schedule = Schedule(n)
    involving: dict[int, list[int]] = {}
    for step, phase in enumerate(phases):
        current: dict[int, list[int]] = {}
        for src, dst, nbytes, reduce_bytes in phase:
            i = schedule.send(src, dst, nbytes, involving.get(src, ()), reduce_bytes, step)
            current.setdefault(src, []).append(i)
            current.setdefault(dst, []).append(i)
        involving = current
    return schedule


def phase_time(call: CollectiveCall, topology: Topology, phase: Phase) -> float:
    """Seconds of one phase: max latency + max link load + max reduction queue (see module docstring)."""
    if not phase:
        return 0.0
    load: defaultdict[int, float] = defaultdict(float)
    reduced: defaultdict[int, float] = defaultdict(float)
    latency = 0.0
    devices = call.devices
    for src, dst, nbytes, reduce_bytes in phase:
        route = topology.first_route(devices[src], devices[dst])
        latency = max(latency, route.latency_s)
        for link in route.links:
            load[link.index] += nbytes / link.bandwidth_Bps
        reduced[dst] += reduce_bytes
    reduce_s = 0.0
    if call.reduce_cost:
        reduce_s = max(
            nbytes / topology.device(devices[rank]).memory_bandwidth_Bps
            for rank, nbytes in reduced.items()
        )
    return latency + max(load.values(), default=0.0) + reduce_s


def phases_cost(call: CollectiveCall, topology: Topology, phases: Sequence[Phase]) -> float:
    """Seconds of ``phases`` one after another."""
    return sum(phase_time(call, topology, phase) for phase in phases)


def _all_pairs(n: int, nbytes: float, reduce_bytes: float = 0.0) -> Phase:
    return [(i, j, nbytes, reduce_bytes) for i in range(n) for j in range(n) if i != j]


def direct_phases(op: str, n: int, root: int, size: float) -> list[Phase]:
    """The one-shot phases of ``op`` (module docstring)."""
    others = [j for j in range(n) if j != root]
    block = size / n
    if op == "broadcast":
        return [[(root, j, size, 0.0) for j in others]]
    if op == "reduce":
        return [[(j, root, size, size) for j in others]]
    if op == "gather":
        return [[(j, root, block, 0.0) for j in others]]
    if op == "scatter":
        return [[(root, j, block, 0.0) for j in others]]
    if op in ("allgather", "alltoall"):
        return [_all_pairs(n, block)]
    if op == "reducescatter":
        return [_all_pairs(n, block, block)]
    if op == "allreduce":
        return [_all_pairs(n, block, block), _all_pairs(n, block)]
    return [_all_pairs(n, 0.0)]  # barrier


class Direct(Algorithm):
    """One-shot collectives: all sends of a phase at once (see the module docstring)."""

    name = "direct"
    description = "direct: every rank sends to every rank that needs its data at once (one shot)"
    ops = frozenset(OPERATIONS)

    def _phases(self, call: CollectiveCall) -> list[Phase]:
        if call.n < 2:
            return []
        return direct_phases(call.op, call.n, call.root, call.size_bytes)

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The one-shot sends of ``call``."""
        return play_phases(call.n, self._phases(call))

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The phases' sends, counted: n - 1 for the rooted operations, n (n - 1) per
        all-pairs phase (two for all-reduce)."""
        n = call.n
        if n < 2:
            return 0.0
        if OPERATIONS[call.op].rooted:
            return float(n - 1)
        return float((2 if call.op == "allreduce" else 1) * n * (n - 1))

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: per phase, max latency + busiest link's bytes / bandwidth (+ reductions)."""
        return phases_cost(call, topology, self._phases(call))


def pairwise_phases(n: int, size: float) -> list[Phase]:
    """Pairwise-exchange all-to-all: in step s = 1 .. n-1 rank i sends its block for rank
    (i + s) mod n (S/n bytes) and receives the block of rank (i - s) mod n."""
    block = size / n
    return [[(i, (i + s) % n, block, 0.0) for i in range(n)] for s in range(1, n)]


class Pairwise(Algorithm):
    """All-to-all by pairwise exchange: n - 1 steps, each rank sending one block per step.

    A rank's sends of step s wait for its send and receive of step s - 1.  Cost, per
    step, as :func:`phase_time` prices a direct phase; on a switch
    (n - 1)(alpha + (S/n) beta), against alpha + (n - 1)(S/n) beta for the direct
    all-to-all: the same bandwidth term, n - 1 latencies instead of one, one flow per
    port at a time instead of n - 1 (what large groups on real NICs prefer).
    """

    name = "pairwise"
    description = "pairwise exchange: all-to-all in n-1 steps, one block to rank i+s in step s"
    ops = frozenset({"alltoall"})

    def _phases(self, call: CollectiveCall) -> list[Phase]:
        return pairwise_phases(call.n, call.size_bytes) if call.n > 1 else []

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The n - 1 steps of sends."""
        return play_phases(call.n, self._phases(call))

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """n - 1 steps of n sends."""
        return float(call.n * (call.n - 1))

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: the steps' :func:`phase_time` one after another."""
        return phases_cost(call, topology, self._phases(call))
