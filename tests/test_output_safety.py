"""Outputs are trusted: bad paths refused before work, folders replaced whole, nothing half-written.

Output paths of every command are checked before simulating (exit 2, one line
naming the argument, the path and what is allowed); scenario files must be
regular files of at most 16 MiB (a pipe is refused without blocking); a write
that fails afterwards (disk full) exits 1 in one line and leaves the old folder;
a run folder is replaced as a unit, so SIGINT, SIGKILL or two runs at once leave
the old complete set or a new complete set, never a mix.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import clustersim
from clustersim.cli import main
from clustersim.errors import ScenarioError, WriteError
from clustersim.outputs import atomic, devices, folder, gantt, paths, run_folder
from clustersim.outputs.atomic import write_atomic
from clustersim.outputs.folder import leftovers, remove_leftovers, replace_folder
from clustersim.outputs.paths import check_output_folder

from .conftest import SCENARIOS

D1 = SCENARIOS / "validation" / "d1_one_gpu_aggregates.yaml"
"""One GPU, no Gantt chart: four files, about a second."""
TRAINING = SCENARIOS / "pipeline" / "1f1b_m32.yaml"  # fits in memory: no warning on stderr
"""A training run that fits in memory: six files (Gantt chart included)."""
SLOW_WRITE = SCENARIOS / "zero" / "gpt3_1.3b_stage1.yaml"
"""Half a second of simulation, then a few seconds of writing (53,000 records, a Gantt chart)."""
ROOT = Path(clustersim.__file__).resolve().parent.parent
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _files(folder_path: Path) -> dict[str, bytes]:
    """Name -> bytes of every entry of ``folder_path``."""
    return {p.name: p.read_bytes() for p in sorted(folder_path.iterdir())}


def _siblings(target: Path) -> list[str]:
    """Names beside ``target`` that are not ``target`` (temporary folders, leftovers)."""
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


HEAR_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""First line of a child's program: SIGINT raises KeyboardInterrupt.  A shell starting the
test suite in the background (``make test &``, a CI runner) leaves SIGINT ignored,
children inherit that, and Python then keeps ignoring it, as it should for a user's
background job: the tests that press Ctrl-C need it heard.  Set by the child itself, not
by a ``preexec_fn``, which would run Python in a fork of the pytest process before the
exec."""

_CLUSTERSIM_MAIN = (
    HEAR_SIGINT
    + "import runpy; runpy.run_module('clustersim', run_name='__main__', alter_sys=True)"
)
"""``python -m clustersim``, SIGINT heard."""


