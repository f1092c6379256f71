"""Sweeps on a Dask cluster (``--scheduler``): the same outputs as the process pool, byte
for byte; bad or unreachable schedulers refused in one line naming the flag."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustersim.cli import main
from clustersim.studies import dask_runner, run_all

from .conftest import SCENARIOS
from .test_output_safety import ROOT, _siblings, _subprocess
from .test_plan import training_doc, write_doc

distributed = pytest.importorskip("distributed")

OVERLAP = SCENARIOS / "data_parallel" / "overlap.yaml"
"""Four GPUs, three iterations: a fraction of a second per run."""
NO_OVERLAP = SCENARIOS / "data_parallel" / "no_overlap.yaml"
BANDWIDTHS = "cluster.link.bandwidth=25GB/s,50GB/s,100GB/s,200GB/s"
SLOW = SCENARIOS / "zero" / "gpt3_1.3b_stage1.yaml"
"""Half a second of simulation per run: a sweep of it is still running when signalled."""


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """The address of a real two-worker Dask cluster (one thread each), closed afterwards."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
    ) as cluster:
        yield cluster.scheduler_address


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (choose's plans/ too), by its path inside it."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _same_as_the_pool(
    argv: list[object], scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    """Run ``argv -o DIR`` with ``-j 2`` and with ``--scheduler``: both exit 0 with the same
    stdout and the same files, byte for byte; the stdout of the second."""
    pool = _run([*argv, "-o", tmp_path / "pool", "-j", "2"], capsys)
    dask = _run([*argv, "-o", tmp_path / "dask", "--scheduler", scheduler], capsys)
    assert pool[0] == dask[0] == 0
    assert pool[1].replace("pool", "dask") == dask[1]
    assert _files(tmp_path / "pool") == _files(tmp_path / "dask")
    return dask[1]


def test_run_all_on_a_scheduler_keeps_call_order_and_progress(scheduler: str) -> None:
    """Results in call order, ``progress`` announced and then once per run."""
    seen: list[tuple[int, int]] = []
    calls = [(b, 3) for b in range(7)]
    out = run_all(
        pow, calls, progress=lambda d, t: seen.append((d, t)), announce=True, scheduler=scheduler
    )
    assert out == [b**3 for b in range(7)]
    assert seen == [(i, 7) for i in range(8)]


def test_a_failing_run_on_a_scheduler_raises_in_the_caller(scheduler: str) -> None:
    with pytest.raises(ZeroDivisionError):
        run_all(divmod, [(1, 1), (1, 0)], scheduler=scheduler)


def test_compare_on_local_dask_is_byte_identical_to_the_process_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--scheduler local:2`` (a scheduler here, two worker processes): compare.csv, .md and
    .png byte for byte as ``-j 2`` writes them, and the same lines on stdout."""
    argv = ["compare", OVERLAP, NO_OVERLAP, "--set", BANDWIDTHS, "-q"]
    out = _same_as_the_pool(argv, "local:2", tmp_path, capsys)
    assert "8 simulation(s) of 2 scenario(s)" in out


def test_plan_on_a_scheduler_address_is_byte_identical(
    scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plan --scheduler tcp://...`` of a running cluster: table, verdict and plan files
    as the process pool gives them."""
    path = write_doc(tmp_path, training_doc())
    argv = ["plan", path, "--tp", "1,2", "--pp", "1,2", "--micro-batch", "4", "--verify", "2"]
    out = _same_as_the_pool([*argv, "-q"], scheduler, tmp_path, capsys)
    assert "simulating 12 configuration(s)" in out  # 4 of them interleaved (chunks 2)
    assert "verifying the best 2 with the flow-level model, every replica" in out


def test_choose_on_local_dask_is_byte_identical_to_the_process_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``choose --scheduler local:2``: the table, the verdict and every file (choose.csv,
    choose.md, the frontier plot, plans/NAME.csv) as ``-j 2`` gives them."""
    from .test_choose import CLUSTERS, candidates, write

    path = write(tmp_path / "in", candidates(clusters=CLUSTERS[1:]))
    out = _same_as_the_pool(["choose", path, "-q"], "local:2", tmp_path, capsys)
    assert "simulating" in out and "cheapest: " in out


def test_golden_record_and_check_on_a_scheduler(
    scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Golden files recorded on the cluster are the process pool's, byte for byte (the
    workers get the scenarios' documents and hashes, not their paths), and check passes."""
    scenarios = [OVERLAP, NO_OVERLAP]
    assert (
        main(["golden", "record", *map(str, scenarios), "--dir", str(tmp_path / "pool"), "-j", "2"])
        == 0
    )
    code = main(
        [
            "golden",
            "record",
            *map(str, scenarios),
            "--dir",
            str(tmp_path / "dask"),
            "--scheduler",
            scheduler,
        ]
    )
    assert code == 0
    assert _files(tmp_path / "pool") == _files(tmp_path / "dask")
    capsys.readouterr()
    code, out, _ = _run(
        ["golden", "check", *scenarios, "--dir", tmp_path / "dask", "--scheduler", scheduler],
        capsys,
    )
    assert (code, out.splitlines()[-1]) == (0, "all 2 scenario(s) match their golden timings")


@pytest.mark.parametrize(
    "address", ["local:0", "local:two", "local:", "tcp://host", "host:99999", "http://h:80", ""]
)
def test_a_malformed_scheduler_is_refused_with_the_allowed_forms(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        ["compare", OVERLAP, "-o", tmp_path / "out", "--scheduler", address], capsys
    )
    assert code == 2
    assert err.startswith("clustersim: error: --scheduler: not a Dask scheduler")
    assert "local:N (N >= 1 local worker processes), tcp://HOST:PORT or HOST:PORT" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", OVERLAP, "-o", "OUT"],
        ["plan", "PLAN"],
        ["golden", "check", OVERLAP, "--dir", "OUT"],
    ],
)
def test_scheduler_and_jobs_together_are_refused(
    argv: list[object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-j`` sets local processes; with ``--scheduler`` the cluster's workers run: exit 2."""
    plan_doc = write_doc(tmp_path, training_doc())
    replaced = [tmp_path / "out" if a == "OUT" else plan_doc if a == "PLAN" else a for a in argv]
    code, _, err = _run([*replaced, "--scheduler", "local:2", "-j", "2"], capsys)
    assert code == 2
    assert "--scheduler: given with -j" in err and "Traceback" not in err


def _closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_scheduler_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listening at the address: one line naming --scheduler and the address, after
    the connection timeout (here 1 s), and no output folder."""
    monkeypatch.setattr(dask_runner, "CONNECT_TIMEOUT_S", 1.0)
    port = _closed_port()
    code, _, err = _run(
        ["compare", OVERLAP, "-o", tmp_path / "out", "--scheduler", f"127.0.0.1:{port}"], capsys
    )
    assert code == 2
    assert err.startswith(
        f"clustersim: error: --scheduler: cannot reach the Dask scheduler at "
        f"tcp://127.0.0.1:{port} within 1 s"
    )
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_command_line_does_not_import_dask() -> None:
    """Dask is imported only when --scheduler is given."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = (
        "import sys, clustersim.cli; clustersim.cli.build_parser(); "
        "print([m for m in ('distributed', 'dask') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=env, text=True, capture_output=True)
    assert proc.stdout == "[]\n", proc.stderr


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (Linux's /proc; none once it has ended)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            pass
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGINT, 130, "clustersim: interrupted\n"),
        (signal.SIGTERM, 143, "clustersim: terminated\n"),
    ],
)
def test_a_signal_to_a_local_dask_sweep_is_one_line(
    tmp_path: Path, sig: int, code: int, line: str
) -> None:
    """Ctrl-C (or SIGTERM) signals the whole process group while the local cluster's workers
    simulate: one line, the signal's exit code, no worker traceback, no output folder, no
    worker left behind."""
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("needs Linux's /proc/PID/task/PID/children")
    out = tmp_path / "cmp"
    seeds = ",".join(map(str, range(16)))
    argv = ["compare", SLOW, "--set", f"seed={seeds}", "--scheduler", "local:2", "-o", out, "-q"]
    proc = _subprocess(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while len(workers := [g for c in _children(proc.pid) for g in _children(c)]) < 2:
        assert proc.poll() is None, "the sweep ended before its workers started"
        assert time.monotonic() < deadline, "the sweep never started its workers"
        time.sleep(0.05)
    time.sleep(2)  # the workers join and start simulating
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (code, line)
    assert not out.exists() and _siblings(out) == []
    assert not [pid for pid in workers if _running(pid)]


def test_a_worker_with_another_clustersim_version_is_refused(
    scheduler: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers must run the command's clustersim version (else results could differ): exit 2
    naming --scheduler, the worker and both versions, before anything is simulated."""
    monkeypatch.setattr(dask_runner, "__version__", "9.9.9")
    code, _, err = _run(
        ["compare", OVERLAP, "-o", tmp_path / "out", "--scheduler", scheduler], capsys
    )
    assert code == 2
    assert err.startswith("clustersim: error: --scheduler: worker tcp://127.0.0.1:")
    assert f"of {scheduler} has clustersim 0.1.0 (allowed: clustersim 9.9.9 installed" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "local_workers", "address"),
    [
        ("local:3", 3, ""),
        ("tcp://scheduler-host:8786", 0, "tcp://scheduler-host:8786"),
        ("localhost:8786", 0, "tcp://localhost:8786"),
        ("10.0.0.7:8786", 0, "tcp://10.0.0.7:8786"),
        ("[::1]:8786", 0, "tcp://[::1]:8786"),
    ],
)
def test_scheduler_forms(text: str, local_workers: int, address: str) -> None:
    """``local:N``, ``tcp://HOST:PORT`` and ``HOST:PORT`` (Dask's default protocol is tcp)."""
    parsed = dask_runner.parse_scheduler(text)
    assert (parsed.local_workers, parsed.address) == (local_workers, address)


def test_something_else_at_the_address_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that answers, but not in Dask's protocol (here a web server's reply): one
    line naming --scheduler and the address, no traceback."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4)
                time.sleep(0.5)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        code, _, err = _run(
            ["compare", OVERLAP, "-o", tmp_path / "out", "--scheduler", f"127.0.0.1:{port}"],
            capsys,
        )
        thread.join(timeout=10)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("clustersim: error: --scheduler: ")
    assert f"tcp://127.0.0.1:{port}" in err
