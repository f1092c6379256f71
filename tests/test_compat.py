"""Old import paths (clustersim._compat): the five the README documented import for one
release with a DeprecationWarning and give the new homes' objects; the other shims are
gone, and no file stands at an old path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from clustersim import _compat

PACKAGE = Path(__file__).resolve().parent.parent / "clustersim"

GONE = (
    "clustersim.models",
    "clustersim.training",
    "clustersim.memory",
    "clustersim.transformer",
    "clustersim.activations",
    "clustersim.tensor_parallel",
    "clustersim.placement",
    "clustersim.pipeline",
    "clustersim.collectives.bench",
)
"""Shims with no documented user: removed outright."""


def _fresh(name: str) -> object:
    """Import ``name`` again (a test before may have imported it)."""
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize("old, new", sorted(_compat.MOVED.items()))
def test_a_moved_module_imports_with_a_warning_and_the_new_objects(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*import {new} instead"):
        module = _fresh(old)
    home = importlib.import_module(new)
    public = getattr(home, "__all__", None) or [n for n in dir(home) if not n.startswith("_")]
    assert public
    assert all(getattr(module, name) is getattr(home, name) for name in public)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_the_old_report_module_reads_each_name_from_its_output_module() -> None:
    with pytest.warns(DeprecationWarning, match="clustersim.report is deprecated"):
        report = _fresh("clustersim.report")
    for name, home in _compat.REPORT_NAMES.items():
        assert getattr(report, name) is getattr(importlib.import_module(home), name), name
    assert sorted(report.__all__) == sorted(_compat.REPORT_NAMES)


def test_from_clustersim_import_plan_still_works_and_warns() -> None:
    """The README's ``from clustersim import plan`` form, in a fresh interpreter (warnings
    as errors: the warning is raised where the import is)."""
    code = "from clustersim import plan; print(plan.PlanOptions.__module__)"
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "clustersim.studies.plan.options"
    strict = [sys.executable, "-W", "error::DeprecationWarning", "-c", code]
    loud = subprocess.run(strict, capture_output=True, text=True)
    assert loud.returncode != 0 and "clustersim.plan is deprecated" in loud.stderr


@pytest.mark.parametrize("name", GONE)
def test_the_undocumented_shims_are_gone(name: str) -> None:
    sys.modules.pop(name, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_no_file_stands_at_an_old_path() -> None:
    old = {*_compat.OLD_PATHS, *GONE}
    files = {
        "clustersim." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
    }
    assert not old & files
