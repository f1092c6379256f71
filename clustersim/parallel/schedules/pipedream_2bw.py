"""PipeDream-2BW (Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN
Training", ICML): double-buffered weights, gradients accumulated over m micro-batches,
no flush."""

from __future__ import annotations

from .pipedream import PipeDreamSchedule


class PipeDream2BWSchedule(PipeDreamSchedule):
    """PipeDream-2BW: PipeDream's flush-free 1F1B, one weight update per ``m`` micro-batches.

    The update of iteration ``i`` (gradients accumulated over its ``m`` micro-batches, then
    the data-parallel sync and the optimizer step) runs beside the pipeline; the forwards
    of iteration ``i + 1`` keep using the older version, and those of ``i + 2`` wait for
    it (the paper's one-step delay, ``W(t+1) = W(t) - lr grad f(W(t-1))``).  So every stage
    holds 2 weight versions, whatever ``p``.
    """

    name = "pipedream-2bw"
    description = "PipeDream-2BW (Narayanan et al. 2021): 2 weight versions, no flush"
    update_every_microbatch = False

    def weight_versions(self, stage: int) -> int:
        """2: the version being used and the one being built."""
        return 2
