"""docs/ARCHITECTURE.md stays true to the tree: its layers are tests/test_layers.py's, in
the same order; it names every package and top-level module of clustersim and every
registry ``clustersim list`` shows."""

from __future__ import annotations

import re
from pathlib import Path

import clustersim
from clustersim.registry import all_registries

from .test_layers import LAYERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"
PACKAGE = Path(clustersim.__file__).parent


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def documented_layers(text: str) -> list[tuple[str, ...]]:
    """The rows of the layer table between ``<!-- layers -->`` and ``<!-- /layers -->``,
    lowest first: each row's names (code spans, without a trailing ``/`` or ``.py``)."""
    block = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = [line for line in block.splitlines() if re.match(r"^\|\s*\d+\s*\|", line)]
    return [
        tuple(re.sub(r"(/|\.py)$", "", name) for name in re.findall(r"`([^`]+)`", row))
        for row in rows
    ]


def test_the_documented_layers_are_the_tested_ones_in_order() -> None:
    """The table lists test_layers.LAYERS, one row per layer, lowest first."""
    assert documented_layers(_text()) == [tuple(layer) for layer in LAYERS]


def test_the_layer_table_reader_reads_rows_in_order() -> None:
    text = "x\n<!-- layers -->\n| 1 | `a`, `b/` |\n| 2 | `c.py` |\n<!-- /layers -->\n| 3 | `d` |"
    assert documented_layers(text) == [("a", "b"), ("c",)]


def test_every_package_and_module_is_named() -> None:
    """Each folder and top-level module of clustersim appears as a code span (``name/`` or
    ``name.py``), so the page covers the whole tree."""
    text = _text()
    names = {
        f"{p.name}/" if p.is_dir() else p.name
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name not in {"__init__.py", "__main__.py"})
    }
    missing = sorted(n for n in names if f"`{n}`" not in text)
    assert missing == []


def test_every_registry_is_named() -> None:
    """The registry table has a row for each label ``clustersim list`` takes."""
    rows = set(re.findall(r"^\| ([a-z-]+(?:, [a-z-]+)*) \|", _text(), re.M))
    labels = {label for row in rows for label in row.split(", ")}
    assert set(all_registries()) <= labels
