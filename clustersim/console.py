"""The ``clustersim`` console script's entry point, light enough to be in place before
anything slow is imported.

Importing the command line takes about half a second (numpy, SimPy, matplotlib's
settings); a Ctrl-C in that time would otherwise print a traceback.  :func:`main` turns
SIGINT at any moment into ``clustersim: interrupted`` and exit code 130, and SIGTERM (what
``kill``, ``timeout`` and batch schedulers send) into ``clustersim: terminated`` and exit
code 143, the shells' 128 + signal number.  Both unwind the stack as exceptions, so an
output folder being written is removed and the previous outputs stay whole
(:mod:`clustersim.outputs.folder`).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Exit code after Ctrl-C (SIGINT): 130."""
EXIT_TERMINATED = 128 + signal.SIGTERM
"""Exit code after SIGTERM: 143."""


class Terminated(BaseException):
    """Raised in the main process when it receives SIGTERM.

    A :class:`BaseException`, as :class:`KeyboardInterrupt` is, so that no ``except
    Exception`` swallows it while every ``finally`` and cleanup still runs."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _MAIN_PID:
        # A forked worker (a sweep's process pool) inherited the handler: it dies of
        # the signal as it would have, and the main process reports once.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated(signum)


_MAIN_PID = os.getpid()


def install_signal_handlers() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process, unless someone embedding
    clustersim set a handler of their own."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``clustersim ARGV``; returns the exit code (see :mod:`clustersim.cli`)."""
    try:
        install_signal_handlers()
        from .cli import main as cli_main

        return cli_main(argv)
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("clustersim: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def run() -> NoReturn:
    """The ``clustersim`` console script and ``python -m clustersim``: :func:`main`, then
    :func:`exit_now` with its exit code (an error of the argument parser exits as usual)."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` without taking the interpreter apart.

    A large run leaves millions of objects (a 131,072-GPU topology's links and routes, a
    run's records) that Python would free one by one as it shuts down: 2 s of the 7 s of
    ``clustersim validate`` of scenarios/scale/dense_131k.yaml.  What the shutdown does
    that matters still happens: the exit handlers run (logging, process pools, temporary
    folders), then the standard streams are flushed (a reader that went away, as with
    ``| head``, is not an error), then the process ends.  Every file clustersim writes is
    closed when its write is done (:mod:`clustersim.outputs.atomic`).  While another
    thread is alive (a Dask client's), the usual exit, which waits for it."""
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
