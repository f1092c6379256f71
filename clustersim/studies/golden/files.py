"""Golden files: where a scenario's golden lives, what it holds, reading and writing it.

A golden file is JSON named after the scenario path (``scenarios/a/b.yaml`` ->
``<dir>/scenarios__a__b.json``) holding ``clustersim_version``, ``scenario``
(its name), ``scenario_file``, ``scenario_sha256`` (of the file's bytes),
``seed``, ``overrides`` (the ``--set KEY=VALUE`` texts it was recorded with, only
when there were any: ``golden check`` applies them again), ``rtol`` (default relative
tolerance), ``tolerances`` ({metric glob: relative tolerance}) and ``metrics`` (flat
dotted keys -> numbers; times in seconds, memory in bytes, bandwidth in GB/s).
:func:`load_golden` refuses a file that is not one, naming the file and the key.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...errors import ClustersimError, Problem, ScenarioError
from ...outputs.atomic import write_atomic
from ...version import __version__

DEFAULT_RTOL = 0.01
"""Relative tolerance of a metric when neither the command nor the golden file sets one."""
FORMAT_KEYS = (
    "clustersim_version",
    "scenario",
    "scenario_file",
    "scenario_sha256",
    "seed",
    "overrides",
    "rtol",
    "tolerances",
    "metrics",
)
"""The keys of a golden file, in the order :func:`golden_document` writes them."""


def golden_path(
    scenario: str | os.PathLike[str],
    golden_dir: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """The golden file of ``scenario``: its path relative to ``root`` (default: the current
    folder; else just its name), suffix dropped, ``/`` -> ``__``, ``.json`` in ``golden_dir``."""
    path = Path(os.path.abspath(scenario))
    base = Path(os.path.abspath(root or os.getcwd()))
    try:
        relative = path.relative_to(base)
    except ValueError:
        relative = Path(path.name)
    if not relative.name:  # "", the current folder or "/": no file to name the golden after
        given = str(scenario)
        what = "is a folder, not a scenario file" if given else "no file named (an empty path)"
        raise ScenarioError(Problem("", what, "a scenario YAML file"), given or "''")
    stem = "__".join(relative.with_suffix("").parts)
    return Path(golden_dir) / f"{stem}.json"


def _relative_name(scenario: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> str:
    path = Path(os.path.abspath(scenario))
    try:
        return path.relative_to(os.path.abspath(root or os.getcwd())).as_posix()
    except ValueError:
        return path.name


def load_golden(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a golden file; a ScenarioError naming the file and key if it is bad."""
    source = str(path)
    if os.path.exists(path) and not os.path.isfile(path):
        raise ClustersimError(f"{source}: not a regular file, so not a golden file")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClustersimError(
            f"{source}: no golden file (record one with `clustersim golden record`)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ClustersimError(f"{source}: not a readable JSON golden file: {exc}") from None
    problems = _golden_problems(doc)
    if problems:
        raise ScenarioError(problems, source)
    return doc


def _is_number(value: Any) -> bool:
    """A finite JSON number (``NaN`` and ``Infinity``, which Python's json reads, are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tolerance_problem(path: str, value: Any) -> Problem | None:
    """Why ``value`` is no relative tolerance (a finite number >= 0), or None."""
    if _is_number(value) and value >= 0:
        return None
    return Problem(path, f"expected a finite number >= 0, got {value!r}", "e.g. 0.01 (1%)")


def _golden_problems(doc: Any) -> list[Problem]:
    if not isinstance(doc, dict):
        return [Problem("<top level>", "expected a JSON object")]
    problems = []
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        problems.append(Problem("metrics", "missing or not an object of metric -> number"))
    else:
        problems += [
            Problem(f"metrics.{k}", f"expected a finite number, got {v!r}")
            for k, v in metrics.items()
            if not _is_number(v)
        ]
    problems += _overrides_problems(doc.get("overrides", []))
    problems.append(tolerance_problem("rtol", doc.get("rtol", DEFAULT_RTOL)))
    tolerances = doc.get("tolerances", {})
    if not isinstance(tolerances, dict):
        problems.append(Problem("tolerances", "expected an object of metric glob -> rtol"))
    else:
        problems += [tolerance_problem(f"tolerances.{k}", v) for k, v in tolerances.items()]
    return [p for p in problems if p is not None]


def _overrides_problems(overrides: Any) -> list[Problem]:
    """Why ``overrides`` is no list of ``KEY=VALUE`` texts (empty if it is one)."""
    from ...scenario.overrides import parse_set

    if not isinstance(overrides, list):
        return [Problem("overrides", "expected a list of KEY=VALUE texts")]
    problems = []
    for i, text in enumerate(overrides):
        try:
            parse_set(text if isinstance(text, str) else "", sweep=False)
        except ScenarioError as exc:
            got = exc.problems[0].message
            problems.append(Problem(f"overrides[{i}]", f"not a KEY=VALUE override: {got}"))
    return problems


def golden_document(
    scenario: str | os.PathLike[str],
    measured: dict[str, Any],
    previous: dict[str, Any] | None = None,
    rtol: float | None = None,
    root: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """The golden file's content for a measurement; ``rtol`` and ``tolerances`` are kept
    from ``previous`` (an older golden) unless ``rtol`` is given; ``overrides`` (the
    ``--set KEY=VALUE`` texts of the run) are written only when there are any."""
    previous = previous or {}
    replayed = {"overrides": list(overrides)} if overrides else {}
    return {
        "clustersim_version": __version__,
        "scenario": measured["scenario"],
        "scenario_file": _relative_name(scenario, root),
        "scenario_sha256": measured["scenario_sha256"],
        "seed": measured["seed"],
        **replayed,
        "rtol": rtol if rtol is not None else previous.get("rtol", DEFAULT_RTOL),
        "tolerances": previous.get("tolerances", {}),
        "metrics": measured["metrics"],
    }


def write_golden(path: str | os.PathLike[str], doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (folders made, temporary file renamed into place)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, json.dumps(doc, indent=2) + "\n")


def goldens_in(golden_dir: str | os.PathLike[str]) -> Iterable[Path]:
    """The golden files in ``golden_dir``, sorted."""
    return sorted(Path(golden_dir).glob("*.json"))


def check_rtol(rtol: float | None, flag: str = "--rtol") -> None:
    problem = None if rtol is None else tolerance_problem(flag, rtol)
    if problem is not None:
        raise ScenarioError(problem)
