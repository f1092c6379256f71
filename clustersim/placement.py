"""Compatibility alias: ``clustersim.placement`` is :mod:`clustersim.parallel.placement`."""

import sys

from .parallel import placement as _module

sys.modules[__name__] = _module
