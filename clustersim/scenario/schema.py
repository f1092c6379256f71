"""JSON Schema of the scenario format (``clustersim schema``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .docstrings import described_json_schema
from .document import Scenario

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def scenario_json_schema(
    workload_schemas: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the scenario format, with YAML key names.

    ``workload_schemas`` maps each workload key (``"program"``) to the schema of
    the whole ``workload:`` mapping of that kind (an object schema whose
    properties include the key); ``workload`` then must be exactly one of them.
    """
    body = described_json_schema(Scenario, by_alias=True, mode="validation")
    body.pop("title", None)
    schema: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "clustersim scenario",
        **body,
    }
    if workload_schemas:
        defs = schema.setdefault("$defs", {})
        alternatives = [
            _workload_alternative(key, sub, defs) for key, sub in workload_schemas.items()
        ]
        schema["properties"]["workload"] = {
            "description": schema["properties"]["workload"].get("description", ""),
            "oneOf": alternatives,
        }
    return _finite(schema)


def _workload_alternative(key: str, sub: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``sub`` with ``key`` required; its own ``$defs`` move to the top, renamed if they clash."""
    sub = dict(sub)
    sub.pop("$schema", None)
    renames: dict[str, str] = {}
    for name, definition in sub.pop("$defs", {}).items():
        new = name
        while new in defs and defs[new] != definition:
            new = f"{key}.{new}"
        renames[name] = new
        defs[new] = definition
    sub = _renamed_refs(sub, renames)
    for new in renames.values():
        defs[new] = _renamed_refs(defs[new], renames)
    required = list(sub.get("required", []))
    if key not in required:
        required.insert(0, key)
    return {**sub, "type": "object", "required": required}


def _renamed_refs(schema: Any, renames: Mapping[str, str]) -> Any:
    """``schema`` with each ``#/$defs/OLD`` reference pointing to its new name."""
    if isinstance(schema, dict):
        out = {k: _renamed_refs(v, renames) for k, v in schema.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renames:
            out["$ref"] = "#/$defs/" + renames[ref[8:]]
        return out
    if isinstance(schema, list):
        return [_renamed_refs(v, renames) for v in schema]
    return schema


def _finite(schema: Any) -> Any:
    """``schema`` without non-finite numbers (JSON cannot hold them), e.g. a default of inf."""
    if isinstance(schema, dict):
        return {k: _finite(v) for k, v in schema.items() if not _non_finite(v)}
    if isinstance(schema, list):
        return [_finite(v) for v in schema if not _non_finite(v)]
    return schema


def _non_finite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)
