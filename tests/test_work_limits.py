"""Work limits (clustersim.budget): absurd but finite counts are refused before they run.

Every refusal is exit code 2 with the estimate, the limit and the flag that raises it,
and happens before anything is simulated or allocated in proportion to the counts: the
fixtures below make simulating, building a collective schedule, a pipeline's operation
lists, a model's layers or composing a YAML document fail, so a test that passes shows
the refusal came first (no timed assertions).  The estimates themselves are held
against what the engine counts (summary.json's ``engine`` block).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import budget
from clustersim.api import prepare, simulate
from clustersim.budget import (
    DEFAULT_MAX_EVENTS,
    HARD_STOP_FACTOR,
    WorkEstimate,
    WorkLimitError,
    enforce,
    format_count,
)
from clustersim.cli import main
from clustersim.collectives import OPERATIONS, CollectiveCall, registered_algorithms
from clustersim.collectives.schedule import Schedule
from clustersim.collectives.work import larger_chunk
from clustersim.engine import Simulation
from clustersim.errors import SimulationError
from clustersim.scenario import parse_scenario
from clustersim.studies.collective_sweep import flat_cluster, scenario_of, two_tier_cluster
from clustersim.topology import build_topology
from clustersim.units import size_flag

from . import shared_runs
from .conftest import SCENARIOS, shipped_scenarios

BILLION = 1_000_000_000
ESTIMATE_RANGE = (0.8, 1.25)
"""Estimated / counted transfers and records: the estimates are exact on most shipped
scenarios; backup parameter servers (pushes after a round closed) and in-network
all-reduce (ranks with nothing to send get no row) are up to 7% over."""


# ----------------------------------------------------------------------------- guards


@pytest.fixture
def nothing_composed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Composing a YAML document (slow, memory in proportion to its size) fails the test."""
    from clustersim.scenario import loader

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the document was composed before the refusal")

    monkeypatch.setattr(loader._Loader, "compose_node", forbidden)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Run the command line; assert exit 2 and a message with the estimate, the limit and
    the flag (and ``words``); return the message."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "estimated work" in err
    assert f"limit of {DEFAULT_MAX_EVENTS:,} events" in err
    assert "--max-events N" in err and "engine.max_events" in err
    for word in words:
        assert word in err
    return err


