"""Compatibility alias: ``clustersim.memory`` is :mod:`clustersim.model.memory`."""

import sys

from .model import memory as _module

sys.modules[__name__] = _module
