"""Golden timings: record a scenario's key metrics once, then check later runs against them.

```python
from clustersim.studies import golden
golden.record(["scenarios/pipeline/1f1b_m8.yaml"], "tests/golden")
reports = golden.check(["scenarios/pipeline/1f1b_m8.yaml"], "tests/golden")
reports[0].passed          # False if a metric moved beyond its tolerance
reports[0].failures        # the rows that moved (metric, golden, now, change)
```

* :mod:`.metrics` -- the golden metrics of a run summary, and measuring scenarios for them;
* :mod:`.files` -- the golden file: its name, its keys, reading (checked) and writing;
* :mod:`.recording` -- ``golden record``: run scenarios, write their golden files;
* :mod:`.checking` -- ``golden check``: run them again, compare metric by metric, the
  report as text lines.

Nothing here prints; the CLI and the pytest plugin render the rows.
``clustersim.golden``, its old path, still imports for one release, with a
DeprecationWarning (:mod:`clustersim._compat`).
"""

from .checking import (
    ABS_TOL,
    GoldenReport,
    Row,
    check,
    compare,
    compare_metrics,
    report_lines,
    tolerance_for,
)
from .files import (
    DEFAULT_RTOL,
    FORMAT_KEYS,
    golden_document,
    golden_path,
    goldens_in,
    load_golden,
    write_golden,
)
from .metrics import (
    DEVICE_METRICS,
    MAX_DEVICES,
    TOP_METRICS,
    Measure,
    measure,
    measure_all,
    measure_scenario,
    metrics_of,
    scenario_sha256,
)
from .recording import record

__all__ = [
    "ABS_TOL",
    "DEFAULT_RTOL",
    "DEVICE_METRICS",
    "FORMAT_KEYS",
    "GoldenReport",
    "MAX_DEVICES",
    "Measure",
    "Row",
    "TOP_METRICS",
    "check",
    "compare",
    "compare_metrics",
    "golden_document",
    "golden_path",
    "goldens_in",
    "load_golden",
    "measure",
    "measure_all",
    "measure_scenario",
    "metrics_of",
    "record",
    "report_lines",
    "scenario_sha256",
    "tolerance_for",
    "write_golden",
]
