"""Compatibility alias: ``clustersim.collectives.bench`` is
:mod:`clustersim.studies.collective_sweep` (the collective sweep is a study; its clusters
come from :mod:`clustersim.scenario.shorthand`, whose names it re-exports)."""

import sys

from ..studies import collective_sweep as _module

sys.modules[__name__] = _module
