"""Gradient buckets: launching each bucket's collective once every worker has its gradients.

DDP's ordered bucket launches, shared by data parallelism (all-reduces) and
ZeRO (reduce-scatters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from ..collectives import run_collective
from ..engine import Simulation
from ..metrics import SummaryPart
from ..model.layers import BYTES_PER_VALUE, Model

if TYPE_CHECKING:
    from .data_parallel import DataParallel


@dataclass(frozen=True)
class Bucket:
    """Gradients all-reduced together: layers (indices, in backward order) and their bytes."""

    index: int
    layers: tuple[int, ...]
    nbytes: float


@dataclass(frozen=True)
class BucketSizes(SummaryPart):
    """The gradient buckets: how many, and bytes each."""

    count: int
    bytes: list[float]


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


class BucketSync:
    """Counts completed buckets per iteration and launches their all-reduces in order."""

    def __init__(self, sim: Simulation, strategy: DataParallel) -> None:
        self.sim = sim
        self.strategy = strategy
        self.n = len(strategy.workers)
        buckets = strategy.buckets
        self.bucket_of = {layer: b.index for b in buckets for layer in b.layers}
        self.sizes = [len(b.layers) for b in buckets]
        self.ready: dict[int, list[int]] = {}
        """Per iteration: how many workers completed each bucket."""
        self.launched: dict[int, int] = {}
        """Per iteration: how many buckets have been launched (in order)."""
        self.pending: dict[int, list[simpy.Event]] = {}
        self.done: dict[int, simpy.Event] = {}

    def synced(self, it: int) -> simpy.Event:
        """The event that fires when every bucket of iteration ``it`` is all-reduced."""
        event = self.done.get(it)
        if event is None:
            event = self.done[it] = self.sim.event()
        return event

    def gradient_callback(self, rank: int, it: int) -> Any:
        """``on_gradient(layer)`` for worker ``rank`` in iteration ``it``."""
        left = list(self.sizes)

        def on_gradient(layer: int) -> None:
            k = self.bucket_of[layer]
            left[k] -= 1
            if left[k] == 0:
                self._bucket_complete(it, k)

        return on_gradient

    def _bucket_complete(self, it: int, k: int) -> None:
        counts = self.ready.setdefault(it, [0] * len(self.sizes))
        counts[k] += 1
        self._launch_ready(it)

    def _launch_ready(self, it: int) -> None:
        """Launch, in bucket order, every bucket all workers completed (all, without overlap)."""
        counts = self.ready[it]
        if not self.strategy.sync.overlap and min(counts) < self.n:
            return
        k = self.launched.get(it, 0)
        while k < len(counts) and counts[k] == self.n:
            self._launch(it, k)
            k += 1
        self.launched[it] = k

    @staticmethod
    def _iteration(it: Any) -> int:
        """The iteration a round's collectives are recorded under (a round is an iteration
        here; subclasses may key rounds finer)."""
        return it

    def _launch(self, it: Any, k: int) -> None:
        strategy = self.strategy
        event = run_collective(
            self.sim,
            strategy.calls[k],
            model=strategy.network_model,
            label=f"{strategy.calls[k].op} bucket{k}",
            iteration=self._iteration(it),
            channels=strategy.channels,
        )
        events = self.pending.setdefault(it, [])
        events.append(event)
        if len(events) == len(self.sizes):
            self.sim.all_of(events).callbacks.append(lambda _e: self.synced(it).succeed())
