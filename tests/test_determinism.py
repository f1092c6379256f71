"""Determinism: the same scenario and seed give byte-identical summary.json on every run,
under any PYTHONHASHSEED, and whatever order the YAML writes its keys in."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import simulate

from .conftest import ROOT, SCENARIOS

REPRESENTATIVE = (
    "validation/n1_oversubscribed_uplink.yaml",
    "collectives/ring_allreduce_r1.yaml",
    "data_parallel/overlap.yaml",
    "parameter_server/async.yaml",
    "pipeline/1f1b_m8.yaml",
)
"""One fast scenario of each shipped family."""

HASH_SEEDS = ("0", "12345")
"""PYTHONHASHSEED values the subprocess runs use."""


@functools.cache
def baseline(name: str) -> str:
    """The summary.json text of shipped scenario ``name``, run once in this process."""
    return simulate(SCENARIOS / name).summary_json()


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_a_second_run_gives_the_same_bytes(name: str) -> None:
    assert simulate(SCENARIOS / name).summary_json() == baseline(name)


def _reordered(value: Any) -> Any:
    """``value`` with the keys of every mapping in reverse order (lists keep theirs)."""
    if isinstance(value, dict):
        return {k: _reordered(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_key_order_does_not_matter(name: str, tmp_path: Path) -> None:
    doc = yaml.safe_load((SCENARIOS / name).read_text(encoding="utf-8"))
    moved = _reordered(doc)
    assert list(moved) != list(doc)
    path = tmp_path / "elsewhere" / "reordered.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(moved, sort_keys=False), encoding="utf-8")
    summary = simulate(path).summary_json()
    assert summary == baseline(name)
    assert str(tmp_path) not in summary and "reordered" not in summary
    assert json.loads(summary)["scenario"] == doc["name"]


_CHILD = """
import json, sys
from clustersim.api import simulate
print(json.dumps({n: simulate(sys.argv[1] + "/" + n).summary_json() for n in sys.argv[2:]}))
"""


def test_hash_seed_does_not_matter() -> None:
    """Each hash seed in its own interpreter (both at once), every scenario the same bytes."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(SCENARIOS), *REPRESENTATIVE],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in HASH_SEEDS
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, err
        summaries = json.loads(out)
        for name in REPRESENTATIVE:
            assert summaries[name] == baseline(name), name


def test_summary_does_not_name_the_source_file(tmp_path: Path) -> None:
    path = tmp_path / "copy.yaml"
    path.write_bytes((SCENARIOS / REPRESENTATIVE[0]).read_bytes())
    summary = simulate(path).summary_json()
    assert summary == baseline(REPRESENTATIVE[0])
    assert "copy.yaml" not in summary
