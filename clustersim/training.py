"""What every training strategy shares: layers, workers, forward and backward passes, buckets.

A model is a list of :class:`Layer` (built from the scenario's ``model:`` by
:func:`clustersim.models.build_model`).  A data-parallel worker runs, per
iteration, the forward pass layer by layer, then the backward pass in reverse
layer order; the gradient of a layer exists once its backward has run.  The
strategies decide what happens to gradients (all-reduce buckets, pushes to
parameter servers).

Units: FLOPs per sample, bytes per sample, bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .engine import Simulation

BYTES_PER_VALUE = {"fp32": 4, "fp16": 2, "bf16": 2}
"""Bytes of one gradient or parameter value on the wire, by precision."""

OPTIMIZER_BYTES_PER_PARAM = {"sgd": 12.0, "momentum": 20.0, "adam": 28.0}
"""Memory traffic of one optimizer step per parameter, in bytes, with fp32 state:
sgd reads weight and gradient and writes the weight (3 x 4 B); momentum also
reads and writes the momentum (5 x 4 B); adam reads weight, gradient, m, v and
writes weight, m, v (7 x 4 B)."""


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer: its parameters and its cost per sample."""

    name: str
    params: float
    """Number of parameters."""
    forward_flops: float
    """Forward FLOPs per sample."""
    backward_flops: float
    """Backward FLOPs per sample (2 x forward unless the model says otherwise)."""
    activation_bytes: float
    """Activation bytes stored per sample for the backward pass."""
    kind: str = ""
    """What the layer is in a transformer: ``embedding``, ``attention``, ``mlp`` or ``head``
    ("" for other models).  Attention and MLP layers split over a tensor-parallel group and
    are the layers full recomputation re-runs."""


@dataclass(frozen=True)
class Model:
    """A model as a sequence of layers, input first."""

    name: str
    layers: tuple[Layer, ...]
    transformer: Any = None
    """The :class:`clustersim.transformer.Transformer` shape the model was built from, if any
    (activation, FLOPs and tensor-parallel formulas need it)."""

    @property
    def params(self) -> float:
        """Total number of parameters."""
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample."""
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        """Backward FLOPs per sample."""
        return sum(layer.backward_flops for layer in self.layers)

    def gradient_bytes(self, precision: str) -> float:
        """Bytes of one full gradient (or parameter copy) in ``precision``."""
        return self.params * BYTES_PER_VALUE[precision]


@dataclass(frozen=True)
class Bucket:
    """Gradients all-reduced together: layers (indices, in backward order) and their bytes."""

    index: int
    layers: tuple[int, ...]
    nbytes: float


RECOMPUTED_KINDS = frozenset({"attention", "mlp"})
"""Layer kinds that activation recomputation re-runs (transformer blocks)."""


def with_recompute(model: Model, recompute: str) -> Model:
    """``model`` with the recomputation ``recompute`` folded into its layers' backward FLOPs.

    ``full``: one more forward in the backward of each attention and MLP layer;
    ``selective``: the attention scores and their product with V again, 4 s^2 h
    FLOPs per sample per attention layer (Korthikanti et al. 2022); ``none``: unchanged.
    """
    if recompute == "none":
        return model
    shape = model.transformer
    scores = 4.0 * shape.seq * shape.seq * shape.hidden if shape is not None else 0.0

    def extra(layer: Layer) -> float:
        if recompute == "full":
            return layer.forward_flops if layer.kind in RECOMPUTED_KINDS else 0.0
        return scores if layer.kind == "attention" else 0.0

    layers = tuple(
        replace(layer, backward_flops=layer.backward_flops + extra(layer)) for layer in model.layers
    )
    return replace(model, layers=layers)


def flops_per_iteration(model: Model, batch: float, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of ``batch`` samples: forward + backward, and the same
    with the recomputation ``recompute`` (see :func:`with_recompute`)."""
    plain = (model.forward_flops + model.backward_flops) * batch
    hardware = (model.forward_flops + with_recompute(model, recompute).backward_flops) * batch
    return plain, hardware


