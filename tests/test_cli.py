"""The command line: outputs, exit codes, clear errors, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clustersim.cli import main
from clustersim.records import TIMELINE_COLUMNS

from . import shared_runs
from .conftest import SCENARIOS

D1 = SCENARIOS / "validation" / "d1_one_gpu_aggregates.yaml"
DEMO = SCENARIOS / "pipeline" / "dgx_a100_llama2_7b.yaml"


def write(tmp_path, text: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_run_writes_summary_and_timeline(tmp_path, capsys) -> None:
    """`clustersim run` writes summary.json and timeline.csv with the contract's keys and columns."""
    assert main(["run", str(D1), "-o", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {"makespan_s", "scenario", "seed"} <= summary.keys()
    assert summary["scenario"] == "d1-one-gpu-aggregates"
    header = (tmp_path / "out" / "timeline.csv").read_text().splitlines()[0].split(",")
    assert header[: len(TIMELINE_COLUMNS)] == list(TIMELINE_COLUMNS)
    assert {"resource", "kind", "label", "start_s", "end_s", "bytes"} <= set(header)
    printed = capsys.readouterr().out
    assert "makespan" in printed and "60" in printed


def test_run_prints_the_bubble_against_its_theory(tmp_path, capsys) -> None:
    """A pipeline run prints iteration, bubble and memory together; the bubble line gives the
    measured bubble_fraction and the schedule's theoretical one, in percent."""
    assert main(["run", str(DEMO), "-o", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    lines = capsys.readouterr().out.splitlines()
    first = [line.split()[0] for line in lines]
    at = first.index("iteration")
    assert first[at : at + 3] == ["iteration", "bubble", "memory"]
    measured = 100 * summary["bubble_fraction"]
    assert lines[at + 1] == (
        f"bubble    {measured:.1f}% of the workers' time idle (theory 27.3% for 1f1b, p = 4, m = 8)"
    )
    assert lines[at + 2].endswith("(fits)")


def test_run_prints_the_bubble_of_every_training_run(tmp_path, capsys) -> None:
    """Data parallelism has a bubble too (workers waiting on others), and no theory to quote."""
    assert (
        main(["run", str(SCENARIOS / "data_parallel" / "overlap.yaml"), "-o", str(tmp_path)]) == 0
    )
    bubble = [line for line in capsys.readouterr().out.splitlines() if line.startswith("bubble ")]
    assert bubble == ["bubble    0.0% of the workers' time idle"]


def test_timeline_has_one_row_per_operation(tmp_path) -> None:
    """D1 has 6 transfers and 1 compute: 7 timeline rows, transfers carry their bytes."""
    main(["run", str(D1), "-o", str(tmp_path), "-q"])
    rows = (tmp_path / "timeline.csv").read_text().splitlines()[1:]
    assert len(rows) == 7
    kinds = sorted(r.split(",")[1] for r in rows)
    assert kinds == ["compute"] + ["transfer"] * 6
    assert all(r.split(",")[5] == "160000000" for r in rows if r.split(",")[1] == "transfer")


def test_no_temporary_files_left(tmp_path) -> None:
    """Outputs are moved into place; no temporary names remain."""
    main(["run", str(D1), "-o", str(tmp_path), "-q"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "links.csv",
        "scenario.resolved.yaml",
        "summary.json",
        "timeline.csv",
        "trace.json",
    ]


def test_same_run_same_bytes(tmp_path) -> None:
    """Two runs of one scenario give byte-identical summary.json and timeline.csv."""
    for d in ("a", "b"):
        main(
            [
                "run",
                str(SCENARIOS / "network" / "oversubscribed_shuffle.yaml"),
                "-o",
                str(tmp_path / d),
                "-q",
            ]
        )
    for name in ("summary.json", "timeline.csv", "links.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_summary_independent_of_hash_seed(tmp_path) -> None:
    """Different PYTHONHASHSEED values give the same summary bytes."""
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        scenario = SCENARIOS / "network" / "oversubscribed_shuffle.yaml"
        subprocess.run(
            [sys.executable, "-m", "clustersim", "run", str(scenario), "-o", str(out), "-q"],
            check=True,
            env=env,
            capture_output=True,
        )
        outs.append((out / "summary.json").read_bytes())
    assert outs[0] == outs[1]


def test_seed_override(tmp_path) -> None:
    """--seed replaces the scenario's seed in the summary."""
    main(["run", str(D1), "-o", str(tmp_path), "-q", "--seed", "7"])
    assert json.loads((tmp_path / "summary.json").read_text())["seed"] == 7


BAD = {
    "unknown key": (
        "name: x\ncluster:\n  node:\n    nicc: {bandwidth: 1GB/s}\nworkload: {program: []}\n",
        "nicc",
    ),
    "bare number": (
        "name: x\ncluster:\n  node:\n    pcie: {bandwidth: 16}\n    nic: {bandwidth: 1GB/s}\nworkload:\n  program:\n    - {id: a, compute: {device: rack0/node0/gpu0, seconds: 1s}}\n",
        "cluster.node.pcie.bandwidth",
    ),
    "unknown device": (
        "name: x\ncluster:\n  node:\n    pcie: {bandwidth: 16GB/s}\n    nic: {bandwidth: 1GB/s}\nworkload:\n  program:\n    - {id: a, compute: {device: rack0/node0/gpu9, seconds: 1s}}\n",
        "workload.program[0].compute.device",
    ),
    "unknown dependency": (
        "name: x\ncluster:\n  node:\n    pcie: {bandwidth: 16GB/s}\n    nic: {bandwidth: 1GB/s}\nworkload:\n  program:\n    - {id: a, compute: {device: rack0/node0/gpu0, seconds: 1s}, after: [b]}\n",
        "workload.program[0].after[0]",
    ),
    "cycle": (
        "name: x\ncluster:\n  node:\n    pcie: {bandwidth: 16GB/s}\n    nic: {bandwidth: 1GB/s}\nworkload:\n  program:\n"
        "    - {id: a, compute: {device: rack0/node0/gpu0, seconds: 1s}, after: [b]}\n"
        "    - {id: b, compute: {device: rack0/node0/gpu0, seconds: 1s}, after: [a]}\n",
        "cycle",
    ),
    "unknown workload": (
        "name: x\ncluster:\n  node:\n    pcie: {bandwidth: 16GB/s}\n    nic: {bandwidth: 1GB/s}\nworkload: {programm: []}\n",
        "program",
    ),
    "yaml syntax": ("name: [x\n", "s.yaml"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["run", "validate"])
def test_bad_input_exits_2_with_clear_message(tmp_path, capsys, case: str, command: str) -> None:
    """Bad input: exit code 2, the file and key path in the message, no traceback."""
    text, expected = BAD[case]
    path = write(tmp_path, text)
    args = [command, str(path)] + (["-o", str(tmp_path / "out")] if command == "run" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert str(path) in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_bad_input_via_subprocess_has_no_traceback(tmp_path) -> None:
    """The console entry point itself exits 2 without a traceback."""
    path = write(tmp_path, "name: x\ncluster: {kind: torus}\nworkload: {program: []}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim", "run", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cluster" in proc.stderr


_EXIT_NOW = """
import atexit, sys, threading, time
from clustersim.console import exit_now
atexit.register(lambda: print("handler ran", flush=True))
if sys.argv[1] == "thread":
    def late():
        time.sleep(0.3)
        print("thread done", flush=True)
    threading.Thread(target=late).start()
print("x" * 200_000, end="")
print("to stderr", file=sys.stderr, end="")
exit_now(3)
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
def test_the_console_exit_keeps_output_handlers_threads_and_the_code(thread: str) -> None:
    """clustersim.console.exit_now, how the console script ends (without freeing the run's
    objects one by one): buffered output is flushed, exit handlers run, a live thread is
    waited for, and the exit code is the command's."""
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_NOW, thread], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3
    assert proc.stdout.startswith("x" * 200_000) and proc.stdout.endswith("handler ran\n")
    assert ("thread done" in proc.stdout) == (thread == "thread")
    assert proc.stderr == "to stderr"


def test_the_console_exit_ignores_a_stream_it_cannot_flush() -> None:
    """Output still buffered for a stream that is gone (its reader closed the pipe, as
    ``| head`` does; here its descriptor is closed): the exit code is the command's, and
    nothing is printed about it."""
    script = (
        "import os, sys\n"
        "from clustersim.console import exit_now\n"
        "sys.stdout = os.fdopen(os.dup(1), 'w', buffering=65536)\n"
        "print('x' * 100, end='')\n"
        "os.close(sys.stdout.fileno())\n"
        "exit_now(4)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (4, "")


def test_missing_file_exits_2(capsys) -> None:
    """A scenario that does not exist is bad input."""
    assert main(["run", "/nonexistent/s.yaml"]) == 2
    assert "/nonexistent/s.yaml" in capsys.readouterr().err


def test_validate_accepts_every_shipped_scenario() -> None:
    """Every scenario in scenarios/ validates (the one walk tests/test_work_limits.py reads
    too, with a work limit ten times below the default: a file that passes it passes the
    default)."""
    files = shared_runs.every_scenario_file()
    assert files
    code, out, err = shared_runs.validated_every_scenario()
    assert code == 0, err
    assert out.count("ok ") == len(files)


def test_validate_reports_every_bad_file(tmp_path, capsys) -> None:
    """validate goes on past a bad file and exits 2 at the end."""
    bad = write(tmp_path, "name: x\n", "bad.yaml")
    assert main(["validate", str(D1), str(bad)]) == 2
    captured = capsys.readouterr()
    assert "ok " in captured.out and "bad.yaml" in captured.err


def test_schema_is_json_with_the_scenario_keys(capsys) -> None:
    """`clustersim schema` prints a JSON Schema naming the top-level keys and the program workload."""
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"name", "cluster", "workload"} <= set(schema["properties"])
    assert "program" in json.dumps(schema["properties"]["workload"])


def test_list_strategies(capsys) -> None:
    """`clustersim list strategies` names the registered strategies."""
    assert main(["list", "strategies"]) == 0
    assert "program" in capsys.readouterr().out


def test_list_algorithms(capsys) -> None:
    """`clustersim list algorithms` names every collective algorithm and its operations."""
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    for name in (
        "ring",
        "direct",
        "tree",
        "double_tree",
        "halving_doubling",
        "recursive_doubling",
        "hierarchical",
        "root",
    ):
        assert f"\n{name} " in "\n" + out
    assert "allreduce" in out


def test_help_lists_commands(capsys) -> None:
    """--help names every command."""
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "validate", "schema", "list", "collective"):
        assert command in out