def _subprocess(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """``python -m clustersim ARGV`` of this checkout, its outputs captured, SIGINT heard,
    in a session of its own (made before any Python runs in the child): the signals a test
    sends go to it and its workers only, and none sent to the test run's process group
    reaches it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", _CLUSTERSIM_MAIN, *map(str, argv)]
    kwargs.setdefault("start_new_session", True)
    return subprocess.Popen(command, env=env, text=True, **kwargs)


@pytest.fixture
def nothing_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation fails the test: the command had to refuse before working."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("simulated before the output path was checked")

    import clustersim.api
    import clustersim.studies.collective_sweep
    import clustersim.studies.golden.checking
    import clustersim.studies.golden.recording
    import clustersim.studies.plan
    import clustersim.studies.sweep

    monkeypatch.setattr(clustersim.api, "simulate", refuse)
    monkeypatch.setattr(clustersim.studies.sweep, "run_jobs", refuse)
    monkeypatch.setattr(clustersim.studies.plan, "run_candidates", refuse)
    monkeypatch.setattr(clustersim.studies.golden.recording, "measure_all", refuse)
    monkeypatch.setattr(clustersim.studies.golden.checking, "measure_all", refuse)
    monkeypatch.setattr(clustersim.studies.collective_sweep, "sweep", refuse)


COLLECTIVE = ["collective", "--op", "allreduce", "--devices", "4", "--bytes", "1MB"]
OUTPUT_ARGUMENTS = {
    "run -o": (["run", D1, "-o"], "-o"),
    "compare -o": (["compare", D1, "--set", "seed=0,1", "-o"], "-o"),
    "plan -o": (["plan", D1, "-o"], "-o"),
    "golden record --dir": (["golden", "record", D1, "--dir"], "--dir"),
    "collective --csv": ([*COLLECTIVE, "--csv"], "--csv"),
    "collective --plot": ([*COLLECTIVE, "--plot"], "--plot"),
}
"""Every output argument: the command line up to its value, and its name in messages."""


@pytest.mark.parametrize("case", sorted(OUTPUT_ARGUMENTS))
def test_output_under_a_file_is_refused_before_work(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """A path through a file exits 2 before simulating, naming the argument and the file."""
    argv, flag = OUTPUT_ARGUMENTS[case]
    (tmp_path / "afile").write_text("mine\n")
    code, err = _run([*argv, tmp_path / "afile" / "out"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{flag}: " in err and f"'{tmp_path / 'afile'}' is a file, not a folder" in err
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("case", sorted(OUTPUT_ARGUMENTS))
def test_output_name_too_long_is_refused_before_work(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """A name of 300 bytes (NAME_MAX is 255) exits 2 before simulating; nothing is made."""
    argv, flag = OUTPUT_ARGUMENTS[case]
    code, err = _run([*argv, tmp_path / ("x" * 300)], capsys)
    assert code == 2
    assert f"{flag}: " in err and "has a name of 300 bytes" in err
    assert "names of at most 255 bytes" in err
    assert list(tmp_path.iterdir()) == []


def test_output_path_too_long_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """A path of more than PATH_MAX (4096) bytes, each name legal, exits 2 before work."""
    deep = tmp_path.joinpath(*["d" * 200] * 25)
    code, err = _run(["run", D1, "-o", deep], capsys)
    assert code == 2 and "bytes long as an absolute path" in err and "at most" in err


def test_output_that_is_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """-o naming an existing file: exit 2, the file untouched."""
    (tmp_path / "out").write_text("mine\n")
    code, err = _run(["run", D1, "-o", tmp_path / "out"], capsys)
    assert code == 2 and "-o: " in err and "exists and is a file, not a folder" in err
    assert (tmp_path / "out").read_text() == "mine\n"


def test_output_file_that_is_a_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """collective --csv naming a folder: exit 2 before simulating."""
    code, err = _run([*COLLECTIVE, "--csv", tmp_path], capsys)
    assert code == 2 and "--csv: " in err and "is a folder, not a file" in err


@pytest.mark.skipif(AS_ROOT, reason="root writes into a mode-555 folder; see the EROFS test")
def test_read_only_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """-o inside a folder this user cannot write: exit 2 before simulating."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, err = _run(["run", D1, "-o", locked / "out"], capsys)
    finally:
        locked.chmod(0o755)
    assert code == 2 and "is not writable" in err and "Permission denied" in err


def test_read_only_file_system_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing is tried for real (a folder made and removed), which root cannot bypass on a
    read-only file system: EROFS from that probe is the refusal's reason."""

    def read_only(path: Any, *args: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(paths.os, "mkdir", read_only)
    with pytest.raises(ScenarioError) as caught:
        check_output_folder(tmp_path / "out", "-o")
    assert "-o: " in str(caught.value) and "is not writable" in str(caught.value)
    assert "Read-only file system" in str(caught.value)


def test_folder_with_other_files_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """A folder holding a file clustersim does not write (``-o ~``) is refused, untouched."""
    home = tmp_path / "home"
    (home / "photos").mkdir(parents=True)
    (home / "notes.txt").write_text("keep me\n")
    code, err = _run(["run", D1, "-o", home], capsys)
    assert code == 2 and "holds entries clustersim does not write (notes.txt, photos)" in err
    assert (home / "notes.txt").read_text() == "keep me\n" and (home / "photos").is_dir()


def test_current_folder_is_not_replaced(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    nothing_simulated: None,
) -> None:
    """``-o .`` (even empty) would replace the folder the process stands in: refused."""
    monkeypatch.chdir(tmp_path)
    code, err = _run(["run", D1, "-o", "."], capsys)
    assert code == 2 and "is the current folder or holds it" in err


def test_output_names_cover_every_writer() -> None:
    """The names a replaced folder may hold are those the commands write."""
    written = {*run_folder.TEXT_FILES, run_folder.RESOLVED_SCENARIO, *gantt.GANTT_FILES}
    written |= {*run_folder.TIMELINE_FILES, devices.DEVICES_CSV}  # folded, --timeline parquet
    written |= {"report.html", devices.DEVICES_CSV}  # clustersim report
    assert written == set(paths.RUN_FILES)
    assert paths.OUTPUT_FILES == {
        *paths.RUN_FILES,
        *paths.COMPARE_FILES,
        *paths.PLAN_FILES,
        *paths.CHOOSE_FILES,
    }


def test_an_output_subfolder_may_hold_only_its_own_files(tmp_path: Path) -> None:
    """choose's plans/ holds NAME.csv files: such a folder is clustersim's; another file in
    it, a folder in it, or a subfolder of another name is not."""
    (tmp_path / "choose.csv").write_text("x")
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "h100-rail.csv").write_text("x")
    assert paths.foreign_entries(tmp_path) == []
    (plans / "notes.txt").write_text("x")
    (plans / "sub").mkdir()
    (tmp_path / "other").mkdir()
    assert paths.foreign_entries(tmp_path) == ["other", "plans/notes.txt", "plans/sub"]


# --------------------------------------------------------------------------- input files


def test_fifo_scenario_is_refused_without_blocking(tmp_path: Path) -> None:
    """A named pipe as the scenario: exit 2 at once, not a read waiting for a writer."""
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    proc = _subprocess(["run", fifo, "-o", tmp_path / "out"], stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 2 and err.count("\n") == 1
    assert err.startswith(f"clustersim: error: {fifo}: <top level>: is a named pipe")
    assert "(allowed: a regular YAML file)" in err


def test_stdin_scenario_is_refused(tmp_path: Path) -> None:
    """``/dev/stdin`` fed by a pipe is a pipe too: refused, the pipe left unread."""
    proc = _subprocess(["validate", "/dev/stdin"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate("name: x\n", timeout=30)
    assert proc.returncode == 2 and "is a named pipe, not a regular file" in err


@pytest.mark.parametrize(
    ("name", "expected"),
    [("folder", "is a folder, not a scenario file"), ("/dev/null", "is a device")],
)
def test_folder_or_device_scenario_is_refused(
    name: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder or a device as the scenario: exit 2, the path and what it is in the message."""
    path = tmp_path / name if name == "folder" else Path(name)
    if name == "folder":
        path.mkdir()
    code, err = _run(["run", path, "-o", tmp_path / "out"], capsys)
    assert code == 2 and expected in err and str(path) in err


def test_oversized_scenario_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 17 MiB file (sparse: nothing to read) is refused by its size, never opened."""
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(17 * 2**20)
    monkeypatch.setattr(os, "open", lambda *a, **k: pytest.fail("the file was opened"))
    code, err = _run(["run", big, "-o", tmp_path / "out"], capsys)
    assert code == 2 and "larger than 16 MiB" in err and "at most 16,777,216 bytes" in err


# --------------------------------------------------------------------------- failed writes


def _disk_full_after(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """Every file written through :mod:`clustersim.outputs.atomic` after the first ``files``
    fails with ENOSPC at its first write."""
    real = os.fdopen
    opened = [0]

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        fh = real(fd, *args, **kwargs)
        opened[0] += 1
        if opened[0] > files:

            def full(data: Any) -> int:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            fh.write = full
        return fh

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)


def test_disk_full_keeps_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ENOSPC on the third file: exit 1, one line naming the file, the old folder as it was
    and no temporary folder left."""
    out = tmp_path / "out"
    assert main(["run", str(TRAINING), "-o", str(out), "-q"]) == 0
    before = _files(out)
    capsys.readouterr()
    _disk_full_after(monkeypatch, 2)
    code, err = _run(["run", D1, "-o", out, "-q"], capsys)
    assert code == 1
    assert err == f"clustersim: error: cannot write {out / 'links.csv'}: No space left on device\n"
    assert _files(out) == before
    assert _siblings(out) == []


def test_disk_full_in_one_file_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single file (golden, report.html, --csv): WriteError, also an OSError; old bytes kept."""
    target = tmp_path / "golden.json"
    target.write_text("old\n")
    _disk_full_after(monkeypatch, 0)
    with pytest.raises(WriteError) as caught:
        write_atomic(target, "new\n")
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    assert str(caught.value) == f"cannot write {target}: No space left on device"
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_interrupt_while_writing_keeps_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the Gantt chart is drawn: exit 130, old folder whole, nothing left over."""
    out = tmp_path / "out"
    assert main(["run", str(D1), "-o", str(out), "-q"]) == 0
    before = _files(out)

    def interrupted(*args: Any) -> list[Path]:
        raise KeyboardInterrupt

    monkeypatch.setattr(gantt, "write_gantt", interrupted)
    capsys.readouterr()
    code, err = _run(["run", TRAINING, "-o", out, "-q"], capsys)
    assert (code, err) == (130, "clustersim: interrupted\n")
    assert _files(out) == before and _siblings(out) == []


# --------------------------------------------------------------------------- whole folders


def test_rerun_leaves_no_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42's sequence: a training run, its report (report.html, devices.csv), then a
    run of another kind (a program workload, no chart) into the same folder: the folder
    holds exactly the new run's five files, byte for byte those of the same run written
    into a new folder (no old scenario.resolved.yaml, summary.json or chart beside them)."""
    out = tmp_path / "out"
    assert main(["run", str(TRAINING), "-o", str(out), "-q"]) == 0
    assert main(["report", str(out)]) == 0
    old = _files(out)
    assert {"gantt.png", "gantt.svg", "report.html", "devices.csv"} <= set(old)
    assert main(["run", str(D1), "-o", str(out), "-q"]) == 0
    assert main(["run", str(D1), "-o", str(tmp_path / "fresh"), "-q"]) == 0
    assert sorted(_files(out)) == [
        "links.csv",
        "scenario.resolved.yaml",
        "summary.json",
        "timeline.csv",
        "trace.json",
    ]
    assert _files(out) == _files(tmp_path / "fresh")
    assert b"name: d1-one-gpu-aggregates" in _files(out)["scenario.resolved.yaml"]
    assert _files(out)["scenario.resolved.yaml"] != old["scenario.resolved.yaml"]
    assert _siblings(out) == ["fresh"]


def test_a_run_folder_with_a_foreign_file_is_kept_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_simulated: None
) -> None:
    """An earlier run's folder with its report and a file of the user's: the next run is
    refused before it simulates (exit 2, naming the file) and the folder keeps every file,
    the old run's and the user's, as it was."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("summary.json", "scenario.resolved.yaml", "report.html", "gantt.png"):
        (out / name).write_text(f"old {name}\n")
    (out / "notes.txt").write_text("keep me\n")
    before = _files(out)
    code, err = _run(["run", D1, "-o", out, "-q"], capsys)
    assert code == 2 and "holds entries clustersim does not write (notes.txt)" in err
    assert _files(out) == before and _siblings(out) == []


def test_leftovers_of_dead_writers_are_removed(tmp_path: Path) -> None:
    """Temporary siblings of a dead process go; a living writer's stay; when the destination
    is missing, a folder set aside by a writer killed mid-swap is put back first."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid, alive_pid = int(dead.stdout), os.getppid()
    out = tmp_path / "out"
    for kind, pid in (("tmp", dead_pid), ("old", dead_pid), ("tmp", alive_pid)):
        leftover = tmp_path / f".out.{kind}-{pid}-00ff00ff"
        leftover.mkdir()
        (leftover / "summary.json").write_text(kind)
    remove_leftovers(out)
    assert (out / "summary.json").read_text() == "old"  # put back: the destination was missing
    assert [(path.name, pid) for path, _, pid in leftovers(out)] == [
        (f".out.tmp-{alive_pid}-00ff00ff", alive_pid)
    ]


def test_swap_in_two_steps_is_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where folders cannot be exchanged in one step, the two renames replace it whole too."""
    monkeypatch.setattr(folder, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    replace_folder(out, lambda f: [write_atomic(f / "plan.md", "old\n").name])
    replace_folder(out, lambda f: [write_atomic(f / "plan.csv", "new\n").name])
    assert _files(out) == {"plan.csv": b"new\n"} and _siblings(out) == []


def test_symlink_and_mode_are_kept(tmp_path: Path) -> None:
    """-o through a symlink replaces the folder it names (the link stays a link); the new
    folder has the old one's permission bits."""
    real = tmp_path / "real"
    real.mkdir(mode=0o750)
    real.chmod(0o750)
    (tmp_path / "link").symlink_to(real)
    written = replace_folder(tmp_path / "link", lambda f: [write_atomic(f / "plan.md", "x").name])
    assert written == [tmp_path / "link" / "plan.md"]
    assert (tmp_path / "link").is_symlink() and (real / "plan.md").read_text() == "x"
    assert real.stat().st_mode & 0o777 == 0o750


# --------------------------------------------------------------------------- signals, races


class _Stop(BaseException):
    """What the test's SIGTERM handler raises (as clustersim's raises Terminated)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def test_a_signal_just_after_the_temporary_folder_is_made_still_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM handled in the instant after the temporary folder is made (found under load
    by test_sigterm_mid_write_keeps_old_outputs, and again under xdist, whose other threads
    receive a signal the main thread holds, so that its handler runs at once): the folder
    is removed all the same, and the old folder stays whole."""
    out = tmp_path / "out"
    replace_folder(out, lambda f: [write_atomic(f / "plan.md", "old\n").name])
    made = folder._made

    def made_then_signalled(path: Path) -> bool:
        done = made(path)
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before this returns
        return done

    monkeypatch.setattr(folder, "_made", made_then_signalled)
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        with pytest.raises(_Stop):
            replace_folder(out, lambda f: [write_atomic(f / "plan.md", "new\n").name])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert _files(out) == {"plan.md": b"old\n"} and _siblings(out) == []


def test_a_taken_temporary_name_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A temporary name that exists already (a leftover with this process's id) is left
    alone while a fresh one is drawn, and the write completes."""
    out = tmp_path / "out"
    names = iter(["aaaa0001", "aaaa0001", "bbbb0002"])
    monkeypatch.setattr(folder.secrets, "token_hex", lambda n: next(names))
    taken = folder._sibling_name(out, "tmp")
    taken.mkdir(parents=True)
    (taken / "keep").write_text("x")
    written = replace_folder(out, lambda f: [write_atomic(f / "plan.md", "new\n").name])
    assert written == [out / "plan.md"] and _files(out) == {"plan.md": b"new\n"}
    assert (taken / "keep").read_text() == "x"


def _when_writing(proc: subprocess.Popen[str], out: Path, timeout_s: float = 60) -> None:
    """Wait until ``proc`` has made its temporary sibling of ``out`` (it is writing files)."""
    deadline = time.monotonic() + timeout_s
    while not any(kind == "tmp" and pid == proc.pid for _, kind, pid in leftovers(out)):
        assert proc.poll() is None, "the run ended before it wrote anything"
        assert time.monotonic() < deadline, "the run never started writing"
        time.sleep(0.01)


@pytest.fixture
def old_run(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A finished run folder and its bytes."""
    out = tmp_path / "out"
    assert main(["run", str(D1), "-o", str(out), "-q"]) == 0
    return out, _files(out)


def test_sigint_mid_write_keeps_old_outputs(old_run: tuple[Path, dict[str, bytes]]) -> None:
    """SIGINT to a real `clustersim run` while it writes: exit 130 with one line, the old
    outputs byte for byte, no temporary folder."""
    out, before = old_run
    proc = _subprocess(["run", SLOW_WRITE, "-o", out, "-q"], stderr=subprocess.PIPE)
    _when_writing(proc, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "clustersim: interrupted\n")
    assert _files(out) == before and _siblings(out) == []


def test_sigkill_mid_write_keeps_old_outputs(
    old_run: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL while writing: the old outputs byte for byte; the next run removes the dead
    process's temporary folder."""
    out, before = old_run
    proc = _subprocess(["run", SLOW_WRITE, "-o", out, "-q"], stderr=subprocess.DEVNULL)
    _when_writing(proc, out)
    proc.kill()
    proc.wait(timeout=60)
    assert _files(out) == before
    assert [pid for _, _, pid in leftovers(out)] == [proc.pid]
    assert main(["run", str(D1), "-o", str(out), "-q"]) == 0
    assert _files(out) == before and _siblings(out) == []


def test_last_writer_to_finish_wins(tmp_path: Path) -> None:
    """Two writers of one folder, both writing at once: each swap is whole, the later one stays."""
    out = tmp_path / "out"
    both_writing = threading.Barrier(2)
    first_done = threading.Event()
    seen_between: list[dict[str, bytes]] = []

    def writer(name: str, text: str, wait: threading.Event | None) -> None:
        def fill(folder_path: Path) -> list[str]:
            both_writing.wait(timeout=30)
            if wait is not None:
                wait.wait(timeout=30)
            return [write_atomic(folder_path / name, text).name]

        replace_folder(out, fill)
        if wait is None:
            seen_between.append(_files(out))
            first_done.set()

    threads = [
        threading.Thread(target=writer, args=("plan.md", "first\n", None)),
        threading.Thread(target=writer, args=("compare.md", "second\n", first_done)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert seen_between == [{"plan.md": b"first\n"}]
    assert _files(out) == {"compare.md": b"second\n"} and _siblings(out) == []


def test_concurrent_runs_end_with_one_whole_set(tmp_path: Path) -> None:
    """Two runs into one folder at once: it ends holding one run's complete files."""
    expected = []
    for seed in (1, 2):
        reference = tmp_path / f"seed{seed}"
        assert main(["run", str(TRAINING), "--seed", str(seed), "-o", str(reference), "-q"]) == 0
        expected.append(_files(reference))
    out = tmp_path / "shared" / "out"
    runs = [
        _subprocess(["run", TRAINING, "--seed", seed, "-o", out, "-q"], stderr=subprocess.DEVNULL)
        for seed in (1, 2)
    ]
    assert [proc.wait(timeout=120) for proc in runs] == [0, 0]
    assert _files(out) in expected and _siblings(out) == []


def test_sigterm_mid_write_keeps_old_outputs(old_run: tuple[Path, dict[str, bytes]]) -> None:
    """SIGTERM (``kill``, ``timeout``, a batch scheduler) while writing: exit 143 with one
    line, the old outputs byte for byte, no temporary folder."""
    out, before = old_run
    proc = _subprocess(["run", SLOW_WRITE, "-o", out, "-q"], stderr=subprocess.PIPE)
    _when_writing(proc, out)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (143, "clustersim: terminated\n")
    assert _files(out) == before and _siblings(out) == []


SIGNAL_DURING_IMPORT = """
import builtins, os, signal, sys
from clustersim import console
real_import = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == "numpy":
        os.kill(os.getpid(), signal.{signal})
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting
sys.exit(console.main(["validate", sys.argv[1]]))
"""
"""A console entry whose import of the command line is interrupted by a signal: it sends
itself the signal as the command line's modules start importing numpy."""


@pytest.mark.parametrize(
    ("name", "code", "line"),
    [("SIGINT", 130, "clustersim: interrupted\n"), ("SIGTERM", 143, "clustersim: terminated\n")],
)
def test_signal_while_importing_is_one_line(name: str, code: int, line: str) -> None:
    """Ctrl-C or SIGTERM in the half second the command line takes to import: one line and
    the signal's exit code, not a traceback from the middle of an import."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    program = HEAR_SIGINT + SIGNAL_DURING_IMPORT.format(signal=name)
    proc = subprocess.run(
        [sys.executable, "-c", program, str(D1)],
        env=env,
        text=True,
        capture_output=True,
        start_new_session=True,
    )
    assert (proc.returncode, proc.stderr) == (code, line)


def test_console_entry_imports_nothing_heavy() -> None:
    """``clustersim.console`` (the console script) loads without numpy, SimPy or the
    command line, so its signal handling is in place before the slow imports."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = (
        "import sys, clustersim.console; "
        "print(sorted(m for m in ('numpy', 'simpy', 'clustersim.cli', 'clustersim.api') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=env, text=True, capture_output=True)
    assert proc.stdout == "[]\n", proc.stderr


def _when_children(proc: subprocess.Popen[str], count: int, timeout_s: float = 60) -> None:
    """Wait until ``proc`` has ``count`` child processes (its sweep's workers, read from
    Linux's /proc) and they have had half a second to start simulating."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.exists():
        pytest.skip("needs Linux's /proc/PID/task/PID/children")
    deadline = time.monotonic() + timeout_s
    while len(children.read_text().split()) < count:
        assert proc.poll() is None, "the sweep ended before its workers started"
        assert time.monotonic() < deadline, "the sweep never started its workers"
        time.sleep(0.01)
    time.sleep(0.5)


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGINT, 130, "clustersim: interrupted\n"),
        (signal.SIGTERM, 143, "clustersim: terminated\n"),
    ],
)
def test_signal_to_a_sweep_and_its_workers_is_one_line(
    tmp_path: Path, sig: int, code: int, line: str
) -> None:
    """Ctrl-C at a terminal signals the whole process group: compare's main process and its
    two worker processes.  One line, the signal's exit code, no worker traceback, no
    output folder."""
    out = tmp_path / "cmp"
    seeds = ",".join(map(str, range(16)))
    argv = ["compare", SLOW_WRITE, "--set", f"seed={seeds}", "-j", "2", "-o", out, "-q"]
    proc = _subprocess(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    _when_children(proc, 2)
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (code, line)
    assert not out.exists() and _siblings(out) == []
