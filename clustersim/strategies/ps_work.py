"""The work a parameter-server run will do, estimated before it runs (for the engine's
work limit; see :mod:`clustersim.budget`).  Counts: transfers and records."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..budget import WorkEstimate
from .ps_hierarchy import transfers_per_round

if TYPE_CHECKING:
    from .parameter_server import ParameterServer


def estimate_work(ps: ParameterServer) -> WorkEstimate:
    """Per worker and iteration a record per layer and pass (geo: and its local step);
    per round of pushes (every iteration; geo: every ``geo_period``-th and the last)
    each key's push and pull (a transfer and a record each, unless the worker serves
    the key itself) and the server's aggregation or update; sync and backup: one
    update per key and round besides; with ``replicas: r``, r - 1 forwards (a transfer
    and a replica update each) per update (sync, backup) or applied push."""
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
    extra = (ps.ps.replicas - 1) * (updates or n * len(ps.keys) * rounds)  # forwards
    return WorkEstimate(transfers + extra, computes + transfers + server + 2 * extra)
