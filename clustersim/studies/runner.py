"""The one process pool of clustersim's studies (compare, plan, golden); or, with
``scheduler``, a Dask cluster (:mod:`clustersim.studies.dask_runner`)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

R = TypeVar("R")

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called after each run (and, if asked, once before the first)."""


def worker_count(workers: int | None, total: int) -> int:
    """Processes for ``total`` runs: ``workers`` (default: all cores), at most one per run, at least 1."""
    return max(1, min(workers or os.cpu_count() or 1, total or 1))


def memory_workers(count: int, memory: Sequence[float] | None, limit: float | None) -> int:
    """At most ``count`` processes, and no more than the runs whose estimated peaks
    (``memory``, bytes, one per run) fit in ``limit`` bytes together, the largest first:
    runs at once share the machine (:mod:`clustersim.budget`); at least 1."""
    if not memory or limit is None:
        return count
    largest = sorted(memory, reverse=True)
    fit, total = 0, 0.0
    while fit < count and fit < len(largest) and total + largest[fit] <= limit:
        total += largest[fit]
        fit += 1
    return max(1, fit)


_INTERRUPTED = False
"""In a pool worker: whether Ctrl-C reached it (see :func:`_worker_start`)."""


def _on_interrupt(signum: int, frame: Any) -> None:
    """A pool worker's SIGINT: remember it, then interrupt as Python's default handler does."""
    global _INTERRUPTED
    _INTERRUPTED = True
    raise KeyboardInterrupt


def _worker_start() -> None:
    """Each pool worker's initializer: Ctrl-C at a terminal signals the whole process group,
    workers included, and a worker interrupted in one run would otherwise go on to the runs
    already queued to it (the pool hands each worker more than it runs), which cancelling
    the futures does not reach: Ctrl-C then waited for whole runs."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)


def _unless_interrupted(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` in a pool worker, or KeyboardInterrupt at once if Ctrl-C reached it:
    a run queued before the interrupt is not started."""
    if _INTERRUPTED:
        raise KeyboardInterrupt
    return fn(*args)


def run_all(
    fn: Callable[..., R],
    calls: Sequence[tuple[Any, ...]],
    workers: int | None = None,
    progress: Progress | None = None,
    *,
    announce: bool = False,
    scheduler: str | None = None,
    memory: Sequence[float] | None = None,
    memory_limit: float | None = None,
) -> list[R]:
    """``fn(*args)`` for every ``args`` of ``calls``, results in call order.

    Runs on :func:`worker_count` processes; with one, in this process (an
    exception then propagates at once).  ``fn`` and its arguments must pickle
    (a module-level function and plain data).  ``progress(done, total)`` is
    called after each run, and with ``announce`` also as ``progress(0, total)``
    before the first.  If the caller is interrupted (Ctrl-C) or a run raises,
    the runs still queued are cancelled instead of started.

    With ``scheduler`` (``local:N`` or a Dask scheduler's address) the runs go to a Dask
    cluster instead, ``workers`` unused (:mod:`clustersim.studies.dask_runner`).  Locally,
    ``memory`` (each run's estimated peak, bytes) and ``memory_limit`` cap the processes
    at the runs that fit in the limit together (:func:`memory_workers`).
    """
    total = len(calls)
    count = memory_workers(worker_count(workers, total), memory, memory_limit)
    if announce and progress:
        progress(0, total)
    if scheduler is not None:
        from .dask_runner import parse_scheduler, run_on_dask

        return run_on_dask(fn, calls, parse_scheduler(scheduler), progress)
    results: list[Any] = [None] * total
    if count == 1:
        for i, args in enumerate(calls):
            results[i] = fn(*args)
            if progress:
                progress(i + 1, total)
        return results
    pool = ProcessPoolExecutor(max_workers=count, initializer=_worker_start)
    try:
        futures = {pool.submit(_unless_interrupted, fn, *args): i for i, args in enumerate(calls)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress:
                progress(done, total)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results
