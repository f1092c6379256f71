"""Several jobs on one cluster (a scenario's ``jobs:`` section).

* :mod:`.placement` -- which devices each job owns (globs, or packed / spread / random);
* :mod:`.view` -- :class:`JobSimulation`, one job's window on the shared simulation;
* :mod:`.strategy` -- :class:`JobsStrategy`: runs the jobs together, then each alone,
  and summarizes each job with its slowdown.
"""

from .strategy import JobsStrategy

__all__ = ["JobsStrategy"]
