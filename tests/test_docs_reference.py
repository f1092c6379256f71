"""The documentation site's generated references: every scenario key and every CLI flag
is documented, from the code, and the hand-written scenario page leaves no section out.

The site itself is built strictly by ``make docs`` (part of ``make test``)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from clustersim.cli.base import build_parser
from clustersim.reference.cli_pages import cli_markdown, subcommands
from clustersim.reference.scenario_keys import (
    MARKER,
    Schema,
    fill_markers,
    kind_of,
    marked_sections,
    section_markdown,
    tables,
)
from clustersim.scenario import Scenario

DOCS = Path(__file__).resolve().parent.parent / "docs"
SCENARIO_PAGE = DOCS / "scenario.md"


@pytest.fixture(scope="module")
def schema() -> Schema:
    """The schema of the built-in plugins, read in a fresh interpreter (other tests register
    toy plugins of their own in this one)."""
    code = "import json; from clustersim.api import json_schema; print(json.dumps(json_schema()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return Schema(json.loads(done.stdout))


@pytest.fixture(scope="module")
def page(schema: Schema) -> str:
    return fill_markers(SCENARIO_PAGE.read_text(encoding="utf-8"), schema)


def test_every_section_of_the_schema_has_its_marker(schema: Schema) -> None:
    """docs/scenario.md places every top-level key once (a new section must be placed)."""
    marked = marked_sections(SCENARIO_PAGE.read_text(encoding="utf-8"))
    assert sorted(marked) == sorted(schema.sections())
    assert len(marked) == len(set(marked))


def test_no_marker_is_left_and_a_wrong_one_is_refused(schema: Schema, page: str) -> None:
    assert not MARKER.search(page)
    with pytest.raises(ValueError, match="'clusters'"):
        fill_markers("<!-- keys: clusters -->", schema)


def _model_keys(model: type[BaseModel], seen: set[type]) -> set[str]:
    """The YAML names of every field of ``model`` and the models below it, walked from the
    pydantic classes themselves (not from the JSON Schema the page is made of)."""
    if model in seen:
        return set()
    seen.add(model)
    out: set[str] = set()
    for name, field in model.model_fields.items():
        out.add(field.alias or name)
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                out |= _model_keys(annotation, seen)
            else:
                stack.extend(typing.get_args(annotation))
    return out


def test_every_key_of_the_models_is_in_the_reference(schema: Schema, page: str) -> None:
    """Each field of the scenario models (every cluster kind, strategy section and workload
    config), by its YAML name, is the last part of some documented key (or a section)."""
    keys = re.findall(r"\| `([^`]+)` \|", page)
    documented = {k.split(".")[-1].removesuffix("[]") for k in keys} | set(schema.sections())
    missing = sorted(_model_keys(Scenario, set()) - documented)
    assert missing == []


def test_every_key_has_a_type_and_a_description(schema: Schema) -> None:
    rows = [r for s in schema.sections() for t in tables(schema, s) for r in t.rows]
    assert len(rows) > 500
    assert [r.path for r in rows if not r.description] == []
    assert [r.path for r in rows if not r.kind or r.kind == "any"] == []


@pytest.mark.parametrize(
    ("section", "row"),
    [
        ("cluster", "| `sharp` | `true` or `false` or number in (0, 1] | `true` |"),
        ("cluster", "| `node.nic.bandwidth` | bandwidth such as `100Gb/s` | required |"),
        ("cluster", "| `racks` | whole number >= 1 | `1` |"),
        ("failures", "| `failures[].at` | time such as `1.5us` or `0` | required |"),
        ("seed", "| `seed` | whole number in [0, 4294967295] | `0` |"),
    ],
)
def test_rows_say_type_range_and_default(schema: Schema, section: str, row: str) -> None:
    assert row in section_markdown(schema, section)


def test_kinds_in_words(schema: Schema) -> None:
    assert kind_of(schema, {"type": "number", "exclusiveMinimum": 0, "maximum": 1}) == (
        "number in (0, 1]"
    )
    assert kind_of(schema, {"enum": ["ring", "tree"]}) == "`ring` or `tree`"
    assert kind_of(schema, {"type": "array", "items": {"type": "integer", "minimum": 0}}) == (
        "list of whole number >= 0"
    )


def _all_parsers(
    parser: argparse.ArgumentParser, name: str = ""
) -> dict[str, argparse.ArgumentParser]:
    out = {}
    for sub, p in subcommands(parser).items():
        full = f"{name} {sub}".strip()
        out[full] = p
        out.update(_all_parsers(p, full))
    return out


def test_every_command_and_flag_is_in_the_cli_reference() -> None:
    """Every command (and ``golden record``/``check``) has its section, and every flag its
    row, as ``--help`` prints them."""
    parser = build_parser()
    text = cli_markdown(parser)
    commands = _all_parsers(parser)
    assert len(commands) >= 10
    for name, sub in commands.items():
        assert f"`clustersim {name}`" in text
        flags = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", sub.format_help())
        for flag in set(flags) - {"--help"}:
            assert f"`{flag}`" in text, (name, flag)


# ----------------------------------------------------------------- commands run by the build

PAGE_TEXT = (
    "Intro.\n\n<!-- clustersim: run a.yaml -o {out} | show: gantt.png table.md -->\n\n"
    "Middle.\n\n<!-- clustersim: validate a.yaml -->\nEnd.\n"
)


def fake_main(calls: list[list[str]], code: int = 0):
    """A CLI ``main`` that records its arguments, prints, and writes the shown files."""

    def main(args) -> int:
        calls.append(list(args))
        if "-o" in args:
            out = Path(args[args.index("-o") + 1])
            (out / "gantt.png").write_bytes(b"\x89PNG fake")
            (out / "table.md").write_text("| a |\n|---|\n| 1 |\n")
            print(f"wrote {out}/gantt.png")
        else:
            print("1 of 1 file(s) valid")
        return code

    return main


def test_a_pages_commands_run_and_show_what_they_wrote() -> None:
    from clustersim.reference.runs import image_path, play_page, rendered

    calls: list[list[str]] = []
    runs = play_page(PAGE_TEXT, "tutorials/demo.md", fake_main(calls))
    assert [c[0] for c in calls] == ["run", "validate"]
    assert "{out}" not in " ".join(calls[0])
    text = rendered(PAGE_TEXT, "tutorials/demo.md", runs)
    assert "clustersim run a.yaml -o reports/demo" in text
    assert "wrote reports/demo/gantt.png" in text  # the temporary folder never shows
    assert "](../generated/demo-0-gantt.png)" in text
    assert image_path("tutorials/demo.md", 0, "gantt.png") == "generated/demo-0-gantt.png"
    assert "| a |" in text and "1 of 1 file(s) valid" in text
    assert "Intro." in text and "End." in text and "<!--" not in text


def test_a_failing_command_fails_the_build() -> None:
    from clustersim.reference.runs import RunFailed, play_page

    with pytest.raises(RunFailed, match="exited with 2"):
        play_page(PAGE_TEXT, "demo.md", fake_main([], code=2))


def test_every_tutorial_runs_a_command() -> None:
    from clustersim.reference.runs import markers

    pages = sorted((DOCS / "tutorials").glob("*.md"))
    assert len(pages) >= 4
    assert all(markers(p.read_text(encoding="utf-8")) for p in pages)
