"""summary.json as typed parts (clustersim.metrics): written and read back byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clustersim import simulate
from clustersim.metrics import (
    OPTIONAL,
    SPLICE,
    FlopTrainingSummary,
    StrategySummary,
    Summary,
    SummaryFormatError,
    SummaryPart,
    TrainingSummary,
    UntypedSummary,
    canonical_json,
)
from clustersim.metrics.families import FAMILY_MODULES
from clustersim.strategies import registered_strategies
from clustersim.strategies.collective import CollectiveSummary
from clustersim.strategies.data_parallel import DataParallelSummary
from clustersim.strategies.hybrid.summary import HybridSummary
from clustersim.strategies.parameter_server.summary import ParameterServerSummary, ServerSettings
from clustersim.strategies.program import ProgramSummary
from clustersim.strategies.trace import TraceSummary
from clustersim.strategies.zero import ZeroSummary

from .test_layers import import_graph

ROOT = Path(__file__).resolve().parents[1]
ONE_PER_FAMILY = {
    "collectives/ring_allreduce_r1.yaml": CollectiveSummary,
    "network/oversubscribed_shuffle.yaml": ProgramSummary,
    "data_parallel/overlap.yaml": DataParallelSummary,
    "zero/gpt3_1.3b_stage3_prefetch.yaml": ZeroSummary,
    "parameter_server/ssp.yaml": ParameterServerSummary,
    "parameter_server/backup_straggler.yaml": ParameterServerSummary,
    "pipeline/interleaved_m8.yaml": HybridSummary,
    "megatron/table1_18.4b.yaml": HybridSummary,
    "traces/resnet50_ddp_step.yaml": TraceSummary,
}
"""A shipped scenario of every strategy family (and of the optional keys: ssp's staleness,
backup's backup_k and cancelled work, tensor parallelism's communication block)."""


@dataclass(frozen=True)
class Ran:
    """What the tests read of a run (its records let go: a session keeps nine of these)."""

    typed_summary: Summary
    summary: dict
    text: str
    """summary.json's text."""
    makespan_s: float

    def summary_json(self) -> str:
        return self.text


_RAN: dict[str, Ran] = {}
"""The light part of each family's run, kept for the worker's whole session: pytest holds one
parameter of a parametrised fixture at a time, so a session fixture alone made ssp's run
twice when the order of the tests alternated between its parameters (2 s)."""


@pytest.fixture(scope="session", params=sorted(ONE_PER_FAMILY))
def run(request: pytest.FixtureRequest):
    """One run per family for the whole session (see :data:`_RAN`)."""
    kept = _RAN.get(request.param)
    if kept is None:
        result = simulate(ROOT / "scenarios" / request.param)
        kept = _RAN[request.param] = Ran(
            result.typed_summary, result.summary, result.summary_json(), result.makespan_s
        )
    return request.param, kept


def test_each_strategy_writes_its_family(run) -> None:
    """The strategy part is the class registered under the workload's name."""
    path, result = run
    typed = result.typed_summary
    assert type(typed.strategy) is ONE_PER_FAMILY[path]
    assert StrategySummary.kind(typed.header.workload) is ONE_PER_FAMILY[path]


def test_summary_json_reads_back_to_the_same_text(run) -> None:
    """summary.json -> Summary.from_dict -> canonical_json is the same text, byte for byte,
    and the part read back equals the one the run built (floats as rounded on disk)."""
    _, result = run
    text = result.summary_json()
    back = Summary.from_dict(json.loads(text))
    assert canonical_json(back) == text
    assert type(back.strategy) is type(result.typed_summary.strategy)
    assert back.as_dict().keys() == result.summary.keys()


def test_fields_read_through_spliced_parts(run) -> None:
    """Training keys read through the summary; the dict and the typed value agree."""
    _, result = run
    typed, plain = result.typed_summary, result.summary
    assert typed.makespan_s == plain["makespan_s"] == result.makespan_s
    if isinstance(typed.strategy, TrainingSummary):
        assert typed.iteration_time_s == plain["iteration_time_s"]
        assert typed.strategy.iteration_times() == plain["iteration_times_s"]
        assert typed.bubble_fraction == plain["bubble_fraction"]
    if isinstance(typed.strategy, FlopTrainingSummary):
        assert typed.strategy.flops.tflops_per_gpu == plain["tflops_per_gpu"] > 0
    numbers = typed.numbers()
    assert numbers["makespan_s"] == plain["makespan_s"]
    assert all(not isinstance(v, bool) for v in numbers.values())


def test_every_builtin_strategy_has_a_family() -> None:
    """No built-in strategy falls back to the untyped part."""
    builtin = {
        name
        for name, cls in registered_strategies().items()
        if cls.__module__.startswith("clustersim.")
    }
    assert {"collective", "data_parallel", "parameter_server", "pipeline", "zero"} <= builtin
    missing = [n for n in sorted(builtin) if StrategySummary.kind(n) is UntypedSummary]
    assert missing == []


