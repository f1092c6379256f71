"""The one process pool of the studies: order, progress, workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustersim.studies import run_all, worker_count

from .conftest import ROOT
from .test_output_safety import HEAR_SIGINT


def _power(base: int, exponent: int) -> int:
    return base**exponent


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_call_order(workers: int) -> None:
    calls = [(b, 3) for b in range(7)]
    seen: list[tuple[int, int]] = []
    out = run_all(_power, calls, workers, lambda d, t: seen.append((d, t)), announce=True)
    assert out == [b**3 for b in range(7)]
    assert seen == [(i, 7) for i in range(8)]


def test_worker_count_bounds() -> None:
    assert worker_count(8, 3) == 3
    assert worker_count(2, 0) == 1
    assert worker_count(1, 50) == 1
    assert worker_count(None, 1) == 1


def test_a_failing_run_raises_in_the_caller() -> None:
    with pytest.raises(ZeroDivisionError):
        run_all(divmod, [(1, 1), (1, 0)], 2)


_QUEUED_AFTER_CTRL_C = (
    HEAR_SIGINT
    + """
import sys, time
from clustersim.studies import run_all


def slow(i):
    with open(sys.argv[1], "a") as log:
        log.write(f"{i}\\n")
    time.sleep(5.0)
    return i


try:
    run_all(slow, [(i,) for i in range(12)], 2)
except KeyboardInterrupt:
    sys.exit(130)
"""
)
"""Twelve runs of 5 s on two workers, each run writing its number when it starts."""


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_starts_no_run_queued_to_a_worker(tmp_path: Path) -> None:
    """Ctrl-C signals the whole process group: the pool's two workers stop their runs, and
    start none of those the pool had already queued to them (before, each went on to a
    queued run and Ctrl-C waited for whole runs: 2 s for compare's, minutes at scale)."""
    log = tmp_path / "started.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", _QUEUED_AFTER_CTRL_C, str(log)]
    proc = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not log.exists() or len(log.read_text().split()) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert sorted(map(int, log.read_text().split())) == [0, 1]
