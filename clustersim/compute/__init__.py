"""GPU compute models: how long shaped work (matrix products, memory-bound kernels) takes.

:mod:`.curve` is the efficiency of a matrix product by its size and its calibration from a
CSV of measured kernel times; :mod:`.models` the registry of compute models (``flat``,
``roofline``) that price a list of operators on a device.  See docs/compute.md.
"""

from __future__ import annotations

from .curve import (
    DEFAULT_CURVE,
    EfficiencyCurve,
    KernelSample,
    curve_at,
    fit_curve,
    read_kernels,
)
from .models import (
    ATTENTION_CORE,
    SIXTEEN_BIT_KERNELS,
    AttentionRate,
    ComputeModel,
    Operation,
    ProductRate,
    compute_model,
)

__all__ = [
    "ATTENTION_CORE",
    "AttentionRate",
    "DEFAULT_CURVE",
    "ComputeModel",
    "EfficiencyCurve",
    "KernelSample",
    "Operation",
    "ProductRate",
    "SIXTEEN_BIT_KERNELS",
    "compute_model",
    "curve_at",
    "fit_curve",
    "read_kernels",
]
