"""The one cluster a plan's candidates run on, built once per process.

Every candidate of a plan has the same cluster; building a 16,384-GPU topology takes half a
second, and what is kept per topology (collective prices, routes, orbits) serves every
candidate after the first only if they share it.  The enumeration keeps the topology it
built (:func:`keep_topology`), so candidates run in this process or in workers forked
after it start with it and with what it priced on it; other workers build it once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...caches import registered

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...topology import Topology

_TOPOLOGY: dict[str, Topology] = registered({})
"""The cluster of this process's candidates, by :func:`cluster_key` (one entry)."""


def cluster_key(scenario: Scenario) -> str:
    """What the topology of ``scenario`` is built from: its cluster section and checkpoint
    storage (as JSON text)."""
    checkpoint = scenario.checkpoint
    storage = checkpoint.storage if checkpoint is not None else None
    extra = "" if storage is None else storage.model_dump_json()
    return f"{scenario.cluster.model_dump_json()}\n{extra}"


def keep_topology(scenario: Scenario, topology: Topology) -> None:
    """Keep ``topology`` (``scenario``'s cluster, built) for :func:`candidate_topology`."""
    _TOPOLOGY.clear()
    _TOPOLOGY[cluster_key(scenario)] = topology


def candidate_topology(scenario: Scenario) -> Topology:
    """``scenario``'s topology: the one this process kept for its cluster, else built
    (:func:`clustersim.api.scenario_topology`) and kept."""
    from ...api import scenario_topology

    key = cluster_key(scenario)
    found = _TOPOLOGY.get(key)
    if found is None:
        found = scenario_topology(scenario)
        keep_topology(scenario, found)
    return found
