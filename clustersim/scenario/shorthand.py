"""Scenarios written from a few parameters: a cluster section, a minimal scenario around it.

```python
from clustersim.scenario.shorthand import flat_cluster, scenario_of, two_tier_cluster
scenario = scenario_of(flat_cluster("ring", 8, "54GB/s", "1us"))
scenario = scenario_of(two_tier_cluster(racks=2, oversubscription=4.0))
```

:func:`flat_cluster` and :func:`two_tier_cluster` return the ``cluster:`` section a
YAML file would hold (units as text, checked when the scenario is parsed);
:func:`scenario_of` wraps one in the smallest valid scenario, and :func:`load_cluster`
reads a file that holds either a whole scenario or only its cluster section.  The
collective sweep (``clustersim collective``) and the tests build their clusters with
them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from clustersim.errors import Problem, ScenarioError

from .document import Scenario, parse_scenario
from .loader import _load_yaml, _read_text, load_scenario

FLAT_KINDS = ("switch", "ring", "fully_connected")
"""Kinds :func:`flat_cluster` builds."""
TOPOLOGIES = (*FLAT_KINDS, "two_tier")
"""Cluster shapes built from a few parameters (the choices of ``clustersim collective
--topology``)."""

PLACEHOLDER_WORKLOAD = {"collective": {}}
"""Workload of the minimal scenario around a cluster (never run; only the cluster is used)."""


def flat_cluster(
    kind: str, devices: int, bandwidth: str | float, latency: str | float = 0
) -> dict[str, Any]:
    """The ``cluster:`` section of a switch, ring or fully connected cluster of ``devices`` GPUs."""
    return {"kind": kind, "devices": devices, "link": {"bandwidth": bandwidth, "latency": latency}}


TWO_TIER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "racks": 1,
        "nodes_per_rack": 2,
        "gpus_per_node": 8,
        "nics": 1,
        "nic_bandwidth": "25GB/s",
        "nic_latency": 0,
        "oversubscription": 1.0,
        "pcie": "32GB/s",
        "nvlink": "300GB/s",
    }
)
"""What :func:`two_tier_cluster` builds when not told otherwise, by keyword (the
``clustersim collective`` flags default to these too)."""


def two_tier_cluster(
    *,
    racks: int = TWO_TIER_DEFAULTS["racks"],
    nodes_per_rack: int = TWO_TIER_DEFAULTS["nodes_per_rack"],
    gpus_per_node: int = TWO_TIER_DEFAULTS["gpus_per_node"],
    nics: int = TWO_TIER_DEFAULTS["nics"],
    nic_bandwidth: str | float = TWO_TIER_DEFAULTS["nic_bandwidth"],
    nic_latency: str | float = TWO_TIER_DEFAULTS["nic_latency"],
    oversubscription: float = TWO_TIER_DEFAULTS["oversubscription"],
    pcie: str | float = TWO_TIER_DEFAULTS["pcie"],
    nvlink: str | float | None = TWO_TIER_DEFAULTS["nvlink"],
) -> dict[str, Any]:
    """The ``cluster:`` section of a two-tier cluster (``nvlink=None``: GPUs talk over PCIe)."""
    node: dict[str, Any] = {
        "gpus": gpus_per_node,
        "nics": nics,
        "pcie": {"bandwidth": pcie},
        "nic": {"bandwidth": nic_bandwidth, "latency": nic_latency},
    }
    if nvlink is not None:
        node["nvlink"] = {"bandwidth": nvlink}
    return {
        "kind": "two_tier",
        "racks": racks,
        "nodes_per_rack": nodes_per_rack,
        "node": node,
        "rack_uplink": {"oversubscription": oversubscription},
    }


def scenario_of(cluster: dict[str, Any], name: str = "collective", source: str = "") -> Scenario:
    """A minimal validated scenario around a ``cluster:`` section."""
    doc = {"name": name, "cluster": cluster, "workload": dict(PLACEHOLDER_WORKLOAD)}
    return parse_scenario(doc, source)


SCENARIO_KEYS = ("name", "workload", "seed", "description", "stragglers", "network")


def load_cluster(path: str | os.PathLike[str]) -> Scenario:
    """The scenario to benchmark on from a file holding a scenario or only a cluster section.

    A full scenario is loaded as is (its stragglers and seed apply); a scenario
    without workload gets a placeholder one; a bare cluster section (top-level
    ``kind``, ``racks``, ``node`` ...) is wrapped, and its problems are reported
    at key paths of the file.  Errors name the file.
    """
    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    if not isinstance(doc, dict):
        raise ScenarioError(
            Problem("", "expected a scenario or a cluster section (a mapping of keys)"), source
        )
    if "cluster" in doc:
        if "workload" in doc and "name" in doc:
            return load_scenario(path)
        full = {"name": Path(source).stem or "cluster", **doc}
        full.setdefault("workload", dict(PLACEHOLDER_WORKLOAD))
        return parse_scenario(full, source)
    if any(key in doc for key in SCENARIO_KEYS):
        raise ScenarioError(Problem("cluster", "the scenario has no cluster section"), source)
    try:
        return scenario_of(doc, Path(source).stem or "cluster", source)
    except ScenarioError as exc:
        raise _unprefixed(exc, "cluster") from None


def _unprefixed(exc: ScenarioError, prefix: str) -> ScenarioError:
    """``exc`` with ``prefix.`` taken off its key paths (a bare cluster file has no such key)."""
    problems = []
    for p in exc.problems:
        path = p.path
        if path == prefix:
            path = ""
        elif path.startswith(prefix + ".") or path.startswith(prefix + "["):
            path = path[len(prefix) :].lstrip(".")
        problems.append(Problem(path, p.message, p.allowed))
    return ScenarioError(problems, exc.source)
