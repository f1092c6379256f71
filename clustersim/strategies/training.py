"""What every training strategy shares: workers' forward and backward passes, optimizer
steps, batch splitting and the iteration clock.

A model is a list of layers (:mod:`clustersim.model.layers`; the names used
here are re-exported for the strategies).  A data-parallel worker runs, per
iteration, the forward pass layer by layer, then the backward pass in reverse
layer order; the gradient of a layer exists once its backward has run.  The
strategies decide what happens to gradients (all-reduce buckets, pushes to
parameter servers).

Units: FLOPs per sample, bytes per sample, bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..devices import work_seconds
from ..engine import Simulation
from ..model.layers import (  # noqa: F401  (re-exported: strategies use training.X)
    BYTES_PER_VALUE,
    OPTIMIZER_BYTES_PER_PARAM,
    RECOMPUTED_KINDS,
    Layer,
    Model,
    flops_per_iteration,
    with_recompute,
)
from .buckets import Bucket, make_buckets  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from ..topology import Device
    from .kernel_times import PassTimes


def forward_pass(
    sim: Simulation,
    device: str,
    model: Model,
    samples: float,
    iteration: int,
    seconds: Sequence[float | None] | None = None,
) -> Generator[Any, Any, None]:
    """Run every layer's forward on ``device`` for ``samples`` samples (a process body);
    ``seconds[i]``, when given and not None, is layer i's time (a compute model priced its
    kernels, :class:`~clustersim.strategies.kernel_times.LayerTimes`), its FLOPs recorded."""
    for i, layer in enumerate(model.layers):
        priced = seconds[i] if seconds else None
        yield sim.compute(
            device,
            **_work(layer.forward_flops, layer.forward_bytes, samples, priced),
            label=f"fwd {layer.name}",
            iteration=iteration,
            phase="forward",
        )


def backward_pass(
    sim: Simulation,
    device: str,
    model: Model,
    samples: float,
    iteration: int,
    on_gradient: Callable[[int], None] | None = None,
    seconds: Sequence[float | None] | None = None,
) -> Generator[Any, Any, None]:
    """Run every layer's backward in reverse order; call ``on_gradient(layer index)`` as each
    ends.  ``seconds`` as for :func:`forward_pass`."""
    for index in reversed(range(len(model.layers))):
        layer = model.layers[index]
        priced = seconds[index] if seconds else None
        yield sim.compute(
            device,
            **_work(layer.backward_flops, layer.backward_bytes, samples, priced),
            label=f"bwd {layer.name}",
            iteration=iteration,
            phase="backward",
        )
        if on_gradient is not None:
            on_gradient(index)


def _work(
    flops: float, nbytes: float, samples: float, seconds: float | None = None
) -> dict[str, float]:
    """A layer pass's work for ``samples``: its bytes when it is memory-bound, else its FLOPs
    (with the ``seconds`` they take when a compute model priced them)."""
    if nbytes > 0:
        return {"bytes": nbytes * samples}
    if seconds is None:
        return {"flops": flops * samples}
    return {"flops": flops * samples, "seconds": seconds}


def compute_seconds(device: Device, model: Model, samples: float, times: PassTimes) -> float:
    """Seconds of one forward and one backward of ``samples`` samples through ``model`` on
    ``device`` (the model as run, with its recomputation), as :func:`forward_pass` and
    :func:`backward_pass` book them before any straggler's slowdown; ``times`` the layers'
    priced seconds (:meth:`~clustersim.strategies.kernel_times.LayerTimes.passes`)."""
    total = 0.0
    for i, layer in enumerate(model.layers):
        forward = _work(layer.forward_flops, layer.forward_bytes, samples, times.forward[i])
        backward = _work(layer.backward_flops, layer.backward_bytes, samples, times.backward[i])
        total += work_duration(device, forward) + work_duration(device, backward)
    return total


def work_duration(device: Device, work: dict[str, float]) -> float:
    """Seconds of ``work`` (``flops``, ``bytes``, or ``flops`` with the ``seconds`` they
    take) on ``device``, as :meth:`~clustersim.engine.Simulation.compute` times it before
    any straggler's slowdown."""
    if "seconds" in work:
        return work["seconds"]
    return work_seconds(device, **work)


def optimizer_step(
    sim: Simulation, device: str, params: float, optimizer: str, iteration: int
) -> Any:
    """The optimizer update of ``params`` parameters on ``device``: memory-bound work."""
    return sim.compute(
        device,
        bytes=params * OPTIMIZER_BYTES_PER_PARAM[optimizer],
        label="optimizer",
        iteration=iteration,
        phase="optimizer",
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
