"""Hardware presets in a scenario document, and the folder files in it are relative to.

:func:`expanded_document` writes each preset of the ``cluster:`` section out as the values it
stands for -- the same expansion the models do when they validate (:mod:`.devices`) -- so the
run folder's ``scenario.resolved.yaml`` runs to the same result without the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clustersim.errors import ScenarioError, join_path

DEVICE_KEYS = ("gpu", "cpu")
"""The device keys of a node that may name a preset."""


def scenario_folder(source: str) -> Path:
    """The folder of the scenario file ``source`` names (``a.yaml with --set ...`` too); the
    working directory for a scenario not read from a file."""
    for candidate in (source, source.split(" with --set ", 1)[0]):
        if candidate and Path(candidate).is_file():
            return Path(candidate).parent
    return Path()


FILE_KEYS = ("preset", "kernels")
"""Keys of a cluster section whose value may be a file, relative to the scenario's folder: a
device's or node's ``preset`` (when it names a file) and a compute model's ``kernels``."""


def rebased(section: Any, base: Path) -> Any:
    """A copy of ``section`` (a cluster section, or any part of one) with every relative file
    it names (:data:`FILE_KEYS`) made relative to ``base`` instead: for a section moved out of
    the file it was written in (``clustersim choose`` puts a candidate's cluster into the
    workload's scenario, whose folder is another)."""
    from clustersim.hardware.catalog import is_file_name

    if isinstance(section, list):
        return [rebased(item, base) for item in section]
    if not isinstance(section, Mapping):
        return section
    out = {}
    for key, value in section.items():
        names_file = key == "kernels" or (key == "preset" and is_file_name(value))
        if names_file and isinstance(value, str) and value and not Path(value).is_absolute():
            out[key] = str(base / value)
        else:
            out[key] = rebased(value, base)
    return out


def _expand(data: Any, kind: str, path: str, base: Path, notes: list[str]) -> Any:
    """``data`` with its preset written out (no ``preset`` key), noted in ``notes``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("preset"), str):
        return data
    from clustersim.hardware import expand, find

    try:
        values = expand(data, kind, base)
        name = find(data["preset"], kind, base).name
    except ScenarioError:
        return data  # the scenario's validation reports it
    notes.append(f"{path}: {kind} preset {name}")
    if kind == "gpu":
        values.setdefault("type", name)  # the device's type, as the preset named it
    return values


def _expand_node(data: Any, path: str, base: Path, notes: list[str]) -> Any:
    """A node mapping (``cluster.node`` or a node group) with its preset and its GPU's and
    CPU's written out."""
    node = _expand(data, "node", path, base, notes)
    if not isinstance(node, Mapping):
        return node
    node = dict(node)
    for key in DEVICE_KEYS:
        if key in node:
            node[key] = _expand(node[key], "gpu", f"{path}.{key}", base, notes)
    return node


def expanded_document(doc: Mapping[str, Any], source: str = "") -> tuple[dict[str, Any], list[str]]:
    """``doc`` with every preset of its cluster (a node's, its GPU's and CPU's, a flat
    cluster's ``device``, a custom cluster's ``devices``) written out as its values, and one
    note per preset expanded (``cluster.node: node preset dgx-h100``).  Preset files are
    relative to the folder of ``source``."""
    out = dict(doc)
    cluster = doc.get("cluster")
    notes: list[str] = []
    if not isinstance(cluster, Mapping):
        return out, notes
    base = scenario_folder(source)
    cluster = dict(cluster)
    if "node" in cluster:
        cluster["node"] = _expand_node(cluster["node"], "cluster.node", base, notes)
    groups = cluster.get("node_groups")
    if isinstance(groups, list):
        cluster["node_groups"] = [
            _expand_node(group, join_path("cluster.node_groups", i), base, notes)
            for i, group in enumerate(groups)
        ]
    if "device" in cluster:
        cluster["device"] = _expand(cluster["device"], "gpu", "cluster.device", base, notes)
    devices = cluster.get("devices")
    if isinstance(devices, list):
        cluster["devices"] = [
            _expand(d, "gpu", join_path("cluster.devices", i), base, notes)
            for i, d in enumerate(devices)
        ]
    out["cluster"] = cluster
    return out, notes
