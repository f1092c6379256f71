"""The summary part of a parameter-server run (:mod:`.strategy`): the training times --
rounds in the synchronous modes, per-worker periods in the asynchronous ones -- and the
servers' load.

Besides the common training keys: ``updates_per_s`` -- sync and
backup: rounds / end of the last round; async, ssp, geo: the sum over workers
of (whole-model updates the worker had applied / end of its last iteration),
the server's rate while every worker trains at its own pace (a whole-model
update = one applied push of every key); ``iterations_per_worker``;
``pushes_per_worker`` (whole-model pushes: key pushes / keys); ``key_pushes``
and ``key_pushes_dropped`` (backup);
``busiest_server`` -- the server that moved the most bytes (pushes to it and
pulls from it, dropped backup pushes included; the first of equals) and
``busiest_server_share`` -- its share of the bytes every server moved;
``replicas``, ``replication_bytes``, ``failovers``, ``failover_lost_s`` (``replicas`` > 1);
``cancelled_compute_s`` and ``cancelled_push_bytes`` (backup with
``backup_cancel``: the compute of the rounds workers were cancelled in, the bytes
their cancelled pushes had moved);
``staleness_histogram`` -- for each applied push: by how many versions the
key advanced between the worker's pull and the application (always 0 in sync
and backup).  Async modes: ``iteration_time_s`` is the mean over workers of
their mean iteration period, ``iteration_times_s[i]`` the mean over workers
of the length of their iteration ``i``, ``throughput_samples_per_s`` the sum
over workers of samples / end of their last iteration.  Backup: iteration
``r`` ends when the last worker taking part in round ``r`` has pulled it, and
throughput counts the samples of accepted pushes.  Units: seconds, bytes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...engine import Simulation
from ...errors import SimulationError
from ...metrics import IterationTimes, ModelInfo, TrainingTimes, training_summary
from .. import training
from .embedding import embedding_fields
from .layout import busiest, server_bytes
from .summary import KeyPlacement, ParameterServerSummary, ServerLoad, ServerSettings

if TYPE_CHECKING:
    from .strategy import ParameterServer

ASYNC_MODES = ("async", "ssp", "geo")
"""Modes in which each worker runs at its own pace."""


def summarize(ps: ParameterServer, sim: Simulation) -> ParameterServerSummary:
    """The run's summary part: the common training keys, plus keys, servers, updates/s,
    iterations, staleness (module docstring)."""
    mode = ps.ps.mode
    measured, updates_per_s = (
        async_summary(ps, sim) if mode in ASYNC_MODES else round_summary(ps, sim)
    )
    per_value = training.BYTES_PER_VALUE[ps.train.precision]
    load = {s: 0.0 for s in ps.servers}
    for key in ps.keys:
        load[key.server] += key.params
    hot, hot_share = busiest(server_bytes(sim.records, ps.servers))
    summary = ParameterServerSummary(
        times=measured.times,
        updates_per_s=updates_per_s,
        iterations_per_worker=dict(zip(ps.workers, ps.completed, strict=True)),
        staleness_histogram=dict(sorted(ps.histogram.items())),
        model=ModelInfo(ps.model.name, ps.model.params),
        parameter_server=ServerSettings(
            mode=mode,
            placement=ps.ps.placement,
            backup_k=ps.k if mode == "backup" else None,
            staleness=ps.ps.staleness if mode == "ssp" else None,
            geo_period=ps.ps.geo_period if mode == "geo" else None,
        ),
        workers=list(ps.workers),
        servers={s: ServerLoad(p, p * per_value) for s, p in load.items()},
        keys=[KeyPlacement(k.name, k.params, k.nbytes, k.server) for k in ps.keys],
        global_batch=ps.train.global_batch,
        pushes_per_worker={d: ps.pushes[w] / len(ps.keys) for w, d in enumerate(ps.workers)},
        key_pushes=sum(ps.pushes),
        key_pushes_dropped=ps.dropped,
        busiest_server=hot,
        busiest_server_share=hot_share,
        shares=measured.shares,
        cancelled_compute_s=ps.backup.cancelled_compute_s if ps.backup else None,
        cancelled_push_bytes=ps.backup.cancelled_push_bytes if ps.backup else None,
        replication=ps.replication.summary() if ps.replication else None,
    )
    return replace(summary, **embedding_fields(ps))


def round_summary(self: ParameterServer, sim: Simulation) -> tuple[TrainingTimes, float]:
    """Sync/backup: iteration r ends when its last participant has pulled round r;
    the training times and the updates per second."""
    rounds = self.train.iterations
    if len(self.round_end) != rounds:
        raise SimulationError(f"parameter_server finished {len(self.round_end)} of {rounds}")
    clock = training.IterationClock.new()
    for r, t in self.round_end.items():
        clock.end("rounds", r, t)
    batch = sum(self.round_samples) / len(self.round_samples)
    measured = training_summary(clock, sim.records, rounds, batch, _devices(self), self.workers)
    last = max(self.round_end.values())
    return measured, rounds / last if last > 0 else 0.0


def async_summary(self: ParameterServer, sim: Simulation) -> tuple[TrainingTimes, float]:
    """Async modes: per-worker periods and rates, summed or averaged over workers;
    the training times and the updates per second."""
    iterations = self.train.iterations
    if min(self.completed) != iterations:
        raise SimulationError(
            f"parameter_server: a worker finished {min(self.completed)} of {iterations}"
        )
    measured = training_summary(
        self.clock, sim.records, iterations, self.train.global_batch, _devices(self), self.workers
    )
    ends = [[self.clock.ends[d, i] for i in range(iterations)] for d in self.workers]
    lengths = [[e[i] - (e[i - 1] if i else 0.0) for i in range(iterations)] for e in ends]
    n = len(self.workers)
    times = IterationTimes(
        iteration_time_s=sum(e[-1] / iterations for e in ends) / n,
        iteration_times_s=[sum(x[i] for x in lengths) / n for i in range(iterations)],
        throughput_samples_per_s=sum(
            self.samples[w] * iterations / ends[w][-1] for w in range(n) if ends[w][-1] > 0
        ),
    )
    nkeys = len(self.keys)
    updates_per_s = sum(self.applied[w] / nkeys / ends[w][-1] for w in range(n) if ends[w][-1] > 0)
    return TrainingTimes(times, measured.shares), updates_per_s


def _devices(ps: ParameterServer) -> list[str]:
    """The workers, then the servers that do not train."""
    return list(dict.fromkeys(ps.workers + ps.servers))
