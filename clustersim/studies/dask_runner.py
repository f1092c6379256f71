"""Running a study's simulations on a Dask distributed cluster (``--scheduler``).

``--scheduler local:N`` starts a :class:`distributed.LocalCluster` scheduler in this
process and ``N`` worker processes of one thread each (a ``dask worker`` command in a
session of its own, so that a Ctrl-C reaches this process only); ``--scheduler
tcp://HOST:PORT`` (or ``HOST:PORT``) connects to a running ``dask scheduler`` whose
``dask worker`` processes may sit on other machines.  The calls are the process pool's
(:func:`run_all`): a module-level function of clustersim and plain data (scenario
*documents*, never file paths), so a worker needs clustersim installed, the same
version, and no shared files.
Results come back in call order, so outputs are byte-identical to the process pool's.

:mod:`distributed` is imported only here, and this module only when ``--scheduler`` is
given: the console and the other commands never load it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ClustersimError, Problem, ScenarioError
from ..version import __version__

CONNECT_TIMEOUT_S = 10.0
"""Seconds to reach the scheduler at ``--scheduler ADDRESS``, and again for its first worker."""
LOCAL_START_S = 60.0
"""Seconds for the workers of ``--scheduler local:N`` to start."""
FORMS = "local:N (N >= 1 local worker processes), tcp://HOST:PORT or HOST:PORT"
"""The allowed forms of ``--scheduler``, for error messages."""

_LOCAL = re.compile(r"local:(\d+)")
_ADDRESS = re.compile(r"(?:tcp://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


@dataclass(frozen=True)
class Scheduler:
    """Where a study's simulations run: a local Dask cluster or a scheduler's address."""

    local_workers: int = 0
    """Worker processes of a local cluster (0: connect to :attr:`address`)."""
    address: str = ""
    """``tcp://HOST:PORT`` of a running scheduler ("" for a local cluster)."""
    flag: str = "--scheduler"
    """The option errors name."""

    def __str__(self) -> str:
        return f"local:{self.local_workers}" if self.local_workers else self.address


def parse_scheduler(text: str, flag: str = "--scheduler") -> Scheduler:
    """``local:N`` or ``[tcp://]HOST:PORT`` as a :class:`Scheduler`; a ScenarioError naming
    ``flag`` and the allowed forms otherwise."""
    text = text.strip()
    local = _LOCAL.fullmatch(text)
    if local and int(local.group(1)) >= 1:
        return Scheduler(local_workers=int(local.group(1)), flag=flag)
    address = None if text.startswith("local:") else _ADDRESS.fullmatch(text)
    if address and 1 <= int(address.group(2)) <= 65535:
        return Scheduler(address=f"tcp://{address.group(1)}:{int(address.group(2))}", flag=flag)
    raise ScenarioError(Problem(flag, f"not a Dask scheduler: {text!r}", FORMS))


def check_scheduler(scheduler: str | None, jobs: int | None, flag: str = "--scheduler") -> None:
    """Refuse ``scheduler`` if malformed or given together with ``-j`` (its workers, not
    local processes, run the simulations)."""
    if scheduler is None:
        return
    parse_scheduler(scheduler, flag)
    if jobs is not None:
        raise ScenarioError(
            Problem(
                flag,
                "given with -j: the scheduler's workers run the simulations",
                "one of -j N (local processes) and --scheduler",
            )
        )


def run_on_dask(
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    scheduler: Scheduler,
    progress: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """``fn(*args)`` for every ``args`` of ``calls`` on ``scheduler``'s workers, in call order.

    ``progress(done, total)`` after each run, as runs finish.  On an error or Ctrl-C the
    runs not yet finished are cancelled; the client (and a local cluster) is always closed.
    """
    import distributed

    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.ERROR)  # not its notes on closed connections after a Ctrl-C
    try:
        with contextlib.ExitStack() as stack:
            address, needed, wait_s = scheduler.address, 1, CONNECT_TIMEOUT_S
            if scheduler.local_workers:
                address = stack.enter_context(_local_cluster(distributed, scheduler.local_workers))
                needed, wait_s = scheduler.local_workers, LOCAL_START_S
            client = _connect(distributed, address, scheduler, needed, wait_s)
            stack.callback(client.close)
            try:
                return _gather(distributed, client, fn, calls, progress)
            except BaseException:
                # a sweep cut short (Ctrl-C, SIGTERM, a failed run): the scheduler's errors
                # about the keys it forgets while closing say nothing the user needs
                logger.setLevel(logging.CRITICAL)
                raise
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _local_cluster(distributed: Any, workers: int) -> Iterator[str]:
    """A scheduler in this process and ``workers`` worker processes of one thread each;
    yields the scheduler's address.

    The workers are one ``dask worker`` command in a session of its own: a Ctrl-C at a
    terminal signals the foreground process group, and this process alone answers it
    (one line, exit 130) and then ends the workers.  They import clustersim from where
    this process does.
    """
    cluster = distributed.LocalCluster(
        n_workers=0,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # a free port: no warning when 8787 is taken
        silence_logs=logging.ERROR,
    )
    try:
        here = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        command = [
            *(sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address),
            *("--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"),
            *("--death-timeout", f"{LOCAL_START_S:g}"),
        ]
        process = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            yield cluster.scheduler_address
        finally:
            _end(process)
    finally:
        cluster.close()


