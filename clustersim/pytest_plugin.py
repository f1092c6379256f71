"""pytest plugin (entry point ``pytest11``): the ``clustersim_golden`` fixture.

```python
def test_cluster_timings(clustersim_golden):
    clustersim_golden.check("scenarios/my_cluster.yaml")
```

The test fails, with a table of the metrics that moved, when a timing leaves its
tolerance; ``pytest --clustersim-update-golden`` records the new values
instead. Golden files live in ``tests/golden`` under the rootdir (ini option
``clustersim_golden_dir`` or ``--clustersim-golden-dir``); the default
relative tolerance is the golden file's ``rtol`` (ini ``clustersim_golden_rtol``
overrides it, per-metric ``tolerances`` in the file still win).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .errors import ClustersimError
from .studies import golden

UPDATE_FLAG = "--clustersim-update-golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("clustersim", "clustersim golden timings")
    group.addoption(
        UPDATE_FLAG,
        action="store_true",
        default=False,
        help="record the current timings as the new golden files instead of checking them",
    )
    group.addoption(
        "--clustersim-golden-dir",
        metavar="DIR",
        help="folder of golden files (default: ini clustersim_golden_dir, tests/golden)",
    )
    parser.addini(
        "clustersim_golden_dir", "folder of clustersim golden files", default="tests/golden"
    )
    parser.addini(
        "clustersim_golden_rtol",
        "relative tolerance of metrics without their own (default: the golden file's rtol)",
        default="",
    )


class GoldenChecker:
    """What the ``clustersim_golden`` fixture gives a test."""

    def __init__(self, golden_dir: Path, root: Path, update: bool, rtol: float | None) -> None:
        self.golden_dir = golden_dir
        """Folder of the golden files."""
        self.root = root
        """Folder golden file names are relative to (pytest's rootdir)."""
        self.update = update
        """True: record instead of checking (``--clustersim-update-golden``)."""
        self.rtol = rtol

    def path_of(self, scenario: str | os.PathLike[str]) -> Path:
        """The scenario file: as given if it exists, else relative to the rootdir."""
        path = Path(scenario)
        if path.is_absolute() or path.exists():
            return path
        return self.root / path

    def check(
        self, scenario: str | os.PathLike[str], rtol: float | None = None
    ) -> golden.GoldenReport | None:
        """Run ``scenario`` and fail the test if a metric moved beyond its tolerance (relative,
        ``rtol`` overriding the default); with the update flag, record it and return None."""
        path = self.path_of(scenario)
        try:
            if self.update:
                golden.record([path], self.golden_dir, rtol, jobs=1, root=self.root)
                return None
            report = golden.check(
                [path], self.golden_dir, rtol if rtol is not None else self.rtol, 1, self.root
            )[0]
        except ClustersimError as exc:
            hint = f"\n(record it: pytest {UPDATE_FLAG})" if "no golden file" in str(exc) else ""
            pytest.fail(f"clustersim golden: {exc}{hint}", pytrace=False)
        if not report.passed:
            lines = golden.report_lines(report)
            lines.append(f"if the change is intended, accept it: pytest {UPDATE_FLAG}")
            pytest.fail("\n".join(lines), pytrace=False)
        return report


def _rtol(config: pytest.Config) -> float | None:
    text = str(config.getini("clustersim_golden_rtol") or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise pytest.UsageError(f"clustersim_golden_rtol: expected a number >= 0, got {text!r}")
    return value


@pytest.fixture
def clustersim_golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Checks scenarios against their golden timings: ``clustersim_golden.check(path)``."""
    config = request.config
    root = Path(config.rootpath)
    option = config.getoption("--clustersim-golden-dir")
    if option:  # relative to where pytest was started
        golden_dir = Path(option).absolute()
    else:  # relative to the rootdir
        golden_dir = root / str(config.getini("clustersim_golden_dir"))
    return GoldenChecker(golden_dir, root, bool(config.getoption(UPDATE_FLAG)), _rtol(config))
