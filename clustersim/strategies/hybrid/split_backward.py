"""The zero-bubble schedules' split backward in the hybrid strategy: what B and W cost and
what activation memory each frees.

* **FLOPs.** A layer's backward is the gradient of its input (B) and of its weights (W).
  For a matmul ``Y = X A`` the two are ``dX = dY A^T`` and ``dA = X^T dY``, each as many
  FLOPs as the forward (Qi et al. 2024, Sec. 2): so W takes half the backward FLOPs of
  every layer with parameters and B the rest (all of a layer without parameters).  The
  recomputation of ``training.recompute`` runs in B, the first pass that needs the
  activations.  Tensor-parallel collectives of the backward go with B (they carry the
  input gradient); W communicates nothing.
* **Memory.** A forward stores the stage's activations; B frees all but
  :data:`HELD_FOR_W` of them, W the rest.  W needs each weight layer's input ``X`` and its
  output gradient ``dY``; in a transformer layer the inputs of the four weight matmuls are
  14 of its 34 ``s b h`` bytes (Korthikanti et al. 2022), and the output gradients B leaves
  for W are about as many again, so about half stays until W.  The choice is ours (the
  papers count a micro-batch as held until its W ends, which is the upper bound: set
  :data:`HELD_FOR_W` to 1 to get it).

Units: FLOPs per sample, bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...parallel.schedules import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Op
from .. import training
from .stages import StagePlan

HELD_FOR_W = 0.5
"""Share of a micro-batch's stored activations still held from the end of its B to the end
of its W (the module docstring says why)."""
WEIGHT_SHARE = 0.5
"""Share of a parameterised layer's backward FLOPs that is the weight gradient (W)."""


def weight_gradient_flops(model: training.Model, plan: StagePlan) -> float:
    """W's FLOPs per sample on a virtual stage: half the backward of each layer with weights."""
    layers = model.layers[plan.first_layer : plan.first_layer + plan.layers]
    return sum(WEIGHT_SHARE * x.backward_flops for x in layers if x.params > 0)


def split_flops(plan: StagePlan, kind: str, weight_flops: float, extra: float = 0.0) -> float:
    """FLOPs per sample of a B (``bwd_input``: backward minus W, plus recomputation) or a W
    (``bwd_weight``) on ``plan``, whose W costs ``weight_flops`` per sample.  ``extra`` is
    the backward's added work beyond the plan (a mixture of experts' busiest GPU); experts
    are weight layers, so W takes :data:`WEIGHT_SHARE` of it and B the rest."""
    if kind == BACKWARD_WEIGHT:
        return weight_flops + WEIGHT_SHARE * extra
    return plan.backward_flops - weight_flops + plan.recompute_flops + (1 - WEIGHT_SHARE) * extra


def held_after(kind: str) -> float:
    """Share of a (micro-batch, chunk)'s activations still stored after an op of ``kind``."""
    return {FORWARD: 1.0, BACKWARD: 0.0, BACKWARD_INPUT: HELD_FOR_W, BACKWARD_WEIGHT: 0.0}[kind]


def peak_activation_bytes(ops: Sequence[Op], bytes_of: Callable[[int], float]) -> float:
    """Largest activation bytes a device's ops hold at once: a forward of chunk ``c`` stores
    ``bytes_of(c)``, B keeps :data:`HELD_FOR_W` of it, W (or an unsplit backward) frees it."""
    held: dict[tuple[int, int], float] = {}
    best = 0.0
    for op in ops:
        key = (op.microbatch, op.chunk)
        share = held_after(op.kind)
        if share:
            held[key] = share * bytes_of(op.chunk)
        else:
            held.pop(key, None)
        best = max(best, sum(held.values()))
    return best
