"""Compatibility alias: ``clustersim.golden`` is :mod:`clustersim.studies.golden`."""

import sys

from .studies import golden as _module

sys.modules[__name__] = _module
