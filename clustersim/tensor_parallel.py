"""Compatibility alias: ``clustersim.tensor_parallel`` is :mod:`clustersim.parallel.tensor_parallel`."""

import sys

from .parallel import tensor_parallel as _module

sys.modules[__name__] = _module
