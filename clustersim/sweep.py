"""Compatibility alias: ``clustersim.sweep`` is :mod:`clustersim.studies.sweep`."""

import sys

from .studies import sweep as _module

sys.modules[__name__] = _module
