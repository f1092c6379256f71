"""clustersim: a discrete-event simulator of distributed deep-learning training clusters.

Public API::

    from clustersim import load_scenario, simulate
    result = simulate("scenarios/validation/n1_oversubscribed_uplink.yaml")
    print(result.summary["makespan_s"])
"""

from __future__ import annotations

from .api import Prepared, Result, prepare, simulate
from .errors import ClustersimError, ScenarioError, SimulationError
from .scenario import Scenario, load_scenario, parse_scenario
from .version import __version__

__all__ = [
    "ClustersimError",
    "Prepared",
    "Result",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "__version__",
    "load_scenario",
    "parse_scenario",
    "prepare",
    "simulate",
]
