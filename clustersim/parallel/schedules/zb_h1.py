"""ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B with the
backward split into B and W, the W passes deferred to fill the cool-down."""

from __future__ import annotations

from .base import BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Op, Schedule


class ZeroBubbleH1Schedule(Schedule):
    """ZB-H1: the peak memory of 1F1B, a third of its bubble.

    Stage ``s`` runs 1F1B's ``p - s - 1`` warm-up forwards, then F and B alternately, but
    each W waits ``s`` micro-batches behind its B (W of ``k - s`` after B of ``k``); the
    ``s`` Ws left fill the cool-down.  So stage ``s`` holds at most ``p`` micro-batches
    whose W has not run: more than 1F1B's ``p - s`` on later stages, never more than its
    first stage's ``p`` (the paper keeps the *maximum* over stages).  B, the only part of the
    backward on the critical path, reaches the first stage sooner, and each iteration's
    bubble is ``(p - 1)(T_F + T_B - T_W)`` against 1F1B's ``(p - 1)(T_F + T_B + T_W)``
    (Qi et al. 2024, Sec. 3.1, when ``T_W <= T_F, T_B``; one third of it at
    ``T_F = T_B = T_W``).
    """

    name = "zb-h1"
    description = "ZB-H1 zero-bubble (Qi et al. 2024): B/W split backward, 1F1B memory"
    micro_batch_per_stage = True
    split_backward = True

    def operations(self, stage: int) -> list[Op]:
        p, m = self.stages, self.micro_batches
        warmup = min(p - stage - 1, m)
        ops = [Op(FORWARD, j) for j in range(warmup)]
        for k in range(m):
            if k + warmup < m:
                ops.append(Op(FORWARD, k + warmup))
            ops.append(Op(BACKWARD_INPUT, k))
            if k >= stage:
                ops.append(Op(BACKWARD_WEIGHT, k - stage))
        ops += [Op(BACKWARD_WEIGHT, j) for j in range(max(m - stage, 0), m)]
        return ops

    def theoretical_bubble(self) -> float:
        """``(p-1)(T_F+T_B-T_W) / ((p-1)(T_F+T_B-T_W) + m(T_F+T_B+T_W))`` at T_F = T_B = T_W
        (a transformer's backward is two forwards, half of it input and half weight
        gradient): ``(p-1) / (p-1 + 3m)``."""
        p, m = self.stages, self.micro_batches
        return (p - 1) / (p - 1 + 3 * m)
