"""ZeRO-2 and ZeRO-3 inside the 3D hybrid: tensor parallelism with sharded model states.

Megatron-DeepSpeed runs ZeRO stages 2 and 3 next to Megatron's tensor parallelism: the
data-parallel group of each tensor rank (same stage, same tensor rank, other replicas)
shards that rank's 1/t slice of the model states.  DeepSpeed's pipeline engine asserts a
ZeRO stage below 2, so pipeline parallelism keeps ZeRO 0 or 1
(:func:`clustersim.parallel.rules.sharded_zero_problem`).  With ``dp`` replicas, ``m``
micro-batches (``v`` chunks) per iteration and ``P`` = the stage's parameters / t
(``/ q^2`` for 2.5-D), one collective per tensor rank over its dp group each time:

* **ZeRO-1** (as before): all-reduce-sized gradients accumulate over the micro-batches and
  are reduce-scattered once after the last backward (``P`` values); the step updates
  ``P / dp``; the updated parameters are all-gathered (``P``).
* **ZeRO-2**: a rank keeps only its gradient shard, so it cannot accumulate the full
  gradient over micro-batches: DeepSpeed's stage-2 optimizer reduces (reduce-scatters)
  the gradients after *every* micro-batch's backward, ``m`` reduce-scatters of ``P`` per
  iteration, then the step and one all-gather of ``P``.
* **ZeRO-3**: parameters are sharded too.  Before each forward and each backward of a
  micro-batch the stage's parameters are all-gathered (``P``; DeepSpeed releases them
  after use and gathers again, per micro-batch, unless a parameter is under its
  persistence threshold, which is not modelled), and the gradients are reduce-scattered
  after each backward as in ZeRO-2; no all-gather after the step.  ``3 m`` collectives of
  ``P`` per iteration.  Here each gather is one collective of the whole stage before its
  pass (not overlapped with compute: DeepSpeed prefetches layer by layer, so this is an
  upper bound on the exposed time); the memory counts DeepSpeed's working set instead:
  the gathered parameters of the two largest consecutive layers (:func:`gathered_buffer_bytes`).

Model states per GPU: :func:`clustersim.model.memory.model_states` of ``P`` sharded over dp.
Buffers (:func:`sharded_buffer_bytes`): the reduce bucket, and at stage 3 the gathered
parameters.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...parallel.rules import SHARDED_STAGE

PARAMETER_STAGE = 3
"""The ZeRO stage that shards (and gathers) parameters."""

__all__ = [
    "PARAMETER_STAGE",
    "SHARDED_STAGE",
    "dp_rounds",
    "gathered_buffer_bytes",
    "sharded_buffer_bytes",
]


def dp_rounds(zero: int, passes: int) -> int:
    """Data-parallel collectives (rounds of one per tensor rank) per iteration and stage,
    with ``passes`` = micro-batches x chunks: 1 all-reduce (ZeRO 0), a reduce-scatter and an
    all-gather (1), ``passes`` reduce-scatters and an all-gather (2), ``passes``
    reduce-scatters and ``2 passes`` gathers (3)."""
    if zero >= PARAMETER_STAGE:
        return 3 * passes
    if zero >= SHARDED_STAGE:
        return passes + 1
    return 2 if zero >= 1 else 1


def gathered_buffer_bytes(layer_params: Sequence[float], shards: float, per_value: float) -> float:
    """ZeRO-3's gathered parameters at the peak on one GPU: the two largest consecutive
    layers' ``params / shards`` (the layer computing and the one prefetched), bytes."""
    sizes = [p / shards * per_value for p in layer_params if p > 0]
    if not sizes:
        return 0.0
    if len(sizes) == 1:
        return sizes[0]
    return max(a + b for a, b in zip(sizes, sizes[1:], strict=False))


def sharded_buffer_bytes(
    zero: int, layer_params: Sequence[float], shards: float, per_value: float, bucket: float
) -> float:
    """Communication buffers of ZeRO-2/3 on one GPU (0 below stage 2, where Megatron
    reduces its contiguous gradient buffer in place): DeepSpeed's gradient reduce bucket
    (``data_parallel.allreduce.bucket``, at most the stage's gradients) and, at stage 3,
    the gathered parameters (:func:`gathered_buffer_bytes`).  Bytes."""
    if zero < SHARDED_STAGE:
        return 0.0
    gradients = sum(layer_params) / shards * per_value
    out = min(bucket, gradients)
    if zero >= PARAMETER_STAGE:
        out += gathered_buffer_bytes(layer_params, shards, per_value)
    return out
