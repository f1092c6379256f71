"""The hardware catalog: GPUs and node kinds by name (``cluster.node.gpu: {preset: h100-sxm}``).

:mod:`.catalog` reads the data files (``gpus/*.yaml``, ``nodes/*.yaml``: one per GPU or node
kind, every number with its source) into :class:`~.catalog.Preset` entries and holds the
``gpus`` and ``nodes`` registries; :mod:`.presets` expands a mapping that names a preset into
spec values (deep merge); :mod:`.curves` holds the precisions and efficiency curves, and
:mod:`.listing` the lines ``clustersim list`` prints.  docs/hardware.md tabulates the numbers and their sources.
"""

from __future__ import annotations

from .catalog import GPUS, NODES, Preset, find, is_file_name
from .curves import CURVE_FALLBACK, PRECISIONS, curve_for
from .presets import deep_merge, expand

__all__ = [
    "CURVE_FALLBACK",
    "GPUS",
    "NODES",
    "PRECISIONS",
    "Preset",
    "curve_for",
    "deep_merge",
    "expand",
    "find",
    "is_file_name",
]
