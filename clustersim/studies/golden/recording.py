"""``golden record``: run scenarios and write their golden files."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...errors import ClustersimError
from ...outputs.paths import check_output_file, check_output_folder
from .files import check_rtol, golden_document, golden_path, load_golden, write_golden
from .metrics import measure_all


def record(
    scenarios: Sequence[str | os.PathLike[str]],
    golden_dir: str | os.PathLike[str],
    rtol: float | None = None,
    jobs: int | None = None,
    root: str | os.PathLike[str] | None = None,
    flag: str = "--dir",
    max_events: int | None = None,
    overrides: Sequence[str] = (),
    scheduler: str | None = None,
    max_memory: float | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[Path]:
    """Run every scenario and write its golden file into ``golden_dir``; return the paths.

    ``overrides`` (``--set KEY=VALUE`` texts, one value each) are applied to every scenario
    and written into its golden file, so that :func:`check` applies them again.  Runs
    estimated long are announced first (``announce``, :func:`measure_all`).

    An existing golden's ``rtol`` and ``tolerances`` are kept (``rtol`` given replaces it).
    ``golden_dir`` and the files' names are checked before anything runs (errors at key
    path ``flag``); each file is then replaced on its own, atomically (the folder holds the
    goldens of other scenarios too, so it is not replaced as a unit).
    """
    check_rtol(rtol)
    check_output_folder(golden_dir, flag, whole=False)
    targets = _unique_targets(scenarios, golden_dir, root)
    for target in targets:
        check_output_file(target, flag)
    previous = [_previous(target) for target in targets]
    overrides = tuple(overrides)
    sets = [overrides] * len(scenarios)
    measured = measure_all(scenarios, jobs, max_events, sets, scheduler, max_memory, announce)
    return [
        write_golden(target, golden_document(s, m, old, rtol, root, overrides))
        for s, m, old, target in zip(scenarios, measured, previous, targets)
    ]


def _unique_targets(
    scenarios: Sequence[str | os.PathLike[str]],
    golden_dir: str | os.PathLike[str],
    root: str | os.PathLike[str] | None,
) -> list[Path]:
    targets = [golden_path(s, golden_dir, root) for s in scenarios]
    seen: dict[Path, str] = {}
    for scenario, target in zip(scenarios, targets):
        if target in seen and seen[target] != os.path.abspath(scenario):
            raise ClustersimError(
                f"{scenario}: has the same golden file {target} as {seen[target]}"
            )
        seen[target] = os.path.abspath(scenario)
    return targets


def _previous(target: Path) -> dict[str, Any] | None:
    """The golden already at ``target`` (its tolerances are kept), None if there is none."""
    return load_golden(target) if target.exists() else None
