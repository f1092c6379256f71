"""Compatibility alias: ``clustersim.training`` is :mod:`clustersim.strategies.training`."""

import sys

from .strategies import training as _module

sys.modules[__name__] = _module
