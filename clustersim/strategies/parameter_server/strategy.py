"""Data-parallel training with parameter servers (push/pull key-value, Li et al. OSDI 2014).

```yaml
model: {layers: [{name: fc, params: 25e6, flops: 5e7}]}
training: {global_batch: 256, iterations: 10, precision: fp32, optimizer: sgd}
data_parallel:
  sync: ps
  workers: "*/gpu*"                  # default: every GPU
  ps: {servers: 2, placement: dedicated, mode: sync}   # backup | async | ssp | geo
```

**Keys.**  The parameters are cut into keys (blocks): one key per layer with
parameters; a layer holding more than ``total params / servers`` is split into
``ceil(params / (total / servers))`` equal keys named ``layer[0]``,
``layer[1]``, ... so that no server is forced to hold more than its share
because of one big layer.  Keys are assigned to servers by size-balanced
(greedy LPT) assignment: largest key first, each to the least-loaded server;
ties between keys keep layer order, ties between servers take the lowest
server index.

**Partitions** (``data_parallel.ps.partition_bytes``, BytePS's per-key
pipelining; :mod:`.pipeline`): every key above the
size is cut into equal partitions ``name:j``, keys of their own, placed as
above; and each worker-server connection carries one message at a time, in
order, so a partition is pulled as soon as its round closes while later ones
are still being pushed; ``credit`` caps a worker's pushes on the wire.  Unset
(default): the keys above, and a worker's pushes all start at once, sharing its NIC
and ending together.

**Hierarchy** (``data_parallel.ps.hierarchy``, sync only): ``[gpu, cpu, server]``,
``[gpu, server]`` or ``[cpu, server]`` -- a node's workers' gradients are summed on the
node (level ``gpu``: a reduce-scatter among its GPUs, each sending its shard up, as
BytePS's CPU-assisted aggregation; level ``cpu``: on its CPU) and pushed once per node;
the server's round waits for one push per node; pulls come back down, then an
all-gather (:mod:`.hierarchy`).  Unset or ``[server]``: flat.

A model with ``model.embedding`` (a sparse table) has one key per server for its row
shards, moving only the rows a batch touches; see :mod:`.embedding`.
**Replication and failover**: ``replicas``, ``failover_timeout`` (:mod:`.replication`).

``key_distribution: uniform`` or ``{zipf: s}`` replaces the layer keys by
``keys`` synthetic keys with power-law sizes and access frequencies, and
``sharding: hash | range`` replaces the balanced assignment; see
:mod:`.layout`.

**Placement** (``data_parallel.ps.placement``; ``server_devices`` overrides it
and then every matched device is a server, whatever ``servers`` says):

* ``cpu`` -- the CPUs of the first ``servers`` nodes that hold workers (a
  cluster kind without node CPUs is an error at ``data_parallel.ps.placement``);
* ``gpu`` -- the first ``servers`` workers also serve (they train as well);
* ``dedicated`` -- servers on nodes that do not train: by default the CPUs of
  the last ``servers`` nodes of the cluster; every device of a server's node is
  removed from the workers (so those nodes' GPUs idle);
* ``sharded`` -- every worker is also a server (``servers`` is ignored).

A key whose server is the worker itself is pushed and pulled locally, with
no transfer.

**Per iteration** each worker runs the forward pass, then the backward pass (a
transformer's layers priced at their kernels' shapes under the ``roofline`` compute model,
as data parallelism prices them, without recomputation: :mod:`..kernel_times`);
as each layer's gradient is ready its keys are pushed (``params x
BYTES_PER_VALUE[precision]`` bytes each) to their servers -- pushes overlap
the rest of the backward.  A server's work runs on its compute stream (FIFO)
and is memory-bound, over the server device's memory bandwidth (a CPU's
``cpu.memory_bandwidth``; a GPU server's, shared with its training work):
aggregating one push reads the key's gradient (``key bytes``), and an update
costs ``OPTIMIZER_BYTES_PER_PARAM[optimizer] x key params``.  The
updated key is pulled back (``key bytes``); a worker starts its next
iteration when all its pulls are in.

**Modes**

* ``sync`` -- a key's server aggregates every worker's push (``m`` pushes
  cost ``m x key bytes``, each as it arrives), then updates once; every worker
  pulls the new version.  ``training.iterations`` rounds.
* ``backup`` -- the same, but a round closes after the first ``k`` pushes
  (``backup_k``, default ``ceil(0.9 n)``) made on the current version.  With
  ``backup_cancel`` (default) the workers left out are cancelled as in K-sync
  SGD (:mod:`.backup`): when the first key of round
  ``r`` closes, every worker it did not accept stops at once -- its compute is
  cut, its pushes on the wire leave the network -- and pulls round ``r``'s
  result, so a round lasts the ``k``-th fastest worker's time.  Without it,
  later pushes still cross the network and are dropped at the server; their
  senders pull the newest version (after the round's update if it is under
  way).  Training ends after ``training.iterations`` rounds; a worker still
  computing then stops at its next layer boundary.
* ``async`` -- the server applies each push at once (version + 1, an update
  each); the worker pulls the key right after its own push is applied.  Each
  worker runs ``training.iterations`` iterations at its own pace.
* ``ssp`` -- async pushes and pulls, plus the bounded-staleness gate of Ho et
  al. 2013: worker ``w`` may start iteration ``i`` (0-based) only when every
  worker has finished iteration ``i - s - 1``, i.e. has completed at least
  ``i - s`` iterations (``s = staleness``).  No worker starts more than ``s +
  1`` iterations beyond the slowest worker's completed count; ``s = 0`` is
  bulk-synchronous starts.
* ``geo`` -- each worker runs local iterations (forward, backward, a local
  optimizer step on the whole model, no communication); after every
  ``geo_period``-th iteration, and after its last one, it pushes its parameter
  delta (full model bytes, per key) and pulls, async-style; the server applies
  a delta at the cost of an update.  That is ``ceil(iterations / geo_period)``
  pushes per worker.

The servers' side (pushes, rounds, updates, pulls) is :mod:`.server`; the summary keys
are :mod:`.report`'s.  Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from typing import Any

import simpy

from ...budget import WorkEstimate, enforce
from ...engine import Simulation
from ...errors import Problem, ScenarioError
from ...scenario import DataParallelSpec
from ...topology import Device
from .. import training
from ..base import TrainingStrategy
from ..kernel_times import LayerTimes
from ..written_keys import DATA_PARALLEL_READS
from .backup import BackupCancel
from .embedding import layout_blocks
from .hierarchy import Hierarchy, build_groups
from .layout import PS_KEY as _PS
from .layout import Key, count_partitions, partition_keys, place, shard
from .pipeline import Connections
from .replication import FailureHooks, check_replicas, replication_for
from .report import summarize
from .server import KeyServer, KeyState, Pending
from .summary import ParameterServerSummary
from .work import estimate_work


class ParameterServer(FailureHooks, KeyServer, TrainingStrategy):
    """Parameter-server data parallelism: sync, backup, async, ssp, geo."""

    name = "parameter_server"
    description = "data-parallel training with parameter servers: sync/backup/async/ssp/geo"
    config_model = DataParallelSpec
    default_sync = "ps"
    reads = DATA_PARALLEL_READS | {"data_parallel.ps"}

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Workers and servers exist, batch >= workers, backup_k <= workers; build the keys."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        self.ps = spec.ps
        self.load_training()
        workers, servers = place(self.ps, self.topology, self._candidates(spec))
        self.workers = tuple(d.name for d in workers)
        self.servers = tuple(d.name for d in servers)
        self.groups = build_groups(self.ps, self.topology, workers)
        check_replicas(self, self.groups)
        n = len(self.workers)
        self._check_counts(n)
        self.samples = training.split_batch(self.train.global_batch, self.workers)
        self.k = self._quorum(n)
        self.keys = self._make_keys()
        self.layer_keys: dict[int, list[Key]] = {}
        for key in self.keys:
            self.layer_keys.setdefault(key.layer, []).append(key)

    def _candidates(self, spec: DataParallelSpec) -> list[Device]:
        """Devices of ``data_parallel.workers``; when not given, every GPU (else every device)."""
        if "workers" in spec.model_fields_set:
            return self.topology.select(spec.workers, "data_parallel.workers")
        devices = list(self.topology.devices.values())
        return [d for d in devices if d.kind == "gpu"] or devices

    def _check_counts(self, n: int) -> None:
        self.check_batch_covers(n)
        if self.ps.mode == "backup" and self.ps.backup_k is not None and self.ps.backup_k > n:
            raise ScenarioError(
                Problem(
                    f"{_PS}.backup_k", f"{self.ps.backup_k} pushes but {n} workers", f"1 .. {n}"
                )
            )
        if self.model.params <= 0:
            raise ScenarioError(Problem("model", "the model has no parameters to serve"))

    def _quorum(self, n: int) -> int:
        """Pushes a round waits for: n (sync), backup_k or ceil(0.9 n) (backup)."""
        if self.ps.mode != "backup":
            return n
        return self.ps.backup_k or math.ceil(0.9 * n - 1e-9)

    def _make_keys(self) -> list[Key]:
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        blocks = layout_blocks(self)  # the layer keys, or an embedding's shards and them
        keys = count_partitions(blocks, per_value, self.ps.partition_bytes)
        # each key has at least one update per iteration: refuse before making the keys
        source = getattr(self.scenario, "source", "")
        enforce(WorkEstimate(0, keys * self.train.iterations), self.max_events, source)
        blocks = partition_keys(blocks, per_value, self.ps.partition_bytes)
        owner = shard(blocks, len(self.servers), self.ps.sharding)
        return [
            Key(
                i,
                b.name,
                b.layer,
                b.params,
                b.traffic * per_value,
                self.servers[owner[i]],
                b.access,
                b.update_access,
            )
            for i, b in enumerate(blocks)
        ]

    def estimate_work(self) -> WorkEstimate:
        """See :func:`.work.estimate_work`."""
        return estimate_work(self)

    def continues_without_workers(self) -> bool:
        """Backup workers (``mode: backup``): a round closes without the missing ones."""
        return self.ps.mode == "backup"

    def describe(self) -> str:
        return (
            f"parameter-server training ({self.ps.mode}) of {self.model.name} "
            f"({self.model.params:.4g} params, {len(self.keys)} keys) on {len(self.workers)} "
            f"workers and {len(self.servers)} {self.ps.placement} server(s), "
            f"batch {self.train.global_batch}"
        )

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        n = len(self.workers)
        self.sim = sim
        cancel = self.ps.mode == "backup" and self.ps.backup_cancel
        ordered = self.ps.partition_bytes is not None
        self.links = Connections(sim, ordered, cancel, self.ps.credit)
        self.replication = replication_for(self)  # replicas > 1: its links replace these
        self.backup = BackupCancel(self) if cancel else None
        self.hierarchy = Hierarchy(self, self.groups) if self.groups is not None else None
        self.clock = training.IterationClock.new()
        self.state = [KeyState() for _ in self.keys]
        self.pulled = [[0] * len(self.keys) for _ in range(n)]
        self.pending: list[Pending | None] = [None] * n
        self.completed = [0] * n
        self.applied = [0] * n
        self.histogram: dict[int, int] = {}
        self.pushes = [0] * n
        self.dropped = 0
        self.round_end: dict[int, float] = {}
        self.round_samples: list[float] = []
        self.ssp_waiters: list[tuple[int, simpy.Event]] = []
        self.layer_times = LayerTimes.of_workers(self, "none")  # workers do not recompute
        body = self._geo_worker if self.ps.mode == "geo" else self._worker
        if self.backup is not None:
            self.backup.start()
            return
        for w in range(n):
            sim.process(body(w))

    def _worker(self, w: int) -> Generator[Any, Any, None]:
        """Sync, backup, async and ssp: compute, push per layer, wait for every pull."""
        sim, device, samples = self.sim, self.workers[w], self.samples[w]
        rounds = self.ps.mode in ("sync", "backup")
        stop = (lambda: self._done) if self.ps.mode == "backup" else None
        for it in range(self.train.iterations if not rounds else 1 << 62):
            if rounds and min(self.pulled[w]) >= self.train.iterations:
                return
            if self.ps.mode == "ssp":
                yield from self._ssp_gate(it)
            self.clock.start(device, it, sim.now)
            pending = self._expect_pulls(w)
            times = self.layer_times.passes(self.topology.devices[device], samples)
            fwd = training.forward_pass(sim, device, self.model, samples, it, times.forward)
            bwd = training.backward_pass(
                sim, device, self.model, samples, it, self._pusher(w, it, stop), times.backward
            )
            for gen in (fwd, bwd):
                if not (yield from _until(gen, stop)):
                    return
            yield pending.event
            self._finish(w, it)

    def _pusher(self, w: int, it: int, stop: Callable[[], bool] | None) -> Callable[[int], None]:
        """``on_gradient(layer)``: push the layer's keys (unless training has ended)."""

        def on_gradient(layer: int) -> None:
            if stop is None or not stop():
                for key in self.layer_keys.get(layer, ()):
                    self._push(w, key, it)

        return on_gradient

    def _geo_worker(self, w: int) -> Generator[Any, Any, None]:
        """Geo: local steps; every ``geo_period``-th (and the last) iteration pushes deltas."""
        sim, device, samples = self.sim, self.workers[w], self.samples[w]
        iterations, period = self.train.iterations, self.ps.geo_period
        times = self.layer_times.passes(self.topology.devices[device], samples)
        for it in range(iterations):
            self.clock.start(device, it, sim.now)
            yield from training.forward_pass(sim, device, self.model, samples, it, times.forward)
            yield from training.backward_pass(
                sim, device, self.model, samples, it, seconds=times.backward
            )
            opt = self.train.optimizer
            yield training.optimizer_step(sim, device, self.model.params, opt, it)
            if (it + 1) % period == 0 or it == iterations - 1:
                pending = self._expect_pulls(w)
                for key in self.keys:
                    self._push(w, key, it)
                yield pending.event
            self._finish(w, it)

    def _finish(self, w: int, it: int) -> None:
        self.clock.end(self.workers[w], it, self.sim.now)
        self.completed[w] += 1
        self.pending[w] = None
        if self.ssp_waiters:
            slowest = min(self.completed)
            ready = [(t, e) for t, e in self.ssp_waiters if t <= slowest]
            self.ssp_waiters = [(t, e) for t, e in self.ssp_waiters if t > slowest]
            for _, event in ready:
                event.succeed()

    def _ssp_gate(self, it: int) -> Generator[Any, Any, None]:
        """Wait until every worker has completed at least ``it - staleness`` iterations."""
        need = it - self.ps.staleness
        if need > 0 and min(self.completed) < need:
            event = self.sim.event()
            self.ssp_waiters.append((need, event))
            yield event

    def _expect_pulls(self, w: int) -> Pending:
        pending = Pending(len(self.keys), self.sim.event())
        self.pending[w] = pending
        return pending

    # -- summary -------------------------------------------------------------

    def summarize(self, sim: Simulation) -> ParameterServerSummary:
        """See :func:`.report.summarize`."""
        return summarize(self, sim)


def _until(gen: Iterator[Any], stop: Callable[[], bool] | None) -> Generator[Any, Any, bool]:
    """Drive a pass layer by layer; False (after closing it) once ``stop()`` says training ended."""
    for event in gen:
        yield event
        if stop is not None and stop():
            close = getattr(gen, "close", None)
            if close is not None:
                close()
            return False
    return True
