"""1F1B (PipeDream-Flush, Narayanan et al. 2021): warm-up, one forward one backward, cool-down."""

from __future__ import annotations

from .base import BACKWARD, FORWARD, Op, Schedule


class OneFOneBSchedule(Schedule):
    """PipeDream-Flush: warm-up forwards, then one forward / one backward, then cool-down."""

    name = "1f1b"
    description = "1F1B (PipeDream-Flush): warm-up, one forward one backward, cool-down"
    micro_batch_per_stage = True

    def operations(self, stage: int) -> list[Op]:
        m = self.micro_batches
        warmup = min(self.stages - stage - 1, m)
        ops = [Op(FORWARD, j) for j in range(warmup)]
        for i in range(m - warmup):
            ops += [Op(FORWARD, warmup + i), Op(BACKWARD, i)]
        ops += [Op(BACKWARD, j) for j in range(m - warmup, m)]
        return ops
