"""Compatibility module: ``clustersim.pipeline`` re-exports
:mod:`clustersim.parallel.schedules` and :mod:`clustersim.parallel.stages`."""

from .parallel.schedules import *  # noqa: F403
from .parallel.schedules import __all__ as _schedules
from .parallel.stages import balanced_split, check_stage_layers

__all__ = [*_schedules, "balanced_split", "check_stage_layers"]
