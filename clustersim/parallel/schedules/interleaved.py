"""Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): v model chunks per device."""

from __future__ import annotations

from ...errors import Problem
from .. import rules
from .base import BACKWARD, FORWARD, Op, Schedule


class InterleavedSchedule(Schedule):
    """Megatron-LM interleaved 1F1B over ``v`` model chunks per device.

    The k-th forward of a device runs chunk ``(k mod p v) div p`` of micro-batch
    ``(k div p v) p + k mod p`` (groups of ``p`` micro-batches go through one
    chunk, then the next); backwards take the chunks in reverse.  Device ``s``
    warms up with ``2 (p - s - 1) + (v - 1) p`` forwards (at most all ``m v`` of
    them), then alternates, then cools down: Megatron-Core's
    ``get_pp_rank_microbatches`` (``megatron/core/pipeline_parallel/schedules.py``).
    Megatron-LM before November 2024 (commit 4295be1a6c) ran every forward first on
    every device when ``m = p``; Megatron-Core no longer does, so that the last devices
    start their backwards early and hold fewer micro-batches (checked against
    Megatron-LM's measured memory: ``clustersim reproduce --only memory``).
    """

    name = "interleaved"
    description = "interleaved 1F1B (Megatron-LM): v model chunks per device"
    multi_chunk = True
    micro_batch_per_stage = True

    @classmethod
    def problems(cls, stages: int, micro_batches: int, chunks: int) -> list[Problem]:
        """The shared rules, then m a multiple of p (whole groups of p micro-batches)."""
        out = super().problems(stages, micro_batches, chunks)
        if not out:
            problem = rules.micro_batches_multiple_problem(cls.name, stages, micro_batches)
            out += [problem] if problem is not None else []
        return out

    def _op(self, kind: str, k: int) -> Op:
        p, v = self.stages, self.chunks
        chunk = (k % (p * v)) // p
        if kind == BACKWARD:
            chunk = v - 1 - chunk
        return Op(kind, (k // (p * v)) * p + k % p, chunk)

    def operations(self, stage: int) -> list[Op]:
        p, m, v = self.stages, self.micro_batches, self.chunks
        total = m * v
        warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
        ops = [self._op(FORWARD, k) for k in range(warmup)]
        for k in range(total - warmup):
            ops += [self._op(FORWARD, warmup + k), self._op(BACKWARD, k)]
        ops += [self._op(BACKWARD, k) for k in range(total - warmup, total)]
        return ops

    def theoretical_bubble(self) -> float:
        p, m, v = self.stages, self.micro_batches, self.chunks
        return (p - 1) / (v * m + p - 1)
