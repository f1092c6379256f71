"""Other simulators' inputs as clustersim scenarios: :mod:`.astra_sim` (``clustersim import
astra-sim``)."""

from __future__ import annotations