def _end(process: subprocess.Popen[bytes]) -> None:
    """End ``dask worker`` and its worker processes at once (they hold nothing to save)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # pragma: no cover  (it had ended already)
        pass
    process.wait()


def _connect(
    distributed: Any, address: str, scheduler: Scheduler, needed: int, wait_s: float
) -> Any:
    """A client of ``address`` once ``needed`` workers, all with this version of
    clustersim, have joined (within ``wait_s`` seconds)."""
    if not scheduler.local_workers:
        _handshake(scheduler)
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except OSError as exc:
        raise _unreachable(scheduler, exc) from None
    try:
        client.wait_for_workers(needed, timeout=wait_s)
        _check_versions(client, scheduler)
    except BaseException as exc:
        client.close()
        if isinstance(exc, (OSError, distributed.TimeoutError)):
            what = f"not {needed} worker(s) joined" if needed > 1 else "no worker joined"
            raise _unreachable(scheduler, exc, what, wait_s) from None
        raise
    return client


def _handshake(scheduler: Scheduler) -> None:
    """Dask's handshake with :attr:`Scheduler.address`, before a client is made of it: what
    answers there may be no Dask scheduler (a client's failure would then be a traceback)."""
    import asyncio

    from distributed.comm import connect

    async def shake() -> None:
        comm = await connect(scheduler.address, timeout=CONNECT_TIMEOUT_S)
        await comm.close()

    try:
        asyncio.run(shake())
    except OSError as exc:
        raise _unreachable(scheduler, exc) from None
    except Exception as exc:  # noqa: BLE001  (whatever answered, it speaks no Dask)
        told = f"what answers at {scheduler} is no Dask scheduler ({type(exc).__name__})"
        raise _refused(scheduler, told) from None


def _unreachable(
    scheduler: Scheduler, exc: BaseException, what: str = "", wait_s: float | None = None
) -> ClustersimError:
    told = str(exc).strip() or type(exc).__name__
    what = what or "cannot reach the Dask scheduler"
    wait_s = CONNECT_TIMEOUT_S if wait_s is None else wait_s
    return _refused(scheduler, f"{what} at {scheduler} within {wait_s:g} s ({told})")


def _refused(scheduler: Scheduler, message: str) -> ClustersimError:
    return ScenarioError(
        Problem(
            scheduler.flag,
            message,
            "a running `dask scheduler` with `dask worker` processes, or local:N",
        )
    )


def _check_versions(client: Any, scheduler: Scheduler) -> None:
    """Every worker imports clustersim, this version (else its results could differ)."""
    workers = client.get_versions(packages=["clustersim"])["workers"]
    for name, versions in sorted(workers.items()):
        found = (versions.get("packages") or {}).get("clustersim")
        if found != __version__:
            has = f"clustersim {found}" if found else "no clustersim"
            raise ScenarioError(
                Problem(
                    scheduler.flag,
                    f"worker {name} of {scheduler} has {has}",
                    f"clustersim {__version__} installed on every worker",
                )
            )


def _gather(
    distributed: Any,
    client: Any,
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    progress: Callable[[int, int], None] | None,
) -> list[Any]:
    """Submit every call, collect the results by call index as they finish."""
    total = len(calls)
    results: list[Any] = [None] * total
    futures = [client.submit(fn, *args, pure=False) for args in calls]
    index = {future.key: i for i, future in enumerate(futures)}
    try:
        for done, future in enumerate(distributed.as_completed(futures, loop=client.loop), start=1):
            results[index[future.key]] = future.result()
            if progress:
                progress(done, total)
    except distributed.KilledWorker as exc:
        client.cancel(futures, force=True)
        raise ClustersimError(f"a Dask worker died running a simulation: {exc}") from None
    except BaseException:
        client.cancel(futures, force=True)
        raise
    return results