def write(tmp_path: Path, doc: dict[str, Any], name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


SWITCH = {"kind": "switch", "devices": 8, "link": {"bandwidth": "10GB/s"}}
LAYERS = [{"name": f"l{i}", "params": 1e6, "flops": 1e9, "activations": "1MB"} for i in range(4)]


def training(**sections: Any) -> dict[str, Any]:
    doc = {
        "name": "t",
        "cluster": SWITCH,
        "model": {"layers": LAYERS},
        "training": {"global_batch": 64, "iterations": 2},
    }
    doc.update(sections)
    return doc


def collective(**workload: Any) -> dict[str, Any]:
    return {
        "name": "c",
        "cluster": SWITCH,
        "workload": {"collective": "allreduce", "bytes": "1MB", **workload},
    }


# ----------------------------------------------------------------------------- refusals


def test_a_billion_training_iterations_are_refused(tmp_path, capsys, nothing_runs) -> None:
    """``training.iterations: 1000000000`` is refused by ``run`` and by ``validate``."""
    doc = training()
    doc["training"]["iterations"] = BILLION
    path = write(tmp_path, doc)
    refused(["run", path, "-o", str(tmp_path / "out")], capsys, "G events")
    refused(["validate", path], capsys)
    assert not (tmp_path / "out").exists()


def test_a_billion_micro_batches_are_refused(tmp_path, capsys, nothing_runs) -> None:
    """A pipeline of 10^9 micro-batches is refused before its operation lists exist."""
    doc = training(parallelism={"pp": 4}, pipeline={"schedule": "gpipe", "micro_batches": BILLION})
    doc["training"]["global_batch"] = 4 * BILLION
    refused(["run", write(tmp_path, doc), "-o", str(tmp_path / "o")], capsys)


def test_a_one_byte_chunk_and_a_petabyte_are_refused(tmp_path, capsys, nothing_runs) -> None:
    """A 1-byte ring chunk of 160 MB and a 1 PB tree all-reduce in the flow model: refused
    before their schedules are built."""
    one_byte = collective(bytes="160MB", chunk="1B", algorithm="ring")
    petabyte = collective(bytes="1PB", algorithm="tree")
    for doc in (one_byte, petabyte):
        refused(["run", write(tmp_path, doc), "-o", str(tmp_path / "o")], capsys)


def test_the_analytical_model_prices_a_petabyte_at_once(tmp_path, capsys) -> None:
    """The same two calls in the analytical model run: priced by formula, their bytes sent
    measured on a smaller copy of the schedule (never more than MEASURED_SENDS_UP_TO sends
    built).  A 1 PB tree all-reduce over 8 ranks at 10 GB/s: each rank sends and receives
    about 2 x 1 PB, so at least 2e5 s."""
    from clustersim.collectives.algorithm import MEASURED_SENDS_UP_TO

    built: list[int] = []

    def counting(cls: type) -> Any:
        real = cls.schedule

        def schedule(self: Any, call: Any, topology: Any) -> Schedule:
            out = real(self, call, topology)
            built.append(len(out.src))
            return out

        return schedule

    one_byte = collective(bytes="160MB", chunk="1B", algorithm="ring")
    petabyte = collective(bytes="1PB", algorithm="tree")
    for doc in (one_byte, petabyte):
        doc["network"] = {"model": "analytical"}
        out = tmp_path / f"o{len(built)}"
        with pytest.MonkeyPatch.context() as patch:
            for name in ("ring", "tree"):
                cls = registered_algorithms()[name]
                patch.setattr(cls, "schedule", counting(cls))
            assert main(["run", write(tmp_path, doc), "-o", str(out), "-q"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["bytes_sent_per_device"] >= 2 * 7 / 8 * summary["bytes"] * (1 - 1e-9)
    assert summary["time_s"] >= 2e15 / 10e9
    assert built and max(built) <= MEASURED_SENDS_UP_TO
    capsys.readouterr()


@pytest.mark.parametrize(
    "flags",
    [
        ["--op", "broadcast", "--bytes", "1PB", "--algorithm", "ring"],
        ["--op", "allreduce", "--bytes", "1e30B", "--algorithm", "all"],
        ["--op", "allreduce", "--bytes", "160MB", "--chunk", "1B", "--algorithm", "ring"],
        ["--op", "allreduce", "--bytes", "1MB", "--iterations", str(BILLION)],
    ],
    ids=["1PB-broadcast", "1e30B-every-algorithm", "1B-chunk", "billion-iterations"],
)
def test_collective_command_refuses_before_the_first_point(capsys, nothing_runs, flags) -> None:
    """``clustersim collective`` checks every point's work before it runs any."""
    argv = ["collective", "--devices", "8", "--bandwidth", "10GB/s", *flags]
    err = assert_refused_flag(argv, capsys)
    assert "--max-events" in err


def assert_refused_flag(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "estimated work" in err and f"limit of {DEFAULT_MAX_EVENTS:,} events" in err
    assert "--max-events N" in err
    return err


def test_plan_and_compare_refuse_a_billion_iterations(tmp_path, capsys, nothing_runs) -> None:
    """``plan --iterations 10^9`` leaves out every candidate (estimate, limit and flag in
    its reason) and exits 2; ``compare`` with ``training.iterations`` set to 10^9 exits 2."""
    path = str(SCENARIOS / "pipeline" / "1f1b_m8.yaml")
    assert main(["plan", path, "--iterations", str(BILLION), "-j", "1", "--pp", "2,4"]) == 2
    captured = capsys.readouterr()
    assert f"estimated work over the limit of {DEFAULT_MAX_EVENTS:,} events (up to" in captured.out
    assert "--max-events N raises it" in captured.out
    assert "--max-events" in captured.err
    argv = ["compare", path, "--set", f"training.iterations={BILLION}", "-o", str(tmp_path)]
    refused([*argv, "-j", "1"], capsys)


def test_a_billion_layers_are_refused_before_they_are_built(tmp_path, capsys, monkeypatch):
    """``repeat: 1000000000`` (and a transformer of a million blocks) is refused at its
    key path by ``validate``, before a layer is built."""
    from clustersim.model import presets

    monkeypatch.setattr(presets, "layers_from_specs", None)  # calling it would fail
    doc = training()
    doc["model"]["layers"] = [*LAYERS, {"name": "x", "params": 1, "flops": 1, "repeat": BILLION}]
    assert main(["validate", write(tmp_path, doc)]) == 2
    err = capsys.readouterr().err
    assert "model.layers[4].repeat" in err and "at most 10,000 layers" in err
    shape = {"layers": 1_000_000, "hidden": 64, "heads": 4, "seq": 8, "vocab": 100}
    doc["model"] = {"transformer": shape}
    assert main(["validate", write(tmp_path, doc)]) == 2
    assert "model.transformer.layers" in capsys.readouterr().err


def test_a_15_mib_list_is_refused_before_it_is_composed(tmp_path, capsys, nothing_composed):
    """A scenario whose list has millions of items: refused at the list's key path from
    the parser's events, before the document is composed."""
    items = ", ".join(["a"] * (5 * 2**20 // 3 * 3))
    text = (
        "name: big\ncluster: {kind: switch, devices: 2, link: {bandwidth: 10GB/s}}\n"
        "workload:\n  program:\n    - {id: a, compute: {device: gpu0, seconds: 1ms}, "
        f"after: [{items}]}}\n"
    )
    path = tmp_path / "list.yaml"
    path.write_text(text)
    assert path.stat().st_size > 14 * 2**20
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.program[0].after: a list of more than 262,144 items" in err


def test_a_200000_device_custom_topology_is_refused_by_its_size(tmp_path, capsys, nothing_composed):
    """200,000 devices and links: more values than a scenario may have, said as such (no
    aliases are involved) at the key path where the count crosses the limit."""
    lines = ["name: big", "cluster:", "  kind: custom", "  switches: [sw]", "  devices:"]
    lines += [f"    - {{name: d{i}}}" for i in range(200_000)]
    lines += ["  links:"]
    lines += [f"    - {{src: d{i}, dst: sw, bandwidth: 10GB/s}}" for i in range(200_000)]
    lines += ["workload: {collective: allreduce, bytes: 1MB}"]
    path = tmp_path / "custom.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the document has more than 1,000,000 values" in err
    assert "cluster.links[" in err and "alias" not in err


def test_golden_checks_every_scenario_before_running_any(capsys, nothing_runs) -> None:
    """``golden check --max-events`` below a scenario's work refuses before simulating."""
    path = str(SCENARIOS / "pipeline" / "1f1b_m8.yaml")
    assert main(["golden", "check", path, "--max-events", "100"]) == 2
    err = capsys.readouterr().err
    assert "over the limit of 100 events" in err and "--max-events N" in err


# ----------------------------------------------------------------------------- raising


def test_max_events_raises_the_limit(tmp_path, capsys) -> None:
    """A run just over a small limit is refused; ``--max-events`` (or ``engine.max_events``
    in the scenario) above its estimate lets it run."""
    path = str(SCENARIOS / "validation" / "d1_one_gpu_aggregates.yaml")
    work = prepare(path).work
    assert work is not None and work.events == 13  # 6 transfers, 7 records
    out = str(tmp_path / "out")
    assert main(["run", path, "-o", out, "-q", "--max-events", "12"]) == 2
    assert "estimated work 13 events" in capsys.readouterr().err
    assert main(["run", path, "-o", out, "-q", "--max-events", "13"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["engine"]["records"] + summary["engine"]["flows_completed"] == 13
    doc = yaml.safe_load(Path(path).read_text())
    doc["engine"] = {"max_events": 12}
    assert main(["validate", write(tmp_path, doc)]) == 2
    assert "over the limit of 12 events" in capsys.readouterr().err
    assert main(["validate", write(tmp_path, doc), "--max-events", "1e3"]) == 0
    printed = capsys.readouterr().out
    assert "estimated work: 13 events (6 transfers, 7 records" in printed
    assert "limit 1,000 events" in printed


def test_max_events_flag_takes_whole_numbers_only(capsys) -> None:
    """``--max-events`` refuses 0, fractions and words (argparse's exit 2)."""
    for bad in ("0", "1.5", "many"):
        with pytest.raises(SystemExit) as info:
            main(["validate", "x.yaml", "--max-events", bad])
        assert info.value.code == 2
        assert "whole number of events" in capsys.readouterr().err


def test_collective_command_runs_what_max_events_allows(capsys) -> None:
    """A 160 MB ring all-reduce on 4 devices in 1 MB pieces is 2 x 3 steps x 4 ranks x 40
    pieces = 960 sends and 4 rows: refused at 963 events, run at 964."""
    argv = ["collective", "--devices", "4", "--bandwidth", "10GB/s", "--op", "allreduce"]
    argv += ["--bytes", "160MB", "--chunk", "1MB", "--algorithm", "ring", "--json"]
    assert main([*argv, "--max-events", "963"]) == 2
    assert "estimated work 964 events (960 transfers, 4 records)" in capsys.readouterr().err
    assert main([*argv, "--max-events", "964"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["time_s"] > 0


# ----------------------------------------------------------------------------- the engine


def test_engine_stops_a_run_past_its_hard_limit() -> None:
    """A run whose estimate was wrong stops at HARD_STOP_FACTOR x max_events with a clear
    error, looked at once per batch of steps."""
    topology = build_topology(scenario_of(flat_cluster("switch", 2, "10GB/s")).cluster)
    sim = Simulation(topology, max_events=1000)

    def forever() -> Any:
        while True:
            yield sim.compute("gpu0", seconds=1e-3)

    sim.process(forever())
    with pytest.raises(SimulationError, match="4 times its limit of 1,000 events"):
        sim.run()
    assert HARD_STOP_FACTOR * 1000 < len(sim.records) < HARD_STOP_FACTOR * 1000 + 2 * 8192


def test_engine_runs_until_a_time_as_simpy_does() -> None:
    """``run(until)`` stops before the events at ``until`` and can go on from there."""
    topology = build_topology(scenario_of(flat_cluster("switch", 2, "10GB/s")).cluster)
    sim = Simulation(topology)
    ends = []

    def ticks() -> Any:
        for _ in range(3):
            yield sim.timeout(1.0)
            ends.append(sim.now)

    sim.process(ticks())
    assert sim.run(until=2.0) == 2.0 and ends == [1.0]
    assert sim.run() == 3.0 and ends == [1.0, 2.0, 3.0]


def test_enforce_names_the_estimate_the_limit_and_both_ways_to_raise_it() -> None:
    """The refusal's one problem sits at engine.max_events."""
    with pytest.raises(WorkLimitError) as info:
        enforce(WorkEstimate(2e9, 5e8), 1000, "s.yaml", "a run")
    text = str(info.value)
    assert text.startswith("s.yaml: engine.max_events: a run: estimated work 2.5 G events")
    assert "(2 G transfers, 500 M records)" in text
    assert "--max-events N" in text and "engine.max_events: N" in text
    assert info.value.with_source("t.yaml").estimate == WorkEstimate(2e9, 5e8)
    enforce(None, 1)  # a strategy that cannot estimate passes
    assert [format_count(x) for x in (950, 12_000, 3.5e5, 1.25e9, 2e16)] == [
        "950",
        "12,000",
        "0.35 M",
        "1.25 G",
        "2e+16",
    ]


# ----------------------------------------------------------------------------- estimates


def _variant(path: str, change: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load((SCENARIOS / path).read_text())
    for key, value in change.items():
        section, _, field = key.partition(".")
        if field:
            doc[section] = {**(doc.get(section) or {}), field: value}
        else:
            doc[section] = value
    return doc


ESTIMATED = [
    ("collectives/ring_allreduce_r1.yaml", {}),
    ("collectives/ring_allreduce_r1.yaml", {"workload.bytes": "1KB"}),
    ("collectives/ring_allreduce_r1.yaml", {"workload.bytes": "64MB", "workload.chunk": "4MB"}),
    ("collectives/ring_allreduce_r1.yaml", {"workload.algorithm": "double_tree"}),
    ("collectives/ring_allreduce_r1.yaml", {"workload.algorithm": "auto"}),
    ("collectives/ring_allreduce_r1.yaml", {"workload.reduce_cost": True}),
    ("collectives/ring_allreduce_r1.yaml", {"network.model": "analytical"}),
    ("collectives/oversubscribed_ring.yaml", {"network.channels": 4}),
    ("collectives/oversubscribed_hierarchical.yaml", {}),
    ("clusters/sharp_dgx_4nodes.yaml", {}),
    ("clusters/dgx-a100-4nodes.yaml", {}),
    ("data_parallel/overlap.yaml", {}),
    ("data_parallel/overlap.yaml", {"network.model": "analytical"}),
    ("data_parallel/straggler.yaml", {"training.iterations": 5}),
    ("pipeline/1f1b_m8.yaml", {}),
    ("pipeline/interleaved_m32.yaml", {}),
    ("pipeline/zb_v.yaml", {}),
    ("pipeline/pipedream.yaml", {"parallelism.pp": 4, "parallelism.dp": 2}),
    ("megatron/gpt3_175b_1024.yaml", {}),
    # Megatron-Core's recipes: bucketed, overlapped reduce-scatters and gathers
    ("megatron/gpt3_175b_1024.yaml", {"zero": {"stage": 1}, "data_parallel": {}}),
    (
        "pipeline/1f1b_m8.yaml",
        {
            "parallelism.pp": 2,
            "parallelism.dp": 4,
            "data_parallel": {"allreduce": {"bucket": "10MB"}},
        },
    ),
    (
        "pipeline/interleaved_m32.yaml",
        {
            "parallelism.pp": 2,
            "parallelism.dp": 4,
            "pipeline.micro_batches": 8,
            "data_parallel": {"allreduce": {"bucket": "5MB"}},
        },
    ),
    ("parameter_server/sync_straggler.yaml", {}),
    ("parameter_server/backup_straggler.yaml", {}),
    ("parameter_server/replicated_failover.yaml", {}),
    ("zero/gpt3_1.3b_stage3_prefetch.yaml", {}),
    ("ps_vs_ring/resnet50_hierarchical.yaml", {}),
    ("ps_vs_ring/resnet50_ps_hierarchical_ps.yaml", {}),
    ("ps_vs_ring/resnet50_ps_servers_1x.yaml", {}),
    ("validation/d3_sharded_aggregation.yaml", {}),
]


@pytest.mark.parametrize(
    "path, change", ESTIMATED, ids=[f"{p}-{'-'.join(map(str, c.values()))}" for p, c in ESTIMATED]
)
def test_estimate_is_within_its_factor_of_what_the_run_counts(path, change) -> None:
    """Estimated transfers and records against the engine's counters after the run (a
    shipped file unchanged: the session's shared run of it, whose counters are its own)."""
    scenario = parse_scenario(_variant(path, change), str(SCENARIOS / path))
    work = prepare(scenario).work
    assert work is not None
    if change:
        engine = simulate(scenario).typed_summary.engine.as_dict()
    else:
        file = SCENARIOS / path
        engine = shared_runs.summary(file, shared_runs.checked(file))["engine"]
    low, high = ESTIMATE_RANGE
    assert low <= work.transfers / max(engine["flows_completed"], 1) <= high
    assert low <= work.records / engine["records"] <= high


CLUSTERS = [
    flat_cluster("switch", 7, "10GB/s"),
    flat_cluster("ring", 6, "10GB/s"),
    two_tier_cluster(racks=2, nodes_per_rack=2, gpus_per_node=4),
]


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda c: c["kind"])
def test_every_algorithm_counts_its_sends_without_building_them(cluster) -> None:
    """``Algorithm.sends`` equals the length of the schedule for every built-in algorithm,
    operation, size, chunk, root and direction."""
    topology = build_topology(scenario_of(cluster).cluster)
    devices = tuple(d.name for d in topology.devices.values() if d.kind == "gpu")
    wrong = []
    for name, cls in registered_algorithms().items():
        if not cls.__module__.startswith("clustersim."):
            continue  # a plugin registered by another test counts with the default
        algo = cls()
        for op in OPERATIONS:
            root = 1 if OPERATIONS[op].rooted else 0
            for size, chunk in ((0.0, None), (64e6, None), (10e6, 1e6), (1e6, 3e5)):
                for both in (False, True):
                    call = CollectiveCall(op, devices, size, name, root, chunk, both)
                    if algo.unsupported(call, topology) is None:
                        built = len(algo.schedule(call, topology))
                        if algo.sends(call, topology) != built:
                            wrong.append((name, op, size, chunk, both, built))
    assert wrong == []


def test_a_petabyte_is_counted_not_built() -> None:
    """The count of a 1 PB tree all-reduce's sends is instant: about 1.3e10 on 8 ranks."""
    topology = build_topology(scenario_of(flat_cluster("switch", 8, "10GB/s")).cluster)
    devices = tuple(topology.devices)
    sends = registered_algorithms()["tree"]().sends(
        CollectiveCall("allreduce", devices, 1e15, "tree"), topology
    )
    assert sends == 14 * 953_674_317  # 2 (n - 1) streams x ceil(1e15 / 1 MiB) pieces


def test_default_limit_runs_every_shipped_scenario() -> None:
    """Every shipped scenario's estimate is well inside the default limit: ten times
    (``clustersim validate --max-events`` a tenth of the default accepts every file; the
    walk tests/test_cli.py reads too).  Megatron's 1T row, the largest replay of a published
    run at full size, needs about 2.1 million events with one replica simulated."""
    code, out, err = shared_runs.validated_every_scenario()
    assert shared_runs.MARGIN == 10
    assert code == 0, err
    shipped = {str(p) for p in shipped_scenarios("*/*.yaml")}
    assert shipped <= {
        line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("ok ")
    }


def test_studies_pass_the_limit_on_in_each_document() -> None:
    """``with_limit`` writes engine.max_events into a copy of a document."""
    from clustersim.budget import with_limit

    doc = {"name": "x", "engine": {"max_events": 5}}
    original = copy.deepcopy(doc)
    assert with_limit(doc, None) is doc
    assert with_limit(doc, 7)["engine"] == {"max_events": 7}
    assert doc == original


def test_contention_counts_as_work_at_the_hard_stop(capsys) -> None:
    """A run whose time goes to re-rating flows (a parameter server with periodic pushes
    of every key: about 500 re-ratings per transfer) is stopped by its counted work, the
    re-ratings at RERATINGS_PER_EVENT to the event, though its records and transfers
    alone stay under the hard stop; the message says why."""
    from clustersim.budget import RERATINGS_PER_EVENT

    path = SCENARIOS / "parameter_server" / "geo.yaml"
    estimate = prepare(path).strategy.estimate_work().events  # 22,920 events
    limit = int(estimate * 1.1)
    assert main(["run", str(path), "-o", "unused", "--max-events", str(limit), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{HARD_STOP_FACTOR} times its limit of {limit:,} events" in err
    assert "flow re-ratings counted as" in err and "share links" in err
    numbers = re.search(r"\(([\d.,]+) records, ([\d.,]+) transfers, ([\d.]+) M flow", err)
    assert numbers is not None, err
    records, transfers = (float(x.replace(",", "")) for x in numbers.groups()[:2])
    assert records + transfers < HARD_STOP_FACTOR * limit
    assert float(numbers.group(3)) * 1e6 / RERATINGS_PER_EVENT > HARD_STOP_FACTOR * limit / 2


# ----------------------------------------------------------------------------- long work

R1 = SCENARIOS / "collectives" / "ring_allreduce_r1.yaml"
"""A ring all-reduce of 160 MB on 8 devices: 20 MB segments, about 50 ms to run."""


def _stop_at_the_first_point(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt  # main: one line, exit 130, and nothing simulated


def test_long_work_notice_says_time_events_and_what_shortens_it() -> None:
    """Over NOTICE_AFTER_S (10 s) at EVENTS_PER_S (60,000/s): the time to two figures, the
    events, the hint; 600,000 events (10 s) and less say nothing; processes share the time."""
    assert budget.NOTICE_AFTER_S == 10.0 and budget.EVENTS_PER_S == 60_000
    assert budget.long_work_notice(WorkEstimate(transfers=600_000), "x") == ""
    assert budget.long_work_notice(None, "x") == ""
    six_million = WorkEstimate(transfers=6e6, records=4)
    assert budget.wall_time_s(six_million) == pytest.approx(100.0, abs=1e-3)
    assert (
        budget.long_work_notice(six_million, "--chunk 16B or --model analytical")
        == "about 1.7 min of simulation (6 M events): --chunk 16B or --model analytical "
        "shortens it"
    )
    assert budget.long_work_notice(six_million * 100, "") == (
        "about 2.8 h of simulation (600 M events)"
    )
    assert budget.long_work_notice(six_million, "", processes=2) == (
        "about 50 s of simulation on 2 processes (6 M events)"
    )
    assert budget.either(["a", "b", "c"]) == "a, b or c" and budget.either(["a"]) == "a"


def test_larger_chunk_is_the_smallest_power_of_two_that_fits() -> None:
    """Sends falling as 6 M / chunk: 16 B is the first power of two above 1 B with at most
    600,000; none fits when the work does not fall with the chunk."""
    assert larger_chunk(lambda c: 6e6 / c, 1.0, 600_000) == 16.0
    assert larger_chunk(lambda c: 6e6 / c, 16.0, 600_000) == 32.0  # strictly larger
    assert larger_chunk(lambda c: 6e6 / c, 1000.0, 600_000) == 1024.0
    assert larger_chunk(lambda c: 6e6, 1.0, 600_000) is None
    assert [size_flag(x) for x in (16.0, 2048.0, 2000.0, 2.0**20, 1234567.0)] == [
        "16B",
        "2KiB",
        "2kB",
        "1MiB",
        "1234567B",
    ]


def test_the_one_byte_chunk_is_announced_before_it_runs(capsys, monkeypatch) -> None:
    """The issue's command (2 minutes, 1.6 GB, nothing printed): a double tree sends each
    1-byte piece of 1 MB six times on 4 ranks, 6,000,000 sends (+ 4 rows), 100 s at
    60,000 events/s; 16 B is the first power of two that brings it under 600,000 (375,004;
    8 B gives 750,004).  Said on stderr, not a terminal, before the first point runs."""
    monkeypatch.setattr("clustersim.studies.collective_sweep.run_point", _stop_at_the_first_point)
    argv = ["collective", "--op", "allreduce", "--devices", "4", "--bytes", "1MB"]
    assert main([*argv, "--chunk", "1B"]) == 130
    assert capsys.readouterr().err == (
        "clustersim: about 1.7 min of simulation (6 M events): --chunk 16B or --model "
        "analytical shortens it\nclustersim: interrupted\n"
    )
    assert main([*argv, "--chunk", "1B", "-q"]) == 130  # --quiet: no notice
    assert capsys.readouterr().err == "clustersim: interrupted\n"
    assert main([*argv, "--chunk", "16B"]) == 130  # 375,004 events: about 6 s
    assert capsys.readouterr().err == "clustersim: interrupted\n"


def test_a_sweep_names_the_flags_that_shorten_it(capsys, monkeypatch) -> None:
    """Two sizes, two algorithms, three iterations: every flag that applies is named.  Ring
    and tree on 4 ranks send 6 sends per byte at a 1-byte chunk: (256,000 + 512,000) x 6
    x 3 iterations x 2 algorithms + the rows = 27.6 M events, 7.7 min.  The chunk is fitted
    on the largest point (512 kB, 9.2 M events), which must shrink as the sweep must, to
    600,000 / 27.6 M of itself, 200,000: 64 B gives 144,012 (32 B 288,012)."""
    monkeypatch.setattr("clustersim.studies.collective_sweep.run_point", _stop_at_the_first_point)
    argv = ["collective", "--op", "allreduce", "--devices", "4", "--bytes", "256kB:512kB:x2"]
    argv += ["--chunk", "1B", "--algorithm", "ring,tree", "--iterations", "3"]
    assert main(argv) == 130
    assert capsys.readouterr().err.splitlines()[0] == (
        "clustersim: about 7.7 min of simulation (27.6 M events): --chunk 64B, fewer "
        "--iterations, fewer --bytes sizes, one --algorithm or --model analytical shortens it"
    )
    assert main([*argv, "--model", "analytical"]) == 130  # priced at once: no notice
    assert capsys.readouterr().err == "clustersim: interrupted\n"


def test_a_long_run_is_announced_with_what_shortens_it(tmp_path, capsys, monkeypatch) -> None:
    """``clustersim run`` says so before simulating, off a terminal too: R1 with a 10 MB
    chunk is 2 pieces per 20 MB segment, 2 x 7 x 8 x 2 = 224 sends, recorded, + 8 rows =
    456 events; with the notice at 0.005 s (300 events) the hint is a 32 MiB chunk (one
    piece: 232 events; 16 MiB still cuts a segment in two) or the analytical model."""
    monkeypatch.setattr(budget, "NOTICE_AFTER_S", 0.005)
    argv = ["run", str(R1), "-o", str(tmp_path / "r"), "--set", "workload.chunk=10MB"]
    assert main(argv) == 0
    assert capsys.readouterr().err == (
        "clustersim: about 0.0076 s of simulation (456 events): --set workload.chunk=32MiB "
        "or --network analytical shortens it\n"
    )
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["engine"]["estimated_events"] == 456
    assert main([*argv, "-q"]) == 0
    assert capsys.readouterr().err == ""  # --quiet: no notice
    assert main(["run", str(R1), "-o", str(tmp_path / "s")]) == 0  # 232 events: no notice
    assert capsys.readouterr().err == ""


def test_training_runs_name_iterations_replicas_and_the_network_model() -> None:
    """What shortens a training run: one iteration; the analytical model where the
    data-parallel collectives are played send by send (data parallel, ZeRO); replica 0
    standing for identical replicas (pipelines with every replica simulated)."""
    two = prepare(parse_scenario(training(), "t.yaml"))
    assert two.strategy.shorter() == ["--set training.iterations=1", "--network analytical"]
    gpt3 = SCENARIOS / "megatron" / "gpt3_175b_1024.yaml"
    one = prepare(gpt3).strategy
    assert one.simulated == 1 and one.shorter() == []
    doc = yaml.safe_load(gpt3.read_text())
    doc["parallelism"]["simulate_replicas"] = "all"
    every = prepare(parse_scenario(doc, str(gpt3))).strategy
    assert every.shorter() == ["--set parallelism.simulate_replicas=one"]


def test_compare_and_golden_announce_their_runs_together(tmp_path, capsys, monkeypatch) -> None:
    """Compare adds its runs' events (R1 once, 232, and twice, 2 x 224 sends + their rows +
    8 rows = 464) and shares their time among its processes; what shortens them leaves out
    the key it sweeps.  Golden announces its runs too (no --set to offer: a golden records
    the run as it is)."""
    monkeypatch.setattr(budget, "NOTICE_AFTER_S", 0.001)
    argv = ["compare", str(R1), "--set", "workload.iterations=1,2", "-o", str(tmp_path / "c")]
    assert main([*argv, "-j", "1"]) == 0
    assert capsys.readouterr().err == (
        "clustersim: about 0.012 s of simulation (696 events): fewer --set values or "
        "--network analytical shortens it\n"
    )
    assert main(["golden", "record", str(R1), "--dir", str(tmp_path / "g")]) == 0
    assert capsys.readouterr().err == "clustersim: about 0.0039 s of simulation (232 events)\n"


@pytest.mark.parametrize("size", [1e6, 64e6, 1e9])
def test_a_calls_work_is_counted_once_for_groups_that_sit_alike(size: float) -> None:
    """call_work remembers a call's work by the orbit of its group
    (clustersim/topology/symmetry.py): 4 GPUs on each of two nodes of rack 0 and the same
    GPUs of two nodes of rack 1 sit alike and get one estimate (the same object), equal to
    the count made afresh; 8 GPUs of one node do not sit like them and are counted on their
    own (NCCL's choice and channels differ: 112 sends against 448-13,440)."""
    from clustersim.collectives import work

    topology = build_topology(
        parse_scenario(
            {
                "name": "alike",
                "cluster": {
                    "kind": "two_tier",
                    "racks": 2,
                    "nodes_per_rack": 4,
                    "node": {"preset": "dgx-a100"},
                },
                "workload": {"program": []},
            }
        ).cluster
    )

    def call(names: list[str]) -> CollectiveCall:
        return CollectiveCall("allreduce", tuple(names), size, "auto", protocol="auto")

    first = call([f"rack0/node{n}/gpu{i}" for n in (0, 1) for i in range(4)])
    alike = call([f"rack1/node{n}/gpu{i}" for n in (2, 3) for i in range(4)])
    other = call([f"rack0/node0/gpu{i}" for i in range(8)])
    counted_first, counted_other = (
        work._counted_work(c, topology, "flow", "auto", None) for c in (first, other)
    )
    estimate = work.call_work(first, topology, channels="auto")
    assert estimate == counted_first
    assert work.call_work(alike, topology, channels="auto") is estimate
    assert work.call_work(other, topology, channels="auto") == counted_other
    assert counted_other.transfers == 112.0 != counted_first.transfers
