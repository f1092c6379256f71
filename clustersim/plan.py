"""Compatibility alias: ``clustersim.plan`` is :mod:`clustersim.studies.plan`."""

import sys

from .studies import plan as _module

sys.modules[__name__] = _module
