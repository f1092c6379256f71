"""The 3D hybrid's micro-batches per replica: each replica the schedule's m, or the batch
shared out by ``data_parallel.balance`` (docs/mixed-clusters.md, "Balancing data
parallelism").

The unit of a share is a replica: every device of one replica runs its micro-batches.
Balanced, the dp x m micro-batches of an iteration keep their size (global_batch / (dp m)
samples, so the kernels keep their shapes) and go to the replicas in different numbers --
more gradient-accumulation steps where the hardware is faster, as heterogeneous training
systems do:

* ``speed`` -- replica d with m micro-batches is estimated to take
  ``m t_d / (1 - bubble(p, m, v))`` seconds, the schedule's own theoretical bubble
  (``(m + p - 1) t_d`` for GPipe and 1F1B), where ``t_d`` is the time of one micro-batch
  through its slowest stage on its own devices: the stage's forward and backward (with
  recomputation) under its devices' compute model, plus its tensor-parallel collectives.
  The counts minimise the slowest replica's estimate
  (:func:`~clustersim.parallel.batch_shares.balanced_shares`).
* ``{GLOB: weight}`` -- in proportion to the replica's weight (the one weight of all its
  devices), by largest remainder.

Each replica runs its own schedule of (p, m_d, v), whose rules hold for each count: at
least p micro-batches where the schedule warms up with one per stage (1F1B, interleaved,
zero-bubble), and whole groups of p for the interleaved schedule (the shares then count
groups).  The gradient sync and the optimizer step wait for every replica, as always.
What runs one collective or transfer per micro-batch across replicas cannot take
different counts and is refused with a balance: ZeRO-2/3 (a reduce-scatter per
micro-batch), expert parallelism (the all-to-alls span replicas), the flush-free schedules
(an update per micro-batch) and offload (its schedule of copies is the replicas' one).
With ``parallelism.simulate_replicas: one`` one replica of each class of alike replicas (the
same kinds of device in the same places and the same counts) stands for its class
(:mod:`.replica_classes`).
Units: seconds, micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ...errors import Problem, ScenarioError
from ...metrics import BatchShares
from ...parallel.batch_shares import (
    BALANCE_KEY,
    Ranks,
    rank_label,
    share_out,
    speed_key,
)
from ...parallel.rules import SHARDED_STAGE
from ...parallel.schedules import BACKWARD, FORWARD, Op, Schedule
from ..training import work_duration
from .compute_time import StageTimes, run_casts, scenario_folder


class ReplicaBatches:
    """Micro-batches per replica of :class:`~.layout.HybridLayout` (module docstring)."""

    # -- planning ------------------------------------------------------------

    def _share_micro_batches(self: Any) -> None:
        """Set ``replica_micro_batches`` (per replica), ``batch_shares`` (the summary's
        block, None when even) and the schedule of every count."""
        m, balance = self.schedule.micro_batches, self.config.balance
        self.batch_shares: BatchShares | None = None
        self.replica_micro_batches: list[int] = [m] * self.dp
        self._schedules: dict[int, Schedule] = {m: self.schedule}
        if balance == "even":
            return
        self._refuse_unbalanceable()
        shares = self.replica_micro_batches = self._balanced_counts(balance)
        kind = type(self.schedule)
        for count in sorted(set(shares)):
            self._schedules[count] = kind(self.pp, count, self.schedule.chunks)
        labels = [rank_label(self._replica_devices(d)) for d in range(self.dp)]
        how = "speed" if balance == "speed" else "weights"
        self.batch_shares = BatchShares.of(how, "micro-batch", labels, shares, self.micro_batch)

    def _balanced_counts(self: Any, balance: Any) -> list[int]:
        """The dp x m micro-batches per replica by ``balance`` (speed or weights), in whole
        steps the schedule accepts, at least its minimum each."""
        least = self.pp if type(self.schedule).micro_batch_per_stage else 1
        step = self._micro_batch_step(least)
        units = "micro-batches" if step == 1 else f"groups of {step} micro-batches"
        devices = [self._replica_devices(d) for d in range(self.dp)]
        ranks = Ranks(devices, [f"replica {d}" for d in range(self.dp)], "replica", units)
        times = self._build_stage_times() if balance == "speed" else None

        def seconds_of(d: int) -> Callable[[int], float]:
            return partial(self._estimated_seconds, self._microbatch_seconds(d, times), step)

        fix = "more micro-batches (a larger global batch, a smaller micro-batch), closer weights"
        total = self.dp * self.schedule.micro_batches // step
        groups = share_out(balance, total, ranks, self.topology, seconds_of, -(-least // step), fix)
        return [n * step for n in groups]

    def _refuse_unbalanceable(self: Any) -> None:
        """Exit 2 at ``data_parallel.balance`` for what needs equal counts (module docstring)."""
        refused = [
            (self.zero >= SHARDED_STAGE, f"ZeRO-{self.zero} (a reduce-scatter per micro-batch)"),
            (self.parallelism.ep > 1, "expert parallelism (all-to-alls across replicas)"),
            (not self.schedule.flush, f"the {self.schedule.name} schedule (no flush)"),
            (self.train.offload is not None, "training.offload"),
        ]
        for found, what in refused:
            if found:
                raise ScenarioError(
                    Problem(
                        BALANCE_KEY,
                        f"replicas with different micro-batch counts are not modelled with {what}",
                        "even, or ZeRO-0/1 with a flushing schedule, ep 1 and no offload",
                    )
                )

    def _micro_batch_step(self: Any, least: int) -> int:
        """The smallest step between two micro-batch counts the schedule accepts from
        ``least`` on (p for the interleaved schedule's whole groups, else 1)."""
        kind = type(self.schedule)
        for step in range(1, self.pp + 1):
            if not kind.problems(self.pp, least + step, self.schedule.chunks):
                return step
        return self.pp

    def _estimated_seconds(self: Any, per_microbatch: float, step: int, groups: int) -> float:
        """A replica's iteration with ``groups`` x ``step`` micro-batches of
        ``per_microbatch`` seconds at its slowest stage: m t / (1 - the schedule's bubble)."""
        m = groups * step
        bubble = type(self.schedule)(self.pp, m, self.schedule.chunks).theoretical_bubble()
        return m * per_microbatch / (1.0 - bubble)

    def _build_stage_times(self: Any) -> StageTimes:
        """The compute seconds of the layout's (virtual) stages on its workers: its
        recomputation per stage, its fp8 casts, its expert parallelism."""
        layers = [(plan.first_layer, plan.layers) for plan in self.plans]
        folder = scenario_folder(self.scenario.source or "")
        workers = [self.topology.devices[w] for w in self.placement.workers]
        modes = self.virtual_recompute()
        return StageTimes(
            self.model,
            layers,
            self.tp,
            modes,
            folder,
            workers,
            run_casts(self),
            ep=self.parallelism.ep,
        )

    def _microbatch_seconds(self: Any, d: int, times: StageTimes) -> float:
        """Seconds of one micro-batch through replica ``d``'s slowest stage: forward and
        backward of its chunks on its slowest device, and its tensor-parallel collectives."""
        mb, per_device = self.micro_batch, self.tp * self.cp
        slowest = 0.0
        for s in range(self.pp):
            group = {speed_key(self.topology.devices[x]): x for x in self.groups[d][s]}
            for name in group.values():
                device, stage_s = self.topology.devices[name], 0.0
                for k in self._chunks_of(s):
                    for forward in (True, False):
                        flops = self._pass_flops(k, forward) * mb / per_device
                        rate = times.seconds_per_flop(device, k, forward, mb)
                        work = {"flops": flops} if rate is None else {"seconds": flops * rate}
                        stage_s += work_duration(device, work)
                slowest = max(slowest, stage_s + self._tp_seconds(d, s))
        return slowest

    def _tp_seconds(self: Any, d: int, s: int) -> float:
        """Seconds of stage ``s``'s tensor-parallel collectives for one micro-batch, forward
        and backward (and the forward's again with full recomputation), on replica ``d``."""
        if self.tp == 1:
            return 0.0
        ops: tuple[Any, ...] = ()
        for k in self._chunks_of(s):
            plan = self.plans[k]
            passes = 2 if self.recompute_of(k) == "full" else 1
            ops += self._tp_ops(plan, FORWARD) * passes + self._tp_ops(plan, BACKWARD)
        return self.tp_timers[d, s].seconds(ops)

    def _replica_devices(self: Any, d: int) -> list[Any]:
        """Replica ``d``'s devices, stage by stage."""
        return [self.topology.devices[x] for group in self.groups[d] for x in group]

    # -- running ---------------------------------------------------------------

    def _replica_ops(self: Any) -> None:
        """The operations of every micro-batch count, per stage (after the work limit)."""
        self._ops_by_count = {self.schedule.micro_batches: self.ops}
        for count, schedule in self._schedules.items():
            if count not in self._ops_by_count:
                self._ops_by_count[count] = [schedule.operations(s) for s in range(self.pp)]

    def ops_of(self: Any, d: int) -> list[list[Op]]:
        """Per stage, the operations replica ``d`` runs in one iteration."""
        return self._ops_by_count[self.replica_micro_batches[d]]

    def micro_batch_counts(self: Any) -> dict[int, int]:
        """Micro-batch count -> replicas that run it (one entry when even)."""
        counts: dict[int, int] = {}
        for m in self.replica_micro_batches:
            counts[m] = counts.get(m, 0) + 1
        return counts

    def balance_text(self: Any) -> str:
        """``32 micro-batches of 2 samples shared by speed (...)`` for describe(); the even
        text otherwise."""
        m, b = self.schedule.micro_batches, f"{self.micro_batch:.4g}"
        samples = f"{b} sample" if b == "1" else f"{b} samples"
        if self.batch_shares is None:
            return f"{m} micro-batches of {samples}"
        how = self.batch_shares.balance
        shares = self.batch_shares.describe()
        return f"{m * self.dp} micro-batches of {samples} shared by {how} ({shares})"
