"""Compatibility alias: ``clustersim.models`` is :mod:`clustersim.model.presets`."""

import sys

from .model import presets as _module

sys.modules[__name__] = _module
