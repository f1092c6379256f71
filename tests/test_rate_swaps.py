"""The recomputation of an instant that only swaps flows of identical routes
(:meth:`clustersim.network.rates.RateRecomputation._swapped`): a stream's next piece takes
the links its last piece left, so every rate stands and the newcomer takes the rate of the
flow it replaces.  Held to the full recomputation bit for bit, on the collectives whose
pieces stream (trees, rings, halving-doubling) and on the case that forbids the shortcut:
a flow rated on its own this instant that a later arrival joined."""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.collectives import CollectiveCall, run_collective
from clustersim.engine import Simulation
from clustersim.network.rates import RateRecomputation

from .conftest import flat_topology

CASES = [
    ("allreduce", "double_tree", "switch", 16, 2e8),
    ("allreduce", "tree", "switch", 8, 6.4e7),
    ("broadcast", "double_tree", "switch", 2, 6.4e7),
    ("broadcast", "double_tree", "fully_connected", 3, 6.4e7),
    ("reduce", "tree", "ring", 5, 1e7),
    ("allreduce", "ring", "switch", 8, 1e8),
    ("allreduce", "halving_doubling", "switch", 8, 1e8),
    ("allgather", "ring", "ring", 6, 3e7),
]


def _played(op: str, algo: str, kind: str, n: int, size: float) -> tuple[Any, ...]:
    """End time, each flow's end and rate history summed, and the network's counters."""
    topo = flat_topology(kind, n)
    call = CollectiveCall(op, tuple(topo.devices), size, algorithm=algo, root=n - 1)
    sim = Simulation(topo)
    run_collective(sim, call, record_transfers=True)
    sim.run()
    ends = sorted((r.start_s, r.end_s, r.src, r.dst) for r in sim.records if r.kind == "transfer")
    net = sim.network
    return sim.now, ends, net.flows_completed, net.flows_rerated, net.solver_calls


@pytest.mark.parametrize(("op", "algo", "kind", "n", "size"), CASES)
def test_swaps_give_the_full_recomputations_times_to_the_bit(
    op: str, algo: str, kind: str, n: int, size: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every transfer starts and ends at the same float with and without the shortcut, and
    the run ends at the same instant; the shortcut re-rates no more flows than the full
    recomputation does."""
    fast = _played(op, algo, kind, n, size)
    monkeypatch.setattr(RateRecomputation, "_swapped", lambda self: False)
    full = _played(op, algo, kind, n, size)
    assert fast[:3] == full[:3]
    assert fast[3] <= full[3] and fast[4] <= full[4]


def test_the_shortcut_is_taken_on_a_streamed_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 16-rank double tree of 200 MB streams its pieces: most recomputations are swaps,
    so the solver runs and flows are re-rated several times less often than without the
    shortcut (the 64-rank, 1 GB one of test_collectives_tree: 7.8 M flows re-rated and
    32,376 solver calls before, 269 k and 1,848 with it)."""
    *_, rerated, solves = _played("allreduce", "double_tree", "switch", 16, 2e8)
    monkeypatch.setattr(RateRecomputation, "_swapped", lambda self: False)
    *_, rerated_full, solves_full = _played("allreduce", "double_tree", "switch", 16, 2e8)
    assert 3 * solves < solves_full and 3 * rerated < rerated_full
