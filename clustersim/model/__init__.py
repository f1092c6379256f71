"""Models: layers and their costs, transformer shapes, activations, memory, presets.

* :mod:`~clustersim.model.layers` -- :class:`Layer`, :class:`Model`, recomputation.
* :mod:`~clustersim.model.transformer` -- transformer shapes and their FLOPs.
* :mod:`~clustersim.model.activations` -- activation memory per layer.
* :mod:`~clustersim.model.memory` -- model states and device memory.
* :mod:`~clustersim.model.presets` -- named models (the ``PRESETS`` registry) and
  :func:`build_model` for a scenario's ``model:`` section; the presets themselves in
  :mod:`~clustersim.model.dense_presets`, :mod:`~clustersim.model.moe_presets` and
  :mod:`~clustersim.model.llm_presets`.
"""

from .layers import BYTES_PER_VALUE, Layer, Model
from .presets import PRESETS, build_model, build_preset, preset, registered_presets
from .transformer import Transformer

__all__ = [
    "BYTES_PER_VALUE",
    "Layer",
    "Model",
    "PRESETS",
    "Transformer",
    "build_model",
    "build_preset",
    "preset",
    "registered_presets",
]
