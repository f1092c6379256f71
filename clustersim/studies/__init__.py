"""Studies: many scenario runs at once (compare sweeps, plan candidates, golden files, the
nccl-tests style collective sweep).

:func:`run_all` is the one process pool every study uses.
"""

from .runner import run_all, worker_count

__all__ = ["run_all", "worker_count"]
