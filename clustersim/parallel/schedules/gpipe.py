"""GPipe (Huang et al. 2019): all forwards, then all backwards."""

from __future__ import annotations

from .base import BACKWARD, FORWARD, Op, Schedule


class GPipeSchedule(Schedule):
    """All forwards in order, then all backwards in reverse order (GPipe)."""

    name = "gpipe"
    description = "GPipe: all forwards, then all backwards"

    def operations(self, stage: int) -> list[Op]:
        m = self.micro_batches
        return [Op(FORWARD, j) for j in range(m)] + [Op(BACKWARD, j) for j in reversed(range(m))]
