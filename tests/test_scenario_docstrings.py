"""Scenario keys' descriptions read when a schema is made (clustersim.scenario.docstrings),
held to pydantic's own reading of attribute docstrings as classes are built."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Annotated, Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from clustersim.scenario import Scenario, scenario_json_schema
from clustersim.scenario.docstrings import described_json_schema, field_descriptions

Seconds = Annotated[float, WithJsonSchema({"type": "number", "description": "a time"})]


def _models(config: ConfigDict) -> type[BaseModel]:
    """A small hierarchy with every case the scenario models have: an inherited field, a
    field annotated again with and without a docstring, an explicit description, an alias,
    a type that describes itself, a nested model, a string that is not a docstring, a class variable."""

    class Inner(BaseModel):
        model_config = config
        """Not a field's docstring: the class body's second statement."""

        size: int = 1
        """Bytes of one piece."""
        latency: Seconds = 0.0
        """Latency of a hop, seconds (over the type's own description)."""

    class Base(BaseModel):
        model_config = config

        kind: str = "base"
        """The shape."""
        count: int = 2
        """How many."""
        plain: int = 0
        inner: Inner = Inner()
        """The nested part."""

    class Child(Base):
        count: int = 3  # annotated again, no docstring: pydantic makes the field anew
        kind: str = "child"
        """The child's shape."""
        named: int = Field(default=1, alias="named-key")
        """Under an alias."""
        explicit: int = Field(default=0, description="given by Field")
        """Loses to the explicit description."""
        limit: ClassVar[int] = 4
        """A class variable's: not a key."""

    return Child


@pytest.mark.parametrize("by_alias", [True, False])
@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_descriptions_are_pydantics_attribute_docstrings(by_alias: bool, mode: str) -> None:
    """The schema with descriptions read late is, byte for byte, the one pydantic makes
    with ``use_attribute_docstrings`` (which reads them as each class is built)."""
    late = _models(ConfigDict())
    early = _models(ConfigDict(use_attribute_docstrings=True))
    want = early.model_json_schema(by_alias=by_alias, mode=mode)  # type: ignore[arg-type]
    got = described_json_schema(late, by_alias=by_alias, mode=mode)
    assert json.dumps(got, indent=1) == json.dumps(want, indent=1)
    assert late.model_json_schema(by_alias=by_alias) != want  # the late class has none itself
    props = got["properties"]
    assert props["kind"]["description"] == "The child's shape."
    assert "description" not in props["count"] and "description" not in props["plain"]
    assert props["named-key" if by_alias else "named"]["description"] == "Under an alias."
    assert props["explicit"]["description"] == "given by Field"
    inner = got["$defs"]["Inner"]["properties"]
    assert inner["latency"]["description"].startswith("Latency of a hop")


def test_field_descriptions_follow_the_class_that_annotates_the_field() -> None:
    child = _models(ConfigDict())
    described = field_descriptions(child)
    assert described["kind"] == "The child's shape."
    assert "count" not in described  # annotated again without one
    assert described["inner"] == "The nested part."
    assert "plain" not in described


def test_every_scenario_key_is_described_without_reading_sources_at_import() -> None:
    """Importing the scenario package reads no source (pydantic's reading of attribute
    docstrings is off), and the scenario schema still describes its keys."""
    probe = (
        "import inspect, sys\n"
        "calls = []\n"
        "real = inspect.findsource\n"
        "inspect.findsource = lambda *a: calls.append(a) or real(*a)\n"
        "import clustersim.scenario\n"
        "print(len(calls))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "0"
    schema: dict[str, Any] = scenario_json_schema()
    assert schema["properties"]["seed"]["description"]
    assert Scenario.model_fields["seed"].description is None