def test_every_family_lives_in_a_module_the_registry_names() -> None:
    """Each built-in family's class is defined beside its strategy, in a module of
    FAMILY_MODULES (what the registry imports on its first lookup), and each module named
    defines one: a family moved without its name would read back untyped elsewhere."""
    homes = {
        cls.__module__
        for cls in StrategySummary.registry.entries().values()
        if cls.__module__.startswith("clustersim.")
    }
    assert homes == set(FAMILY_MODULES)
    assert all(home.startswith("clustersim.strategies.") for home in homes)


def test_metrics_never_import_the_strategies() -> None:
    """No module of clustersim.metrics imports clustersim.strategies, not even inside a
    function: the families' parts are found by name, through the registry."""
    graph = import_graph(nested=True)
    upward = {
        name: sorted(t for t in targets if t.startswith("clustersim.strategies"))
        for name, targets in graph.items()
        if name.startswith("clustersim.metrics")
    }
    assert {name: found for name, found in upward.items() if found} == {}


FRESH_READER = """
import json, sys
import clustersim.metrics as metrics
early = sorted(m for m in sys.modules if m.startswith("clustersim.strategies"))
assert not early, early
for text in json.load(sys.stdin):
    typed = metrics.Summary.from_dict(json.loads(text))
    part = type(typed.strategy)
    print(part.__module__, part.__name__, metrics.canonical_json(typed) == text)
"""
"""Reads summary.json texts (a JSON list on stdin) in an interpreter that imported only
clustersim.metrics; prints each strategy part's class and whether it writes the same text."""


def test_a_fresh_interpreter_reads_summaries_with_the_metrics_package_alone() -> None:
    """summary.json read back where only clustersim.metrics was imported (a report, compare
    or golden process): the registry finds the families beside their strategies, the jobs'
    nested parts too, and the text comes back byte for byte."""
    texts = [
        simulate(ROOT / "scenarios" / path).summary_json()
        for path in ("pipeline/gpipe_m8.yaml", "jobs/shared_uplinks.yaml")
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_READER],
        input=json.dumps(texts),
        env=env,
        text=True,
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "clustersim.strategies.hybrid.summary HybridSummary True",
        "clustersim.strategies.jobs.summary JobsSummary True",
    ]


def test_optional_keys_are_written_only_when_set() -> None:
    """A parameter server's mode setting appears for its mode only."""
    assert ServerSettings("sync", "cpu").as_dict() == {"mode": "sync", "placement": "cpu"}
    assert ServerSettings("ssp", "cpu", staleness=2).as_dict() == {
        "mode": "ssp",
        "placement": "cpu",
        "staleness": 2,
    }
    assert ServerSettings.from_dict({"mode": "geo", "placement": "x", "geo_period": 4}) == (
        ServerSettings("geo", "x", geo_period=4)
    )


@dataclass(frozen=True)
class _Inner(SummaryPart):
    a: int
    b: int


@dataclass(frozen=True)
class _Outer(SummaryPart):
    first: str
    inner: _Inner = field(metadata=SPLICE)
    rows: dict[str, _Inner] = field(default_factory=dict)
    note: str | None = field(default=None, metadata=OPTIONAL)


def test_splice_keeps_key_order_and_nested_parts_type() -> None:
    """Spliced keys stand in the parent's order; dicts of parts come back as parts."""
    part = _Outer("x", _Inner(1, 2), {"r": _Inner(3, 4)})
    data = part.as_dict()
    assert list(data) == ["first", "a", "b", "rows"]
    assert data["rows"] == {"r": {"a": 3, "b": 4}}
    back = _Outer.from_dict(data)
    assert back == part and back.a == 1 and isinstance(back.rows["r"], _Inner)
    with pytest.raises(AttributeError, match="no field 'c'"):
        _ = back.c


def test_a_missing_key_is_named_or_read_as_none_when_lenient() -> None:
    data = {"first": "x", "a": 1}
    with pytest.raises(SummaryFormatError, match="no key 'b'"):
        _Outer.from_dict(data)
    assert _Outer.from_dict(data, lenient=True).b is None


def test_an_unknown_workload_keeps_its_keys() -> None:
    """A third-party strategy's keys pass through untouched, in order, after the header."""
    data = {
        "scenario": "s",
        "seed": 1,
        "workload": "my_plugin",
        "clustersim_version": "0",
        "makespan_s": 2.0,
        "answer": 42,
        "iteration_times_s": [1.0, 1.0],
        "devices": {},
        "busiest_links": [],
    }
    typed = Summary.from_dict(data)
    assert isinstance(typed.strategy, UntypedSummary)
    assert typed.answer == 42 and typed.strategy.iteration_times() == [1.0, 1.0]
    assert typed.as_dict() == data


def test_a_partial_mapping_reads_leniently() -> None:
    """Outputs draw partial summaries: missing keys are None, known workloads still typed."""
    typed = Summary.of({"scenario": "p", "workload": "pipeline", "schedule": "gpipe"})
    assert isinstance(typed.strategy, HybridSummary)
    assert typed.strategy.schedule == "gpipe" and typed.strategy.stages is None
    assert typed.strategy.device_bubbles() == {} and typed.memory is None
