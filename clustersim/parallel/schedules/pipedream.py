"""PipeDream (Narayanan et al. 2019, "PipeDream: Generalized Pipeline Parallelism for DNN
Training", SOSP): asynchronous 1F1B with weight stashing and no flush."""

from __future__ import annotations

from typing import ClassVar

from .base import BACKWARD, FORWARD, Op, Schedule


class PipeDreamSchedule(Schedule):
    """PipeDream: 1F1B that never drains; a weight update after every micro-batch.

    After the first iteration's warm-up the pipeline stays in steady 1F1B across
    iteration boundaries (:meth:`run_operations`: 1F1B over the ``m x iterations``
    micro-batches of the run).  Stage ``s`` updates its weights after each backward and
    stashes the version each in-flight micro-batch's forward used, so its backward sees
    the same weights: ``p - s`` versions (the in-flight micro-batches, 1-indexed stages
    ``p - s + 1``... as the paper counts them: stage 1 of p keeps p).  The bubble is the
    warm-up and cool-down of the whole run only: zero in steady state.
    """

    name = "pipedream"
    description = "PipeDream (Narayanan et al. 2019): async 1F1B, weight stashing, no flush"
    micro_batch_per_stage = True
    flush = False
    update_every_microbatch: ClassVar[bool] = True
    """True: a weight update after every backward (PipeDream); False: after every ``m``
    (PipeDream-2BW)."""

    def operations(self, stage: int) -> list[Op]:
        """One iteration's ops as 1F1B orders them (memory and ideal timing of one
        iteration); a run plays :meth:`run_operations`."""
        return [op for _, op in self.run_operations(stage, 1)]

    def run_operations(self, stage: int, iterations: int) -> list[tuple[int, Op]]:
        """(iteration, op) of the whole run: 1F1B over ``m x iterations`` micro-batches,
        micro-batch ``g`` being micro-batch ``g mod m`` of iteration ``g div m``."""
        m = self.micro_batches
        total = m * iterations
        warmup = min(self.stages - stage - 1, total)
        order = [(FORWARD, g) for g in range(warmup)]
        for i in range(total - warmup):
            order += [(FORWARD, warmup + i), (BACKWARD, i)]
        order += [(BACKWARD, g) for g in range(total - warmup, total)]
        return [(g // m, Op(kind, g % m)) for kind, g in order]

    def weight_versions(self, stage: int) -> int:
        """``p - s``: one per micro-batch in flight on stage ``s`` (0-indexed)."""
        return self.stages - stage

    def updates_per_iteration(self) -> int:
        """PipeDream: one per micro-batch; 2BW: one."""
        return self.micro_batches if self.update_every_microbatch else 1

    def theoretical_bubble(self) -> float:
        """Zero: no flush, so in steady state no stage waits (the run's one warm-up and
        cool-down shrink with the iterations)."""
        return 0.0
