"""The memory family: what clustersim says a GPU holds, held to published numbers.

``clustersim reproduce --only memory`` runs three groups of cases, each through the path a
user's run takes (a scenario prepared as :func:`clustersim.simulate` prepares it, the
``memory`` block of its summary; :mod:`.reading`):

* :mod:`.activations` -- Korthikanti et al. 2022's activation bytes per transformer layer
  (Table 2: no parallelism, tensor, tensor + sequence parallel, selective and full
  recomputation) for three model shapes of its Table 3 over t = 1-8, and the savings of
  selective recomputation it publishes (Section 5); exact closed forms.
* :mod:`.states` -- ZeRO's model-state memory (Rajbhandari et al. 2020): Figure 1's example
  (Z0-Z3) and Table 1 (7.5B, 128B and 1T parameters over N_d = 1 to 1024), to the paper's
  printed digits.
* :mod:`.measured` -- measured peak memory of real runs (Megatron-LM's functional tests on
  DGX H100, Hugging Face Transformers' single-GPU measurements), each within 10% and marked
  calibration or held out.
"""

from __future__ import annotations

from . import activations, measured, states
from .reading import FAMILY

CASES = activations.CASES + states.CASES + measured.CASES
"""The family's cases, in the order the suite runs them."""

__all__ = ["CASES", "FAMILY"]
