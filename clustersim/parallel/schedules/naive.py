"""The naive schedule: one micro-batch at a time through every stage and back."""

from __future__ import annotations

from .base import BACKWARD, FORWARD, Op, Schedule


class NaiveSchedule(Schedule):
    """One micro-batch at a time: forward through every stage, then backward."""

    name = "naive"
    description = "one micro-batch at a time through all stages and back"

    def operations(self, stage: int) -> list[Op]:
        ops: list[Op] = []
        for j in range(self.micro_batches):
            ops += [Op(FORWARD, j), Op(BACKWARD, j)]
        return ops

    def theoretical_bubble(self) -> float:
        return (self.stages - 1) / self.stages
