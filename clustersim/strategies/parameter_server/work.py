"""The work a parameter-server run will do, estimated before it runs (for the engine's
work limit; see :mod:`clustersim.budget`).  Counts: transfers and records, and the memory
every transfer keeps (:data:`HELD_SENDS_PER_TRANSFER`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...budget import WorkEstimate
from .hierarchy import collective_rows_per_round, transfers_per_round

if TYPE_CHECKING:
    from .strategy import ParameterServer

HELD_SENDS_PER_TRANSFER = 8
"""Memory a parameter server's push or pull keeps until the run ends (its message, the
callbacks and records that refer to it, its flow), in sends of a collective schedule
(:data:`~clustersim.budget.MEMORY_PER_HELD_SEND`): about 2.4 kB a transfer, measured on
ps_vs_ring/bert_large_ps_servers_1x, 143 MB beyond its records for 60,192 transfers in 1
iteration, 431 MB for 180,576 in 3 (commit e712558)."""


def estimate_work(ps: ParameterServer) -> WorkEstimate:
    """Per worker and iteration a record per layer and pass (geo: and its local step);
    per round of pushes (every iteration; geo: every ``geo_period``-th and the last)
    each key's push and pull (a transfer and a record each, unless the worker serves
    the key itself) and the server's aggregation or update; sync and backup: one
    update per key and round besides; with ``replicas: r``, r - 1 forwards (a transfer
    and a replica update each) per update (sync, backup) or applied push.  Under a
    hierarchy: its hops and the sends of its nodes' collectives, and their rows."""
    n, iterations = len(ps.workers), ps.train.iterations
    geo = ps.ps.mode == "geo"
    computes = n * (2 * len(ps.model.layers) + geo) * iterations
    rounds = math.ceil(iterations / ps.ps.geo_period) if geo else iterations
    workers = set(ps.workers)
    remote = sum(n - (key.server in workers) for key in ps.keys)
    transfers = 2 * remote * rounds
    updates = len(ps.keys) * rounds if ps.ps.mode in ("sync", "backup") else 0
    server = n * len(ps.keys) * rounds + updates
    if ps.groups is not None:  # hierarchy: its hops; local sums plus one per node
        transfers = rounds * sum(transfers_per_round(ps.groups, ps.workers, key) for key in ps.keys)
        server += len(ps.groups) * len(ps.keys) * rounds
        server += collective_rows_per_round(ps.groups) * len(ps.keys) * rounds
    extra = (ps.ps.replicas - 1) * (updates or n * len(ps.keys) * rounds)  # forwards
    held = HELD_SENDS_PER_TRANSFER * (transfers + extra)  # memory: kept to the end
    return WorkEstimate(transfers + extra, computes + transfers + server + 2 * extra, 0, held)
