"""Presets expanded into spec values: a device or node mapping that names a ``preset`` gets the
preset's values under the keys it gives itself (deep merge: keys beside the preset win, the
preset's other keys stay).

Used by the scenario models (``DeviceSpec``, ``NodeSpec``: validation) and by the run
folder's ``scenario.resolved.yaml`` (the same expansion, written out), so both see the same
values.  Units are those of the YAML: values stay as written (``80GB``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .catalog import find


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on it: mappings merge key by key (recursively), anything
    else in ``over`` (a number, a list, null) replaces what ``base`` has.  Copies."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def expand(data: Mapping[str, Any], kind: str, base_dir: Path | None = None) -> dict[str, Any]:
    """``data`` (a device or node mapping with a ``preset``) as the preset's values with the
    other keys of ``data`` laid on them; no ``preset`` key.  ScenarioError at ``preset`` for
    an unknown name or a bad file."""
    preset = find(data.get("preset"), kind, base_dir)
    given = {key: value for key, value in data.items() if key != "preset"}
    return deep_merge(preset.spec, given)


def canonical_name(data: Mapping[str, Any], kind: str, base_dir: Path | None = None) -> str:
    """The catalog name (or the file) of the preset ``data`` names."""
    return find(data.get("preset"), kind, base_dir).name
