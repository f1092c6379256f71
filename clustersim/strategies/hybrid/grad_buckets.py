"""Gradient buckets of the 3D hybrid, as Megatron-Core's distributed data parallelism lays
them out (``megatron/core/distributed/``: ``DistributedDataParallel`` and
``param_and_grad_buffer.py``).

Each model chunk (virtual stage) of a device keeps its gradients in one contiguous buffer,
cut into buckets in backward order: the parameters are taken from the chunk's last layer
to its first, and a bucket closes as soon as it holds at least ``bucket_params``
parameters (:attr:`.recipes.Recipes.bucket_params`; a layer is never split: our layers are
whole attention or MLP blocks, where Megatron cuts at any weight tensor).  Megatron-Core
buckets only the first pipeline stage's first model chunk: every other chunk is one bucket
("data-parallel communication on these stages is not on the critical path"), and without
``--overlap-grad-reduce`` every chunk is one bucket.

A bucket's collective (a reduce-scatter with the distributed optimizer, else an
all-reduce; its all-gather after the step) runs over the dp groups of the stage, one call
per tensor rank of the bucket's dense gradients plus the routed experts' over their
expert-data-parallel groups (Megatron buckets expert gradients apart; here they travel with
the bucket of their layer).  The gradients travel in ``data_parallel.allreduce.precision``
(``layout.grad_bytes_per_value``: 4 bytes a value in fp32, as Megatron-LM reduces them in
bf16), the gathered parameters in the training precision (2 bytes in 16 bits).
``backward_share`` and ``forward_share`` say which part of the
chunk's backward (with recomputation) and forward FLOPs the bucket's layers are: the
overlapped runs split a chunk's last backward and first forward at the bucket boundaries.
Units: parameters, bytes, fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...collectives import CollectiveCall
from .stages import layer_backward_flops

__all__ = ["GradBucket", "as_gather", "gather_calls", "layer_groups", "plan_buckets"]


@dataclass(frozen=True)
class GradBucket:
    """The gradients of some consecutive layers of one model chunk, synced together."""

    stage: int
    """Device stage."""
    chunk: int
    index: int
    """Position in backward order: bucket 0 holds the chunk's last layers."""
    layers: tuple[int, ...]
    """Model layer indices, in backward order."""
    params: float
    """Parameters per GPU (dense / shards + routed experts / (shards x ep))."""
    backward_share: float
    """Share of the chunk's backward FLOPs (with recomputation) its layers take."""
    forward_share: float
    """Share of the chunk's forward FLOPs its layers take."""
    reduce: tuple[CollectiveCall, ...]
    """The gradient collectives (one per tensor rank, then the expert groups')."""
    gather: tuple[CollectiveCall, ...]
    """The all-gathers of the updated parameters (the distributed optimizer's), or none."""


def layer_groups(params: Sequence[float], bucket_params: float | None) -> list[list[int]]:
    """Indices (into ``params``, given in backward order) of each bucket: a bucket closes once
    it holds at least ``bucket_params`` (None: one bucket); trailing layers without
    parameters fold into the last bucket."""
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0.0
    for i, p in enumerate(params):
        current.append(i)
        filled += p
        if bucket_params is not None and filled >= bucket_params:
            groups.append(current)
            current, filled = [], 0.0
    if current:
        if filled > 0 or not groups:
            groups.append(current)
        else:
            groups[-1] += current
    return groups


def _layer_params(layout: Any, layer: Any) -> tuple[float, float]:
    """(dense, routed-expert) parameters of ``layer`` on one GPU of its stage (the routed
    experts split apart only under expert parallelism, as :func:`.experts.device_params`)."""
    experts = layout.experts
    routed = 0.0
    if experts is not None and experts.ep > 1 and layer.kind == "moe":
        routed = experts.moe.experts * experts.expert_params
    shards = layout.param_shards
    return (layer.params - routed) / shards, routed


def plan_buckets(layout: Any, bucket_params: float, bucketed: bool) -> dict[int, list[GradBucket]]:
    """Per device stage, its buckets chunk by chunk (chunk 0 first, each in backward order).
    ``bucketed``: cut the first stage's first chunk at ``bucket_params``; every other chunk
    is one bucket."""
    model, per_value = layout.model, layout.grad_bytes_per_value
    gather = layout.zero >= 1
    ep = layout.experts.ep if layout.experts is not None else 1
    out: dict[int, list[GradBucket]] = {}
    for s in range(layout.pp):
        out[s] = []
        for c in range(layout.schedule.chunks):
            k = layout.schedule.virtual_stage(s, c)
            layers = list(reversed(layout._layers_of(k)))
            dense_routed = [_layer_params(layout, model.layers[i]) for i in layers]
            per_gpu = [d + r / (layout.param_shards * ep) for d, r in dense_routed]
            if sum(per_gpu) <= 0:
                continue
            backward = [
                layer_backward_flops(model, model.layers[i], layout.recompute_of(k)) for i in layers
            ]
            forward = [model.layers[i].forward_flops for i in layers]
            limit = bucket_params if bucketed and s == c == 0 else None
            for index, group in enumerate(layer_groups(per_gpu, limit)):
                dense = sum(dense_routed[i][0] for i in group)
                routed = sum(dense_routed[i][1] for i in group)
                reduce = layout.sync_calls(s, layout.dp_op, dense * per_value, routed)
                out[s].append(
                    GradBucket(
                        stage=s,
                        chunk=c,
                        index=index,
                        layers=tuple(layers[i] for i in group),
                        params=sum(per_gpu[i] for i in group),
                        backward_share=_share(backward, group),
                        forward_share=_share(forward, group),
                        reduce=tuple(reduce),
                        gather=tuple(gather_calls(layout, reduce)) if gather else (),
                    )
                )
    return out


def _share(values: Sequence[float], group: Sequence[int]) -> float:
    total = sum(values)
    if total <= 0:
        return len(group) / len(values)
    return sum(values[i] for i in group) / total


def gather_calls(layout: Any, calls: Sequence[CollectiveCall]) -> list[CollectiveCall]:
    """The all-gathers of the parameters that the gradient ``calls`` of ``layout`` (a
    :class:`~.layout.HybridLayout`) update: the same values in the training precision.
    Megatron-Core's distributed optimizer reduce-scatters its gradient buffer (fp32 with
    ``--accumulate-allreduce-grads-in-fp32``) and all-gathers its parameter buffer, in the
    parameters' bf16 (``megatron/core/distributed/param_and_grad_buffer.py`` at core_v0.6.0:
    ``grad_data`` in ``grad_dtype``, ``param_data`` in ``param_dtype``)."""
    ratio = layout.options.bytes_per_value / layout.grad_bytes_per_value
    return [as_gather(call, ratio) for call in calls]


def as_gather(call: CollectiveCall, value_ratio: float = 1.0) -> CollectiveCall:
    """The all-gather of the parameters a reduce-scatter's gradients update: its bytes are
    the reduce-scatter's times ``value_ratio`` (bytes of a parameter value / bytes of a
    gradient value)."""
    return CollectiveCall(
        "allgather",
        call.devices,
        call.size_bytes * value_ratio,
        call.algorithm,
        options=call.options,
        protocol=call.protocol,
    )
