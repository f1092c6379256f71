"""clustersim: a discrete-event simulator of distributed deep-learning training clusters.

Public API::

    from clustersim import load_scenario, simulate
    result = simulate("scenarios/validation/n1_oversubscribed_uplink.yaml")
    print(result.summary["makespan_s"])

The names below are imported on first use (PEP 562), so that ``import clustersim.console``
(the console script's entry) stays light and can catch Ctrl-C before numpy and SimPy load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _compat
from .version import __version__

_compat.install()  # the old paths of five moved modules, for one release (_compat.py)

if TYPE_CHECKING:
    from .api import Prepared, Result, prepare, simulate
    from .caches import clear_caches
    from .errors import ClustersimError, ScenarioError, SimulationError
    from .scenario import Scenario, load_scenario, parse_scenario

_PUBLIC: dict[str, str] = {
    "ClustersimError": ".errors",
    "Prepared": ".api",
    "Result": ".api",
    "Scenario": ".scenario",
    "ScenarioError": ".errors",
    "SimulationError": ".errors",
    "clear_caches": ".caches",
    "load_scenario": ".scenario",
    "parse_scenario": ".scenario",
    "prepare": ".api",
    "simulate": ".api",
}
"""Each public name and the module that defines it."""

__all__ = [
    "ClustersimError",
    "Prepared",
    "Result",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "__version__",
    "clear_caches",
    "load_scenario",
    "parse_scenario",
    "prepare",
    "simulate",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'clustersim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
