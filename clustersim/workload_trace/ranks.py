"""Which file holds which rank's trace: one file, a pattern, or a folder.

Real traces are one file per rank.  ``workload.trace`` names them in one of three ways:

* **one file** (``step.json``): one rank's trace, replayed on every rank (SPMD);
* **a pattern** with ``%d`` or ``{rank}`` (``trace.%d.json``, ``workload.{rank}.et``):
  rank r's file is the pattern with r put in, for r = 0, 1, ... as long as the files exist;
* **a folder**: its files whose names end in a number before the suffix (``trace.3.json``,
  ``workload.3.et``, ``rank3.json``), that number being the rank.

The ranks found must be 0 .. N-1, each once.  Problems are :class:`TraceFormatError` s.
"""

from __future__ import annotations

import re
from pathlib import Path

from .ops import TraceFormatError

RANK_IN_NAME = re.compile(r"(\d+)(\.[A-Za-z]+)+$")
"""A rank trace's file name: a number right before its suffix (``trace.3.json``)."""
PLACEHOLDERS = ("%d", "{rank}")
"""Where a pattern puts the rank."""
MAX_RANKS = 1_000_000
"""Most rank files a pattern is followed to."""


def is_per_rank(spec: str, base: Path) -> bool:
    """Whether ``spec`` (``workload.trace``, relative to ``base``) names a trace per rank."""
    return any(p in spec for p in PLACEHOLDERS) or (base / spec).is_dir()


def rank_files(spec: str, base: Path) -> list[Path]:
    """Rank r's trace file at index r (see the module docstring)."""
    if any(p in spec for p in PLACEHOLDERS):
        return _from_pattern(spec, base)
    return _from_folder(base / spec)


def _from_pattern(spec: str, base: Path) -> list[Path]:
    found = []
    for rank in range(MAX_RANKS):
        path = base / spec.replace("%d", str(rank)).replace("{rank}", str(rank))
        if not path.is_file():
            break
        found.append(path)
    if not found:
        first = base / spec.replace("%d", "0").replace("{rank}", "0")
        raise TraceFormatError(f"no trace for rank 0: {first} does not exist")
    return found


def _from_folder(folder: Path) -> list[Path]:
    by_rank: dict[int, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        match = RANK_IN_NAME.search(path.name)
        if path.is_file() and match:
            by_rank.setdefault(int(match.group(1)), []).append(path)
    if not by_rank:
        raise TraceFormatError(
            f"{folder} holds no rank traces (files named like trace.0.json or workload.0.et)"
        )
    twice = {r: paths for r, paths in by_rank.items() if len(paths) > 1}
    if twice:
        rank, paths = min(twice.items())
        names = ", ".join(p.name for p in paths)
        raise TraceFormatError(f"{folder}: rank {rank} has several traces ({names})")
    missing = sorted(set(range(max(by_rank) + 1)) - set(by_rank))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise TraceFormatError(
            f"{folder}: ranks 0 to {max(by_rank)} need a trace each; none for rank {shown}"
        )
    return [by_rank[r][0] for r in range(len(by_rank))]
