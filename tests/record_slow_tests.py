"""Write tests/slow_tests.txt from a ``pytest --durations=0`` report (``make slow-tests``).

Each test's setup, call and teardown seconds are added; the tests at :data:`THRESHOLD_S`
or more are listed, slowest first, with their seconds.  tests/conftest.py marks them
``slow`` and runs them first.  Seconds measured with ``pytest -n 2`` on 2 cores, so they
include the other worker's load; only their order and the threshold matter.

A test already listed stays listed while the report still names it (with its seconds
there): see :func:`still_listed`.

``--add QUICK FULL OUT`` adds the tests that take :data:`THRESHOLD_S` or more in the quick
loop's report ``QUICK`` (``pytest -m "not slow"``): a test that reads a run or a value the
session shares (tests/shared_runs.py) is quick in the full suite, where a slow test made it
first, and pays for it in the quick loop.  They are listed with their seconds in ``FULL``
(the full suite's report), so that they run after the slow tests that make what they read.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

THRESHOLD_S = 1.0
"""A test whose phases add up to this many seconds or more is slow."""
LINE = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+(\S.*?)\s*$")
HEADER = """\
# Tests measured at {threshold:g} s or more (setup + call + teardown), slowest first.
# tests/conftest.py marks them `slow` (pytest -m "not slow" leaves them out) and runs them
# first, so that the two xdist workers end together.  Made by `make slow-tests`
# (tests/record_slow_tests.py) from `pytest -n 2 --durations=0` on 2 cores, then from the
# quick loop's: a test at {threshold:g} s or more there is added with its full-suite seconds.
"""


def slow_tests(report: str, threshold_s: float = THRESHOLD_S) -> list[tuple[float, str]]:
    """(seconds, node id) of every test of ``report`` at ``threshold_s`` or more, slowest
    first (ties by node id)."""
    seconds = seconds_of(report)
    rows = [(s, node) for node, s in seconds.items() if s >= threshold_s]
    return sorted(rows, key=lambda row: (-row[0], row[1]))


def seconds_of(report: str) -> Counter[str]:
    """Node id -> seconds (setup + call + teardown) of every test of ``report``."""
    seconds: Counter[str] = Counter()
    for line in report.splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return seconds


def listed(text: str) -> list[tuple[float, str]]:
    """(seconds, node id) of a slow_tests.txt's rows."""
    rows = [line.split(maxsplit=1) for line in text.splitlines()]
    return [(float(row[0]), row[1]) for row in rows if row and not row[0].startswith("#")]


def write(out_path: str, rows: list[tuple[float, str]]) -> None:
    rows = sorted(rows, key=lambda row: (-row[0], row[1]))
    text = HEADER.format(threshold=THRESHOLD_S) + "".join(f"{s:7.2f} {node}\n" for s, node in rows)
    Path(out_path).write_text(text)


def main(report_path: str, out_path: str) -> int:
    report = Path(report_path).read_text()
    rows = slow_tests(report)
    kept = still_listed(out_path, seconds_of(report), {node for _, node in rows})
    write(out_path, rows + kept)
    print(
        f"{out_path}: {len(rows)} tests at {THRESHOLD_S:g} s or more, {len(kept)} kept from "
        "the last list"
    )
    return 0


def still_listed(out_path: str, full: Counter[str], slow: set[str]) -> list[tuple[float, str]]:
    """The tests of the list at ``out_path`` (if any) that the full suite's report still
    names (``full``: node id -> seconds) and that are not in ``slow``, with their seconds
    there.  A test listed because it was slow in the quick loop alone (it reads a run a slow
    test makes) is quick in the full suite: dropping it would put it back in the quick loop,
    where it and the tests reading the same run are slow again, and one ``--add`` pass would
    not find them all (the list would not settle).  A test gone from the report (removed,
    renamed, or under 5 ms) leaves the list."""
    path = Path(out_path)
    if not path.is_file():
        return []
    return [
        (full[node], node)
        for _, node in listed(path.read_text())
        if node in full and node not in slow
    ]


def add(quick_path: str, full_path: str, out_path: str) -> int:
    """The ``--add`` mode (see the module docstring)."""
    rows = listed(Path(out_path).read_text())
    known = {node for _, node in rows}
    full = seconds_of(Path(full_path).read_text())
    added = [
        (full.get(node, s), node)
        for s, node in slow_tests(Path(quick_path).read_text())
        if node not in known
    ]
    write(out_path, rows + added)
    print(f"{out_path}: {len(added)} tests added, slow in the quick loop only")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--add"]:
        sys.exit(add(*sys.argv[2:5]))
    sys.exit(main(*sys.argv[1:3]))
