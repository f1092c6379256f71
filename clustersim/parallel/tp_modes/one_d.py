"""``tp_mode: 1d`` -- Megatron-LM (Shoeybi et al. 2019), the default.

Each attention and MLP layer all-reduces its ``b s h`` output over the whole group once
per pass (a reduce-scatter and an all-gather with sequence parallelism), as
:func:`clustersim.parallel.tensor_parallel.layer_collectives` states; parameters divide
by t; stored activations follow Korthikanti et al. 2022
(:func:`clustersim.model.activations.layer_activation_bytes`).  Units: bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensor_parallel import layer_collectives
from .base import GridCollective, TensorParallelMode

if TYPE_CHECKING:
    from ...model.layers import Layer, Model


class Megatron1D(TensorParallelMode):
    """Megatron-LM's 1-D split: heads and MLP columns over t GPUs."""

    name = "1d"
    description = "Megatron-LM (Shoeybi et al. 2019): an all-reduce per layer and pass"
    sequence_parallel = True

    def layer_collectives(
        self,
        layer: Layer,
        model: Model,
        samples: float,
        *,
        phase: str,
        bytes_per_value: float,
        sequence_parallel: bool = False,
    ) -> tuple[GridCollective, ...]:
        ops = layer_collectives(
            layer,
            model,
            samples,
            bytes_per_value=bytes_per_value,
            sequence_parallel=sequence_parallel,
        )
        return tuple(GridCollective(op, "tensor", size) for op, size in ops)

    def activation_bytes(
        self,
        layer: Layer,
        model: Model,
        samples: float,
        *,
        sequence_parallel: bool,
        recompute: str,
        value_bytes: float = 2.0,
    ) -> float:
        from ...model.activations import layer_activation_bytes

        return layer_activation_bytes(
            layer,
            model,
            samples,
            tp=self.tp,
            sequence_parallel=sequence_parallel,
            recompute=recompute,
            value_bytes=value_bytes,
        )