def make_buckets(model: Model, bucket_bytes: float, precision: str) -> list[Bucket]:
    """Buckets in backward order, as PyTorch DDP fills them.

    Layers are taken from the last to the first; a bucket closes as soon as it
    holds at least ``bucket_bytes``; the last bucket takes what is left.
    Layers without parameters join the current bucket without adding bytes.
    """
    per_value = BYTES_PER_VALUE[precision]
    buckets: list[Bucket] = []
    current: list[int] = []
    filled = 0.0
    for index in reversed(range(len(model.layers))):
        current.append(index)
        filled += model.layers[index].params * per_value
        if filled >= bucket_bytes:
            buckets.append(Bucket(len(buckets), tuple(current), filled))
            current, filled = [], 0.0
    if current:
        if filled > 0 or not buckets:
            buckets.append(Bucket(len(buckets), tuple(current), filled))
        else:  # trailing layers without parameters: fold into the last bucket
            last = buckets[-1]
            buckets[-1] = Bucket(last.index, last.layers + tuple(current), last.nbytes)
    return buckets


def forward_pass(
    sim: Simulation, device: str, model: Model, samples: float, iteration: int
) -> Generator[Any, Any, None]:
    """Run every layer's forward on ``device`` for ``samples`` samples (a process body)."""
    for layer in model.layers:
        yield sim.compute(
            device,
            flops=layer.forward_flops * samples,
            label=f"fwd {layer.name}",
            iteration=iteration,
        )


def backward_pass(
    sim: Simulation,
    device: str,
    model: Model,
    samples: float,
    iteration: int,
    on_gradient: Callable[[int], None] | None = None,
) -> Generator[Any, Any, None]:
    """Run every layer's backward in reverse order; call ``on_gradient(layer index)`` as each ends."""
    for index in reversed(range(len(model.layers))):
        layer = model.layers[index]
        yield sim.compute(
            device,
            flops=layer.backward_flops * samples,
            label=f"bwd {layer.name}",
            iteration=iteration,
        )
        if on_gradient is not None:
            on_gradient(index)


def optimizer_step(
    sim: Simulation, device: str, params: float, optimizer: str, iteration: int
) -> Any:
    """The optimizer update of ``params`` parameters on ``device``: memory-bound work."""
    return sim.compute(
        device,
        bytes=params * OPTIMIZER_BYTES_PER_PARAM[optimizer],
        label="optimizer",
        iteration=iteration,
    )


def split_batch(global_batch: int, workers: Sequence[str]) -> list[float]:
    """Samples per worker per iteration: the global batch split as evenly as whole samples allow."""
    n = len(workers)
    base, extra = divmod(global_batch, n)
    return [float(base + (1 if i < extra else 0)) for i in range(n)]


@dataclass
class IterationClock:
    """When each worker started and ended each iteration (seconds)."""

    starts: dict[tuple[str, int], float]
    ends: dict[tuple[str, int], float]

    @classmethod
    def new(cls) -> IterationClock:
        return cls({}, {})

    def start(self, device: str, iteration: int, now: float) -> None:
        self.starts[device, iteration] = now

    def end(self, device: str, iteration: int, now: float) -> None:
        self.ends[device, iteration] = now

    def iteration_ends(self, iterations: int) -> list[float]:
        """Per iteration: when its last worker ended it, seconds."""
        ends: dict[int, float] = {}
        for (_, it), t in self.ends.items():
            if t > ends.get(it, float("-inf")):
                ends[it] = t
        return [ends[it] for it in range(iterations) if it in ends]

    def iteration_times(self, iterations: int) -> list[float]:
        """Per iteration: from the end of the previous one (or time 0) to its own end, seconds.

        The times add up to the time of the whole run; in steady state each is
        the period of the training loop.
        """
        ends = self.iteration_ends(iterations)
        return [end - (ends[i - 1] if i else 0.0) for i, end in enumerate(ends)]
