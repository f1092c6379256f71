"""Megatron-LM 1-D tensor parallelism: what a tensor-parallel group computes and sends.

Shoeybi et al. 2019 split each transformer block over the t GPUs of a
tensor-parallel group: the attention heads and the columns of the first MLP
matrix are divided, so each GPU does 1/t of the block's FLOPs, and the
partial outputs are summed by an all-reduce after the attention and after the
MLP -- two all-reduces of the b s h activations in the forward pass and two of
their gradients in the backward pass.  With sequence parallelism (Korthikanti
et al. 2022) each all-reduce becomes a reduce-scatter and an all-gather of the
same b s h tensor (the same bytes on a ring; layer norm and dropout work on
1/t of the sequence).  The embedding and the LM head are split over the
vocabulary; their small reductions are neglected here.

In clustersim a block is an ``attention`` and an ``mlp`` layer, so each of
them carries one all-reduce per direction.  Full recomputation re-runs the
forward of every block in backward, all-reduces included.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..collectives import CollectiveCall, analytical_time

if TYPE_CHECKING:
    from ..model.layers import Layer, Model
    from ..topology import Topology

SPLIT_KINDS = ("attention", "mlp", "moe")
"""Layer kinds whose compute and activations divide over a tensor-parallel group (the
experts of an MoE layer split over it too: Megatron-Core's expert tensor parallelism = tp)."""


def layer_collectives(
    layer: Layer,
    model: Model,
    samples: float,
    *,
    bytes_per_value: float,
    sequence_parallel: bool = False,
) -> tuple[tuple[str, float], ...]:
    """The collectives (op, nccl-tests size in bytes) of ``layer`` in one direction.

    The same list applies to forward and backward: attention and MLP layers
    all-reduce the b s h activation (or reduce-scatter + all-gather it with
    sequence parallelism); other layers none.
    """
    shape = model.transformer
    if shape is None or layer.kind not in SPLIT_KINDS:
        return ()
    nbytes = samples * shape.seq * shape.hidden * bytes_per_value
    if sequence_parallel:
        return (("reducescatter", nbytes), ("allgather", nbytes))
    return (("allreduce", nbytes),)


def boundary_bytes(model: Model, samples: float, bytes_per_value: float) -> float | None:
    """Bytes of the hidden state crossing a pipeline boundary (b s h), or None if not a transformer."""
    shape = model.transformer
    if shape is None:
        return None
    return samples * shape.seq * shape.hidden * bytes_per_value


class CollectiveTimer:
    """Alpha-beta seconds of collectives over one group, cached by (op, bytes)."""

    def __init__(
        self, topology: Topology, group: Sequence[str], algorithm: str, protocol: str | None = None
    ) -> None:
        self.topology = topology
        self.group = tuple(group)
        self.algorithm = algorithm
        self.protocol = protocol
        """NCCL protocol priced (``network.protocol``; None: line rates)."""
        self._cache: dict[tuple[str, float], float] = {}

    def call(self, op: str, nbytes: float) -> CollectiveCall:
        return CollectiveCall(
            op, self.group, nbytes, algorithm=self.algorithm, protocol=self.protocol
        )

    def seconds(self, ops: Sequence[tuple[str, float]]) -> float:
        """Total seconds of ``ops`` run one after another."""
        total = 0.0
        for key in ops:
            time = self._cache.get(key)
            if time is None:
                time = self._cache[key] = analytical_time(self.call(*key), self.topology)
            total += time
        return total
