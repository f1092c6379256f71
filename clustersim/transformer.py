"""Compatibility alias: ``clustersim.transformer`` is :mod:`clustersim.model.transformer`."""

import sys

from .model import transformer as _module

sys.modules[__name__] = _module
