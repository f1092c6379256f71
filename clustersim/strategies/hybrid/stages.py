"""Stages of the hybrid strategy: what each (virtual) pipeline stage holds and costs.

A :class:`StagePlan` per virtual stage: its layers, FLOPs per sample (with
recomputation), activation and boundary bytes; :func:`peak_stored` counts the
micro-batches a schedule keeps alive at once.  Units: FLOPs, bytes per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...model.activations import layer_activation_bytes
from ...parallel.schedules import (
    FORWARD,
    Op,
)
from ...parallel.tensor_parallel import SPLIT_KINDS, boundary_bytes
from ...parallel.tp_modes import TensorParallelMode
from .. import training


@dataclass(frozen=True)
class StagePlan:
    """One virtual stage: its layers and its cost per sample on one GPU of its tensor group."""

    index: int
    first_layer: int
    layers: int
    forward_flops: float
    """Forward FLOPs per sample (the whole stage; a tensor-parallel GPU does 1/t of it)."""
    backward_flops: float
    """Backward FLOPs per sample."""
    params: float
    activation_bytes: float
    """Activation bytes stored per sample per GPU, with the recomputation chosen."""
    output_bytes: float
    """Bytes per sample sent to the next stage (transformers: the b s h hidden state)."""
    input_bytes: float
    """Bytes per sample of the stage input."""
    recompute_flops: float = 0.0
    """Forward FLOPs per sample re-run in backward by recomputation."""
    split_layers: int = 0
    """Attention and MLP layers: each all-reduces once per direction under tensor parallelism."""
    working_bytes: float = 0.0
    """Per sample: the largest layer's activations without recomputation (the working set
    of one layer while its backward recomputes it)."""


@dataclass(frozen=True)
class StageOptions:
    """How stages store and recompute activations."""

    recompute: str = "none"
    """none, selective or full."""
    tp: int = 1
    sequence_parallel: bool = False
    bytes_per_value: float = 4.0
    """Bytes of a communicated value and of a stored activation value (the training
    precision: 4 in fp32 and tf32, 2 in 16 bits; :func:`~clustersim.model.activations.activation_value_bytes`)."""
    tp_mode: TensorParallelMode | None = None
    """How the tp GPUs split activations (None: Megatron 1-D)."""


def plan_stages(
    model: training.Model,
    counts: Sequence[int],
    options: StageOptions | None = None,
    modes: Sequence[str] | None = None,
) -> list[StagePlan]:
    """The virtual stages holding ``counts`` consecutive layers each, input first; ``modes``:
    each virtual stage's recomputation where the stages differ (default: the options')."""
    opt = options or StageOptions()
    plans: list[StagePlan] = []
    first = 0
    for k, count in enumerate(counts):
        layers = model.layers[first : first + count]
        previous = plans[-1].output_bytes if plans else layers[0].activation_bytes
        own = (
            opt if modes is None or modes[k] == opt.recompute else replace(opt, recompute=modes[k])
        )
        plans.append(_plan(model, k, first, layers, previous, own))
        first += count
    return plans


def plan_range(
    model: training.Model, k: int, first: int, count: int, options: StageOptions | None = None
) -> StagePlan:
    """Virtual stage ``k`` holding the ``count`` layers from ``first`` on: what
    :func:`plan_stages` gives it when the stage before it ends at ``first`` (a candidate of
    :mod:`.balance`)."""
    opt = options or StageOptions()
    layers = model.layers[first : first + count]
    if first == 0:
        previous = layers[0].activation_bytes
    elif model.transformer is not None:
        previous = boundary_bytes(model, 1.0, opt.bytes_per_value) or 0.0
    else:
        previous = model.layers[first - 1].activation_bytes
    return _plan(model, k, first, layers, previous, opt)


def _plan(
    model: training.Model,
    k: int,
    first: int,
    layers: Sequence[training.Layer],
    previous: float,
    opt: StageOptions,
) -> StagePlan:
    forward = sum(x.forward_flops for x in layers)
    if model.transformer is None:
        full = sum(x.activation_bytes for x in layers)
        stored = previous if opt.recompute == "full" else full
        output = layers[-1].activation_bytes
        recompute_flops = forward if opt.recompute == "full" else 0.0
        working = full if opt.recompute == "full" else 0.0
    else:

        def kept(layer: training.Layer, mode: str) -> float:
            if opt.tp_mode is not None:
                return opt.tp_mode.activation_bytes(
                    layer,
                    model,
                    1.0,
                    sequence_parallel=opt.sequence_parallel,
                    recompute=mode,
                    value_bytes=opt.bytes_per_value,
                )
            return layer_activation_bytes(
                layer,
                model,
                1.0,
                tp=opt.tp,
                sequence_parallel=opt.sequence_parallel,
                recompute=mode,
                value_bytes=opt.bytes_per_value,
            )

        stored = sum(kept(x, opt.recompute) for x in layers)
        output = boundary_bytes(model, 1.0, opt.bytes_per_value) or 0.0
        recompute_flops = _transformer_recompute_flops(model, layers, opt.recompute)
        working = max(kept(x, "none") for x in layers) if opt.recompute != "none" else 0.0
    return StagePlan(
        index=k,
        first_layer=first,
        layers=len(layers),
        forward_flops=forward,
        backward_flops=sum(x.backward_flops for x in layers),
        params=sum(x.params for x in layers),
        activation_bytes=stored,
        output_bytes=output,
        input_bytes=previous,
        recompute_flops=recompute_flops,
        split_layers=sum(1 for x in layers if x.kind in SPLIT_KINDS),
        working_bytes=working,
    )


def layer_backward_flops(model: training.Model, layer: training.Layer, recompute: str) -> float:
    """Backward FLOPs per sample of one layer with its recomputation (what a stage's
    ``backward_flops + recompute_flops`` adds up from)."""
    if model.transformer is None:
        extra = layer.forward_flops if recompute == "full" else 0.0
    else:
        extra = _transformer_recompute_flops(model, [layer], recompute)
    return layer.backward_flops + extra


def _transformer_recompute_flops(
    model: training.Model, layers: Sequence[training.Layer], mode: str
) -> float:
    """Full: the forward of every attention and MLP layer; selective: the attention scores
    and their product with V (``Transformer.selective_recompute_flops`` per sample per
    attention layer: 4 s^2 h, none with FlashAttention)."""
    if mode == "full":
        return sum(x.forward_flops for x in layers if x.kind in SPLIT_KINDS)
    if mode == "selective":
        shape = model.transformer
        per_layer = shape.selective_recompute_flops
        return per_layer * sum(1 for x in layers if x.kind == "attention")
    return 0.0


def peak_stored(ops: Sequence[Op]) -> tuple[int, list[tuple[int, int]]]:
    """Largest number of (micro-batch, chunk) activations a device's ops hold at once, and
    the pairs held at that moment (forward stores, backward frees)."""
    held: dict[tuple[int, int], None] = {}  # in the order stored
    best: list[tuple[int, int]] = []
    for op in ops:
        if op.kind == FORWARD:
            held[op.microbatch, op.chunk] = None
            if len(held) > len(best):
                best = list(held)
        else:
            del held[op.microbatch, op.chunk]
    return len(best), best
