"""Scenario keys whose values name plugins, checked against the plugins' registries.

A key such as ``pipeline.schedule`` or ``network.model`` takes the name of an entry of a
:class:`~clustersim.registry.Registry` (``clustersim list schedules``).  The registry is
the one list of names: in the schema such a key is a plain string marked with
:class:`Plugin` (its registry's label), and :func:`check_plugins` looks every marked value
up in :data:`clustersim.registry.REGISTRIES` once the scenario is parsed and the
registries exist (:func:`clustersim.api.prepare`).  So a schedule, algorithm or network
model added from outside the package is accepted with no change here, and a wrong name
gets exit 2 at its key path with the registered names and a guess.

The registries are created by the packages that hold them (layers above this one); this
module only reads them by label, through the registry's own discovery, so the scenario layer
imports none of those packages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, Strict

from ..errors import Problem, ScenarioError, join_path
from ..registry import REGISTRIES, registry_of


@dataclass(frozen=True)
class Plugin:
    """Marks a string field as naming an entry of the registry labelled ``label``."""

    label: str

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        """``clustersim schema``: the registered names as the field's enum (when the
        registry exists, i.e. its package is imported)."""
        found = handler(schema)
        registry = REGISTRIES.get(self.label)
        if registry is not None:
            found["enum"] = registry.names()
        return found


def plugin_name(label: str) -> Any:
    """The type of a key naming an entry of registry ``label``: a non-empty string."""
    return Annotated[str, Strict(), Field(min_length=1), Plugin(label)]


def plugin_keys(model: BaseModel, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(key path, registry label, value) of every plugin-naming key set in ``model`` and
    the models inside it (lists and mappings of models included)."""
    for name, field in type(model).model_fields.items():
        value = getattr(model, name, None)
        if value is None:
            continue
        key = join_path(path, field.alias or name)
        marks = [m for m in field.metadata if isinstance(m, Plugin)]
        if marks and isinstance(value, str):
            yield key, marks[0].label, value
        else:
            yield from _inside(value, key)


def _inside(value: Any, path: str) -> Iterator[tuple[str, str, str]]:
    if isinstance(value, BaseModel):
        yield from plugin_keys(value, path)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _inside(item, join_path(path, i))
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _inside(item, join_path(path, str(k)))


def plugin_problems(model: BaseModel, path: str = "") -> list[Problem]:
    """A problem for every plugin-naming key of ``model`` (at key ``path``) whose value its
    registry does not hold."""
    problems: list[Problem] = []
    for key, label, value in plugin_keys(model, path):
        try:
            registry_of(label).lookup(value, key)
        except ScenarioError as exc:
            problems.extend(exc.problems)
    return problems


def check_plugins(model: BaseModel, source: str = "", path: str = "") -> None:
    """ScenarioError (naming ``source``) listing every plugin-naming key of ``model`` (at key
    ``path``: a strategy's ``workload``) whose value is not registered."""
    problems = plugin_problems(model, path)
    if problems:
        raise ScenarioError(problems, source)
