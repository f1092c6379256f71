"""clustersim: a discrete-event simulator of distributed deep-learning training clusters.

Public API::

    from clustersim import load_scenario, simulate
    result = simulate("scenarios/validation/n1_oversubscribed_uplink.yaml")
    print(result.summary["makespan_s"])
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import Prepared, Result, prepare, simulate  # noqa: E402
from .errors import ClustersimError, ScenarioError, SimulationError  # noqa: E402
from .scenario import Scenario, load_scenario, parse_scenario  # noqa: E402

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
