"""The documentation (README and the site's hand-written pages, docs/) names every
scenario key and every command-line flag in its prose; the site's generated references
(tests/test_docs_reference.py) list them all with their types."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from clustersim import scenario
from clustersim.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = "\n".join(
    p.read_text(encoding="utf-8")
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
)
DOCS = README


def _models(annotation: object, seen: set[type]) -> None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _models(field.annotation, seen)
        return
    for arg in typing.get_args(annotation):
        _models(arg, seen)


def _keys() -> list[tuple[str, str]]:
    seen: set[type] = set()
    _models(scenario.Scenario, seen)
    out = []
    for model in seen:
        for name, field in model.model_fields.items():
            out.append((model.__name__, field.alias or name))
    return sorted(set(out))


@pytest.mark.parametrize("model, key", _keys())
def test_every_scenario_key_is_documented(model: str, key: str) -> None:
    assert re.search(rf"`([\w.\[\]]*\.)?{re.escape(key)}\b", DOCS), f"{model}.{key}"


def _flags() -> list[tuple[str, tuple[str, ...]]]:
    parser = build_parser()
    out = []
    for action in parser._subparsers._group_actions:  # the subcommands
        for name, sub in action.choices.items():
            for option in sub._actions:
                if option.option_strings and "--help" not in option.option_strings:
                    out.append((name, tuple(option.option_strings)))
    return sorted(set(out))


@pytest.mark.parametrize("command, flags", _flags())
def test_every_flag_is_documented(command: str, flags: tuple[str, ...]) -> None:
    """Each option is in the docs under one of its names (``-o`` or ``--output``)."""
    found = [f for f in flags if re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", README)]
    assert found, f"clustersim {command} {' / '.join(flags)}"
