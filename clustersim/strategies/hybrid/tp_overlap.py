"""Tensor-parallel communication overlapped with the matrix products
(``parallelism.tp_comm_overlap``: Megatron-Core's ``--tp-comm-overlap``).

With sequence parallelism each attention and MLP layer all-gathers its input before its
first linear layer and reduce-scatters its output after its last one, in forward, and the
same pair of the gradients in backward (:func:`clustersim.parallel.tensor_parallel.
layer_collectives`).  Transformer Engine's userbuffers split such a collective into chunks
and run them beside the matrix product that consumes or produces the tensor (the
all-gather beside the QKV or first MLP product, the reduce-scatter beside the output
projection or the second MLP product; in backward beside the products of the same shapes).
So each collective of ``c`` seconds is hidden behind its product of ``g`` seconds and
exposes ``max(0, c - g)``; a layer with one product hides each collective behind half of it,
and so does an MoE layer behind half of its products (its collectives are its dispatcher's,
which userbuffers do not split).  The products are priced by the stage's compute model on
the stage's first GPU (:mod:`clustersim.compute`), the collectives as without overlap
(alpha-beta on the tensor group, :class:`~clustersim.parallel.tp_modes.GridTimer`).  The
SMs the communication kernels take from the products are not modelled.  Units: seconds.
"""

from __future__ import annotations

from typing import Any

from ...model.operators import forward_operations
from ...parallel.tp_modes import GridCollective

__all__ = ["exposed_seconds"]

FIRST_PRODUCT_OPS = ("allgather",)
"""Collectives that feed a layer's first matrix product (the rest follow its last)."""


def exposed_seconds(layout: Any, d: int, s: int, layers: range, kind: str, passes: int) -> float:
    """Seconds the tensor-parallel collectives of one pass (``fwd`` or ``bwd``, with
    ``passes`` = 2 the recomputed forward's too) over ``layers`` leave exposed beside their
    matrix products, on stage ``s`` of replica ``d``."""
    timer = layout.tp_timers[d, s]
    device = layout.topology.devices[layout.groups[d][s][0]]
    compute = layout.stage_times.device_model(device)
    samples = layout.micro_batch / layout.cp
    exposed = 0.0
    for index in layers:
        layer = layout.model.layers[index]
        products = _product_seconds(layout, compute, layer, samples)
        for phase in [kind] + ["fwd"] * (passes - 1):
            ops = layout.tp_mode.layer_collectives(
                layer,
                layout.model,
                samples,
                phase=phase,
                bytes_per_value=layout.options.bytes_per_value,
                sequence_parallel=layout.options.sequence_parallel,
            )
            exposed += sum(_exposed(timer, op, products) for op in ops)
    return exposed


def _exposed(timer: Any, op: GridCollective, products: tuple[float, float]) -> float:
    """``max(0, c - g)`` of one collective against the product beside it."""
    beside = products[0] if op.op in FIRST_PRODUCT_OPS else products[1]
    return max(0.0, timer.seconds((op,)) - beside)


def _product_seconds(layout: Any, compute: Any, layer: Any, samples: float) -> tuple[float, float]:
    """Seconds of the first and the last matrix product of ``layer``'s forward on one GPU of
    the tensor group (half of the one product each when it has one)."""
    whole = max(1, int(samples))
    shape, ep = layout.model.transformer, layout.parallelism.ep
    kernels = forward_operations(layer, shape, whole, layout.tp, ep=ep)
    products = [op for op in kernels if op.flops > 0 and op.batch <= 1]
    if not products:
        return 0.0, 0.0
    scale = samples / whole
    if layer.kind == "moe":  # its dispatcher's collectives: beside half of its products each
        half = compute.seconds(products) * scale / 2
        return half, half
    first = compute.operation_seconds(products[0]) * scale
    if len(products) == 1:
        return first / 2, first / 2
    return first, compute.operation_seconds(products[-1]) * scale
