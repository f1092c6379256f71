"""Compatibility alias: ``clustersim.activations`` is :mod:`clustersim.model.activations`."""

import sys

from .model import activations as _module

sys.modules[__name__] = _module
