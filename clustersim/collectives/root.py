"""Collectives through one root rank: the textbook "parameter server on one GPU".

Every rank sends what it contributes to the root (``call.root``, also for the
operations without a root), the root combines it, and sends each rank what it
needs.  S = ``call.size_bytes`` (see :mod:`clustersim.collectives.ops`), n ranks:

=============== =================================== ===============================
operation       in: each other rank -> root         out: root -> each other rank
=============== =================================== ===============================
allreduce       S (the root sums each arrival)      S (the sum)
reduce          S (summed)                          --
reducescatter   S (summed)                          S/n (the rank's summed block)
broadcast       --                                  S
gather          S/n                                 --
scatter         --                                  S/n
allgather       S/n                                 (n-1) S/n (the blocks it lacks)
alltoall        (n-1) S/n (its blocks for others)   (n-1) S/n (the blocks for it)
barrier         0 bytes                             0 bytes
=============== =================================== ===============================

The root's out-sends wait for all in-sends (and their reductions).

Cost (analytical mode): the phase formula of :mod:`clustersim.collectives.direct`
(max latency + busiest link's bytes / bandwidth) for each phase, plus, with
``reduce_cost``, the root summing (n-1) S bytes at its memory bandwidth.  On a
switch the root's link serialises (n-1) S each way: allreduce = 2(alpha + (n-1)
S beta) -- case D1: 4 GPUs on 16 GB/s PCIe, 160 MB: 30 ms in + 30 ms out.
Exact where the direct phases are exact (all flows alike, busiest link shared
by all: switch, one PCIe switch, fully connected); an approximation otherwise.
"""

from __future__ import annotations

from ..topology import Topology
from .algorithm import Algorithm
from .call import CollectiveCall
from .direct import Phase, phases_cost, play_phases
from .ops import OPERATIONS
from .schedule import Schedule

_IN_OUT = {
    # op: (bytes in per rank / S, bytes out per rank / S as a function of n, root reduces)
    "allreduce": (lambda n: 1.0, lambda n: 1.0, True),
    "reduce": (lambda n: 1.0, None, True),
    "reducescatter": (lambda n: 1.0, lambda n: 1.0 / n, True),
    "broadcast": (None, lambda n: 1.0, False),
    "gather": (lambda n: 1.0 / n, None, False),
    "scatter": (None, lambda n: 1.0 / n, False),
    "allgather": (lambda n: 1.0 / n, lambda n: (n - 1) / n, False),
    "alltoall": (lambda n: (n - 1) / n, lambda n: (n - 1) / n, False),
    "barrier": (lambda n: 0.0, lambda n: 0.0, False),
}


def root_phases(op: str, n: int, root: int, size: float) -> list[Phase]:
    """The in and out phases of ``op`` through rank ``root`` (module docstring)."""
    into, out, reduces = _IN_OUT[op]
    others = [j for j in range(n) if j != root]
    phases: list[Phase] = []
    if into is not None:
        nbytes = into(n) * size
        phases.append([(j, root, nbytes, nbytes if reduces else 0.0) for j in others])
    if out is not None:
        nbytes = out(n) * size
        phases.append([(root, j, nbytes, 0.0) for j in others])
    return phases


class ViaRoot(Algorithm):
    """Everything through the root rank: gather in, combine, send out (see the module docstring)."""

    name = "root"
    description = "root: every rank sends to the root, which combines and sends back"
    ops = frozenset(OPERATIONS)

    def _phases(self, call: CollectiveCall) -> list[Phase]:
        if call.n < 2:
            return []
        return root_phases(call.op, call.n, call.root, call.size_bytes)

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The in-sends to the root, then its out-sends."""
        return play_phases(call.n, self._phases(call))

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """n - 1 sends per phase (in, out or both)."""
        if call.n < 2:
            return 0.0
        into, out, _reduces = _IN_OUT[call.op]
        return float((call.n - 1) * ((into is not None) + (out is not None)))

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: in phase + root's reductions + out phase (alpha-beta per phase)."""
        return phases_cost(call, topology, self._phases(call))
