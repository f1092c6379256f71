"""clustersim's caches of work done on a cluster (clustersim/caches.py): every module-level
cache of the package is registered, :func:`clear_caches` empties them all and lets the
cluster go, and results never depend on what was cached."""

from __future__ import annotations

import gc
import sys

import clustersim
from clustersim.api import simulate
from clustersim.caches import _CACHES, clear_caches
from clustersim.memo import RepeatMemo
from clustersim.topology import Topology

from .conftest import SCENARIOS

SCENARIO = SCENARIOS / "data_parallel" / "overlap.yaml"


def _module_tables() -> dict[str, object]:
    """Every private dict, set, list and RepeatMemo at the top level of a loaded clustersim
    module, by its dotted name."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if name != "clustersim" and not name.startswith("clustersim."):
            continue
        for attr, value in vars(module).items():
            if not attr.startswith("_") or attr.startswith("__"):
                continue
            if isinstance(value, (RepeatMemo, dict, set, list)) and attr != "_CACHES":
                found[f"{name}.{attr}"] = value
    return found


def test_a_run_fills_only_registered_caches_and_clear_empties_them() -> None:
    """Runs of a data-parallel scenario (NCCL's channels and tuner), a hierarchical
    all-reduce and an analytical-network run, each on a new cluster, grow no module-level
    table but registered caches (tables filled at import, or by a command line, are not
    caches of a run); clear_caches empties each."""
    scenarios = (
        SCENARIO,
        SCENARIOS / "collectives" / "oversubscribed_hierarchical.yaml",
        SCENARIOS / "mixed" / "data_parallel_by_speed.yaml",
    )
    for scenario in scenarios:  # every module they need imported, its tables made
        simulate(scenario)
    clear_caches()
    before = {name: _size(value) for name, value in _module_tables().items()}
    for scenario in scenarios:  # again: a cluster of its own, so a cache of it grows
        simulate(scenario)
    registered = {id(cache) for cache in _CACHES}
    grown = sorted(
        name
        for name, value in _module_tables().items()
        if _size(value) > before.get(name, 0) and id(value) not in registered
    )
    assert grown == []
    assert any(len(cache) for cache in _CACHES if isinstance(cache, dict))  # type: ignore[arg-type]
    clear_caches()
    assert all(not cache for cache in _CACHES if isinstance(cache, dict))  # type: ignore[arg-type]
    memos = [cache for cache in _CACHES if isinstance(cache, RepeatMemo)]
    assert memos and all(not memo.kept and not memo.asked for memo in memos)


def _size(table: object) -> int:
    """Entries of a module table (a RepeatMemo's kept and asked keys)."""
    if isinstance(table, RepeatMemo):
        return len(table.kept) + len(table.asked)
    return len(table)  # type: ignore[arg-type]


def test_clearing_lets_the_cluster_go() -> None:
    """A finished run's topology stays alive while the caches hold it, and is freed once they
    are cleared (what a notebook done with a large cluster calls)."""
    result = simulate(SCENARIO)
    topology = id(result.topology)  # Topology has slots and no weak references
    del result
    gc.collect()
    assert _alive(topology)  # held by the caches of what was priced on it
    clustersim.clear_caches()
    gc.collect()
    assert not _alive(topology)


def _alive(topology_id: int) -> bool:
    """Whether the Topology object of that id is still alive (tracked by the collector)."""
    return any(id(o) == topology_id and isinstance(o, Topology) for o in gc.get_objects())


def test_results_do_not_depend_on_the_caches() -> None:
    """The same scenario run with warm caches, then after clearing them, gives the same
    summary, byte for byte."""
    warm = simulate(SCENARIO).summary_json()
    again = simulate(SCENARIO).summary_json()
    clear_caches()
    cold = simulate(SCENARIO).summary_json()
    assert warm == again == cold
