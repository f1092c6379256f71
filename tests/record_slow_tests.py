"""Write tests/slow_tests.txt from a ``pytest --durations=0`` report (``make slow-tests``).

Each test's setup, call and teardown seconds are added; the tests at :data:`THRESHOLD_S`
or more are listed, slowest first, with their seconds.  tests/conftest.py marks them
``slow`` and runs them first.  Seconds measured with ``pytest -n 2`` on 2 cores, so they
include the other worker's load; only their order and the threshold matter.
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
# (tests/record_slow_tests.py) from `pytest -n 2 --durations=0` on 2 cores.
"""


def slow_tests(report: str, threshold_s: float = THRESHOLD_S) -> list[tuple[float, str]]:
    """(seconds, node id) of every test of ``report`` at ``threshold_s`` or more, slowest
    first (ties by node id)."""
    seconds: Counter[str] = Counter()
    for line in report.splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    rows = [(s, node) for node, s in seconds.items() if s >= threshold_s]
    return sorted(rows, key=lambda row: (-row[0], row[1]))


def main(report_path: str, out_path: str) -> int:
    rows = slow_tests(Path(report_path).read_text())
    text = HEADER.format(threshold=THRESHOLD_S) + "".join(f"{s:7.2f} {node}\n" for s, node in rows)
    Path(out_path).write_text(text)
    print(f"{out_path}: {len(rows)} tests at {THRESHOLD_S:g} s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
