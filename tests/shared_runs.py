"""One simulation of a shipped scenario, shared by every test that reads it (issue 42).

The golden walk (tests/test_golden.py), the invariant walk (tests/test_invariants.py) and
the tests that read a shipped scenario's summary all ask :func:`summary` for it.  The first
asker simulates; every later one, in its own process or in another pytest-xdist worker,
reads the summary the first one wrote.  A run is keyed by the scenario file's bytes and by
whether its invariants were checked, so two askers share a run only when they would have
run the very same thing; a test that changes the scenario (``--set``, a copy it edits) runs
its own simulation as before.

Where the runs are kept: a folder made for this test session by the controlling process
(:func:`start_session`, called from conftest.py's ``pytest_configure``) and named to the
xdist workers through the environment variable :data:`RUNS_ENV`; it is removed when the
session ends.  Nothing outlives a session, so a code change can never be answered by a
stale run.  Two workers asking for one run at once are serialised by a lock file: the
second waits and reads.

A run that raises is not kept: each asker simulates it again and sees the error itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:  # POSIX; elsewhere runs are not shared between processes (each computes its own)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

RUNS_ENV = "CLUSTERSIM_TEST_SHARED_RUNS"
"""The environment variable naming this session's folder of shared runs."""

UNCHECKED = frozenset(
    {
        "megatron/table1_1t.yaml",
        "megatron/table1_529.6b.yaml",
        "production/mosaic_mpt70b_a100_64.yaml",
        "production/nemo2606_llama31_405b_1024_fp8.yaml",
        "production/ds_gpt175b_256.yaml",
        "production/llama3_405b_8192.yaml",
        "production/llama3_405b_16384.yaml",
        "production/nemotron_15b_2304.yaml",
        *(
            f"production/dgxc_{run}_{precision}.yaml"
            for run in (
                "gpt3_175b_2048",
                "llama31_405b_2304",
                "llama31_70b_2048",
                "nemotron4_15b_2048",
                "nemotron4_340b_2048",
            )
            for precision in ("bf16", "fp8")
        ),
        "scale/dense_131k.yaml",
        "scale/gpt3_175b_16k.yaml",
        "calibration/h100_foundry_mpt70b_32_bf16.yaml",
        "calibration/h100_foundry_mpt70b_64_bf16.yaml",
        *(
            f"calibration/{run}_fp8.yaml"
            for run in (
                "b200_nemo2502_llama3_8b_8",
                "b200_nemo2502_nemotron4_15b_64",
                "b200_nemo2502_llama3_70b_64",
                "b200_nemo2502_llama31_405b_128",
                "b200_nemo2502_nemotron4_340b_128",
                "b200_nemo2502_gpt3_175b_512",
                "gb200_nemo2504_llama3_8b_8",
                "gb200_nemo2504_nemotron4_15b_64",
                "gb200_nemo2504_llama3_70b_64",
                "gb200_nemo2504_llama31_405b_128",
                "gb200_nemo2504_nemotron4_340b_128",
                "gb200_nemo2504_gpt3_175b_128",
            )
        ),
    }
)
"""Shipped scenarios (relative to scenarios/) whose shared run leaves the invariants
unchecked: checking adds about a third to runs of many seconds.  They are checked
elsewhere: Megatron's two largest Table 1 rows (a million operations each) and the FSDP run
of 64 A100s by ``clustersim reproduce``'s runs of the same engine paths on their smaller
siblings; the production family's runs of 1,024 GPUs and more and its
ZeRO-3 run of 256 (checking costs up to 5x there: thousands of flows at every instant) by its
runs of 64-512 GPUs of the same schedules, context and tensor parallelism and ZeRO-3; the scale scenarios (16,384 and 131,072 GPUs) on the
smaller scenarios of the same shapes; the H100 calibration's FSDP runs of MPT-70B (32 and 64
GPUs, like the A100 one) by its FSDP runs of 8 GPUs; the B200 and GB200 calibrations' dense
fp8 runs (8-512 GPUs: tensor, pipeline and context parallelism, interleaved 1F1B) by the
production family's checked NeMo fp8 runs of the same schedules on 64-512 H100s."""


def checked(path: Path) -> bool:
    """Whether the shared run of the shipped scenario at ``path`` checks the invariants: all
    but :data:`UNCHECKED`, the cluster examples of scenarios/clusters/ (their fabrics are
    checked under the scenarios that use them) and, of scenarios/ps_vs_ring/, all but the
    quick resnet50_ring (the same strategies run checked in scenarios/parameter_server/)."""
    name = f"{path.parent.name}/{path.name}"
    if name in UNCHECKED or path.parent.name == "clusters":
        return False
    return path.parent.name != "ps_vs_ring" or path.name == "resnet50_ring.yaml"


def start_session() -> None:
    """In the controlling pytest process: make this session's folder and name it in
    :data:`RUNS_ENV` (inherited by the xdist workers, started after this)."""
    os.environ[RUNS_ENV] = tempfile.mkdtemp(prefix="clustersim-test-runs-")


def end_session() -> None:
    """In the controlling pytest process: remove this session's folder."""
    folder = os.environ.pop(RUNS_ENV, "")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def key(path: Path, check: bool) -> str:
    """The key of a run of the scenario file at ``path``: its bytes and the check flag."""
    digest = hashlib.sha256(path.read_bytes())
    digest.update(b"checked" if check else b"unchecked")
    return digest.hexdigest()


def summary(path: Path, check: bool = True) -> dict[str, Any]:
    """summary.json's keys of a run of the scenario file ``path`` with the invariants checked
    (``check``) or not; simulated once per session, read from its file by every caller (a
    fresh copy each time).  Nothing is kept in the process: the summaries of the scale
    scenarios are tens of megabytes of small objects, and a heap that holds them makes
    every later garbage collection of the worker slower, and so every later test."""
    name = key(path, check)
    return json.loads(_summary_text(path, check, name))


SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MARGIN = 10
"""How far inside the default work limit every shipped scenario's estimate stays."""


def every_scenario_file() -> list[Path]:
    """Every YAML file under scenarios/ (candidates files of ``clustersim choose`` too)."""
    return sorted(SCENARIOS.rglob("*.yaml"))


def validated_every_scenario() -> tuple[int, str, str]:
    """:func:`validated` of :func:`every_scenario_file` with a work limit :data:`MARGIN`
    times below the default: exit 0 says every file is valid and every run's estimate
    keeps that margin."""
    from clustersim.budget import DEFAULT_MAX_EVENTS

    return validated(every_scenario_file(), DEFAULT_MAX_EVENTS // MARGIN)


def validated(files: list[Path], max_events: int) -> tuple[int, str, str]:
    """Exit code, standard output and standard error of ``clustersim validate --max-events
    MAX_EVENTS FILES...``, run once per session (tests/test_cli.py and
    tests/test_work_limits.py read the same walk over every shipped scenario)."""
    argv = ["validate", "--max-events", str(max_events), *map(str, files)]
    name = hashlib.sha256("\0".join(argv).encode()).hexdigest()
    for path in files:
        name = hashlib.sha256(name.encode() + path.read_bytes()).hexdigest()
    code, out, err = json.loads(_shared_text(name, lambda: _command(argv)))
    return code, out, err


def _command(argv: list[str]) -> str:
    """``clustersim ARGV`` in this process: [exit code, stdout, stderr] as JSON text."""
    import io

    from clustersim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return json.dumps([code, out.getvalue(), err.getvalue()])


def shared_json(what: str, make: Callable[[], Any]) -> Any:
    """``make()`` (anything JSON writes and reads back as it was: floats by their shortest
    repr, exactly) made once per session for every caller named ``what`` -- a text that
    names all the inputs of ``make``, such as the scenario document it simulates -- and
    read from its file by every later caller, in this process or another worker."""
    name = hashlib.sha256(what.encode()).hexdigest()
    return json.loads(_shared_text(name, lambda: json.dumps(make())))


def shared_busbw(busbw_GBps: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`clustersim.validation.nccl_tests.busbw_GBps` (given, so that the module's name
    can be patched with the result) made once per session: several published figures share
    a point (two H100 16 GiB sources; AWS p4d's 1 GiB in two test files), and each worker
    simulated it (up to 2.5 s a point)."""
    from clustersim.validation.nccl_tests import dgx_scenario

    def shared(
        kind: str, nodes: int, size_bytes: float, forced: tuple[str, str] | None = None
    ) -> Any:
        document = dgx_scenario(kind, nodes, size_bytes, forced)
        what = "nccl-tests busbw " + json.dumps(document, sort_keys=True)
        value = shared_json(what, lambda: busbw_GBps(kind, nodes, size_bytes, forced))
        return tuple(value) if isinstance(value, list) else value

    return shared


GOLDEN_ONLY = frozenset({"scale/dense_131k.yaml"})
"""Shipped scenarios (relative to scenarios/) whose run only the golden walk reads: it takes
their golden metrics from the run's typed summary in its own process, as ``clustersim
golden check`` does, instead of the summary's text.  The 131,072-GPU run's summary is 84 MB
of JSON: writing, reading and parsing it again cost 3.6 CPU-s, a fifth of the test.  A
test that reads one of these through :func:`summary` still gets it (simulated again)."""


def golden_measured(path: Path, check: bool) -> dict[str, Any]:
    """``{"scenario": name, "metrics": golden metrics}`` of the shared run of the shipped
    scenario at ``path`` (:func:`clustersim.studies.golden.metrics_of`); for
    :data:`GOLDEN_ONLY`, of ``clustersim golden check``'s own run of it
    (:func:`clustersim.studies.golden.measure`), the invariants checked or not (``check``)
    whatever the environment says."""
    from clustersim.studies.golden import measure, metrics_of

    if f"{path.parent.name}/{path.name}" not in GOLDEN_ONLY:
        found = summary(path, check)
        return {"scenario": found["scenario"], "metrics": metrics_of(found)}
    with _check_env(check):
        measured = measure(path)
    return {"scenario": measured["scenario"], "metrics": measured["metrics"]}


def _summary_text(path: Path, check: bool, name: str) -> str:
    return _shared_text(name, lambda: _simulate(path, check))


def _shared_text(name: str, make: Callable[[], str]) -> str:
    """The text stored under ``name`` in this session's folder, made by ``make`` (and
    stored) by the first process to ask; without a folder, made every time."""
    folder = os.environ.get(RUNS_ENV)
    if not folder:
        return make()
    stored = Path(folder) / f"{name}.json"
    with _locked(Path(folder) / f"{name}.lock"):
        if stored.is_file():
            return stored.read_text()
        text = make()
        partial = stored.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, stored)
        return text


def _simulate(path: Path, check: bool) -> str:
    """The text of summary.json of one run, the invariants checked or not whatever the
    environment says."""
    from clustersim.api import simulate

    with _check_env(check):
        return simulate(path, check=check).summary_json()


@contextlib.contextmanager
def _check_env(check: bool) -> Iterator[None]:
    """The invariant checker's environment variable set to ``check`` meanwhile."""
    from clustersim.invariants import CHECK_ENV

    before = os.environ.get(CHECK_ENV)
    os.environ[CHECK_ENV] = "1" if check else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CHECK_ENV, None)
        else:
            os.environ[CHECK_ENV] = before


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (made if missing)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
