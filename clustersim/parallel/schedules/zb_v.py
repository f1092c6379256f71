"""ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two model chunks
per device in a V shape, B and W split, the memory of 1F1B and no bubble in steady state."""

from __future__ import annotations

from ...errors import Problem
from .base import BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Op, Schedule

_KINDS = (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)


class ZeroBubbleVSchedule(Schedule):
    """ZB-V: device ``s`` holds virtual stages ``s`` and ``2p - 1 - s`` (the forward goes down
    the devices and back up, so device 0 holds the first and the last chunk).

    Its order (:meth:`operations`) is the paper's handcrafted V: every device holds at
    most about ``2p`` chunk activations (``p`` micro-batches of the whole device, the peak
    of 1F1B's first stage).  Each device idles ``max(0, 2p - 1 - m) T_F`` between its first
    and its last op (``T_F`` one micro-batch through the whole device): zero for
    ``m >= 2p - 1``, so with no flush barrier between the stages the iteration takes
    ``m (T_F + T_B + T_W)`` in steady state.
    """

    name = "zb-v"
    description = "ZB-V zero-bubble (Qi et al. 2024): 2 chunks per device in a V, 1F1B memory"
    multi_chunk = True
    micro_batch_per_stage = True
    split_backward = True
    default_chunks = 2

    @classmethod
    def problems(cls, stages: int, micro_batches: int, chunks: int) -> list[Problem]:
        """The shared rules, then exactly 2 chunks per device (the two arms of the V)."""
        out = super().problems(stages, micro_batches, chunks)
        if chunks != 2:
            out.append(
                Problem(
                    "pipeline.chunks",
                    f"schedule zb-v runs 2 model chunks per device (a V), not {chunks}",
                    "2 (or leave pipeline.chunks out)",
                )
            )
        return out

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """Chunk 0 of device ``s`` is virtual stage ``s``, chunk 1 is ``2p - 1 - s``."""
        return stage if chunk == 0 else 2 * self.stages - 1 - stage

    def device_of(self, virtual_stage: int) -> tuple[int, int]:
        p = self.stages
        return (virtual_stage, 0) if virtual_stage < p else (2 * p - 1 - virtual_stage, 1)

    def operations(self, stage: int) -> list[Op]:
        """The V schedule of device ``stage`` (``s``), in the phases of the paper's Fig. 4:
        ``2(p-s)-1`` forwards of chunk 0; ``s`` pairs of forwards (chunk 1, chunk 0);
        ``p-s`` rounds of F, B, W on chunk 1; the steady state F, B, W on chunk 0 then on
        chunk 1; the cool-down with ``s`` pairs of Bs (chunk 0, chunk 1) whose Ws wait,
        ``p-s`` rounds of B, W on chunk 0, and the waiting Ws (chunk 1, then chunk 0).
        The phases are laid out for ``max(m, 2p-1)`` micro-batches; those past ``m`` are
        dropped."""
        p, m, s = self.stages, self.micro_batches, stage
        n = max(m, 2 * p - 1)
        ops: list[Op] = []
        nxt = {(kind, c): 0 for kind in _KINDS for c in (0, 1)}

        def emit(*pairs: tuple[str, int]) -> None:
            for kind, chunk in pairs:
                ops.append(Op(kind, nxt[kind, chunk], chunk))
                nxt[kind, chunk] += 1

        emit(*[(FORWARD, 0)] * (2 * (p - s) - 1))
        emit(*[(FORWARD, 1), (FORWARD, 0)] * s)
        emit(*[(FORWARD, 1), (BACKWARD_INPUT, 1), (BACKWARD_WEIGHT, 1)] * (p - s))
        while nxt[FORWARD, 1] < nxt[FORWARD, 0] or nxt[FORWARD, 0] < n:
            if nxt[FORWARD, 0] < n:
                emit((FORWARD, 0))
            emit((BACKWARD_INPUT, 0), (BACKWARD_WEIGHT, 0), (FORWARD, 1))
            emit((BACKWARD_INPUT, 1), (BACKWARD_WEIGHT, 1))
        emit(*[(BACKWARD_INPUT, 0), (BACKWARD_INPUT, 1)] * s)
        emit(*[(BACKWARD_INPUT, 0), (BACKWARD_WEIGHT, 0)] * (p - s))
        for c in (1, 0):
            emit(*[(BACKWARD_WEIGHT, c)] * (nxt[BACKWARD_INPUT, c] - nxt[BACKWARD_WEIGHT, c]))
        return [op for op in ops if op.microbatch < m]

    def theoretical_bubble(self) -> float:
        """Idle between a device's first and last op over that span at T_F = T_B = T_W:
        ``b / (b + 3m)`` with ``b = max(0, 2p - 1 - m)``; zero for ``m >= 2p - 1``."""
        b = max(0, 2 * self.stages - 1 - self.micro_batches)
        return b / (b + 3 * self.micro_batches)
