"""Broadcast as scatter + all-gather (van de Geijn's long-message broadcast).

The root sends block j (S/n bytes) straight to rank j, all at once (a direct
scatter); then the n ranks all-gather the blocks around a ring.  Each rank
starts its ring sends once its own part of the scatter is done.

Cost (S bytes, n ranks, alpha a hop's latency, beta seconds per byte on its
bottleneck): the scatter phase as :func:`clustersim.collectives.direct.phase_time`
prices it -- on a switch alpha + (n-1)(S/n) beta, the root's port carrying n-1
blocks -- plus the ring all-gather, (n-1)(alpha + (S/n) beta): about 2 S beta
for large S, against (n - 1 + c - 1)(alpha + (S/c) beta) for a chain of c
pieces and (n-1) S beta for the direct broadcast.  Exact (flow-level run to
1e-9) where both phases are: every scatter block reaches its rank at the same
instant (switch, fully connected, one node).
"""

from __future__ import annotations

from ..topology import Topology
from .algorithm import Algorithm
from .call import CollectiveCall
from .direct import phase_time, play_phases
from .ring import Ring
from .schedule import Schedule


class ScatterAllgather(Algorithm):
    """Broadcast: direct scatter of S/n blocks from the root, then a ring all-gather."""

    name = "scatter_allgather"
    description = "broadcast as a scatter of S/n blocks from the root, then a ring all-gather"
    ops = frozenset({"broadcast"})

    @staticmethod
    def _scatter(call: CollectiveCall) -> list[tuple[int, int, float, float]]:
        block = call.size_bytes / call.n
        return [(call.root, j, block, 0.0) for j in range(call.n) if j != call.root]

    @staticmethod
    def _allgather(call: CollectiveCall) -> CollectiveCall:
        return CollectiveCall("allgather", call.devices, call.size_bytes, algorithm="ring")

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The scatter's sends, then the ring all-gather's, chained per rank."""
        schedule = Schedule(call.n)
        if call.n < 2:
            return schedule
        ranks = list(range(call.n))
        schedule.embed(play_phases(call.n, [self._scatter(call)]), ranks)
        ring = Ring().schedule(self._allgather(call), topology)
        schedule.embed(ring, ranks, after=schedule.rank_ends(), step_offset=1)
        return schedule

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The scatter's n - 1 sends and the ring all-gather's."""
        if call.n < 2:
            return 0.0
        return (call.n - 1) + Ring().sends(self._allgather(call), topology)

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: the scatter phase, then the ring all-gather's cost."""
        if call.n < 2:
            return 0.0
        scatter = phase_time(call, topology, self._scatter(call))
        return scatter + Ring().cost(self._allgather(call), topology)
