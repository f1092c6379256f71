"""The one progress display of the CLI, on stderr.

On a terminal: a tqdm bar, cleared when the work ends, so stdout and the final
stderr stay as they were without it.  Elsewhere (CI logs, a pipe, a file): plain
lines, one every :data:`LINE_EVERY_S` seconds of wall time at most, none for work
shorter than that, and a last line saying how long it took when any was printed.
``--progress`` (where a command offers it) forces the bar; ``--quiet`` turns both
off.  Only work long enough to watch is shown (``min_total`` runs, one second of
wall time for a simulation, or work estimated at :data:`WATCH_AFTER_S` or more).

Before work estimated longer than :data:`clustersim.budget.NOTICE_AFTER_S` starts,
:func:`notice` says so on stderr, on a terminal or not (``--quiet`` leaves it out):
how long, in how many events, and what would shorten it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tqdm import tqdm

from ..budget import EVENTS_PER_S, format_count
from ..units import format_time

QUIET_HELP = "no progress bar on stderr"
"""Help of ``-q/--quiet`` on the commands where it only turns progress off."""
QUIET_NOTICE_HELP = (
    "no progress on stderr, and no notice of work estimated longer than 10 s (which says "
    "how long and what shortens it)"
)
"""Help of ``-q/--quiet`` on the commands that also announce long work (:func:`notice`)."""


def add_progress_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--progress`` / ``--no-progress``: force the bar on, or off (default: a terminal's)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


LINE_EVERY_S = 10.0
"""Off a terminal: seconds of wall time between two progress lines (and before the first)."""
BAR = "bar"
LINES = "lines"


def wanted(quiet: bool = False, forced: bool | None = None) -> str:
    """How to show progress: ``"bar"`` on a terminal or when ``forced``, ``"lines"`` off a
    terminal, ``""`` (off) with ``quiet`` or ``forced=False``."""
    if quiet or forced is False:
        return ""
    return BAR if forced or sys.stderr.isatty() else LINES


class _Lines:
    """Off-terminal progress: a line on stderr every :data:`LINE_EVERY_S` seconds."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.start = self.last = time.monotonic()
        self.printed = False

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < LINE_EVERY_S:
            return False
        self.last = now
        self.printed = True
        return True

    def say(self, text: str) -> None:
        sys.stderr.write(
            f"{self.desc}: {text}, {format_time(time.monotonic() - self.start)} wall\n"
        )
        sys.stderr.flush()


class Progress:
    """``progress(done, total)`` for a count of runs, drawn as a tqdm bar on stderr.

    ``desc`` names the work (``compare``, ``planning``); ``unit`` what is counted.
    """

    def __init__(
        self, enabled: bool | str, desc: str, unit: str = "run", min_total: int = 1
    ) -> None:
        self.enabled = bool(enabled)
        self.desc = desc
        self.unit = unit
        self.min_total = min_total
        self._bar: Any = None
        self._lines = _Lines(desc) if enabled == LINES else None
        self._done = (0, 0)

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_total:
            return
        if self._lines is not None:
            self._done = (done, total)
            if self._lines.due():
                self._lines.say(f"{done} of {total} {self.unit}s")
            return
        if self._bar is None:
            self._bar = tqdm(
                total=total,
                desc=self.desc,
                unit=self.unit,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
                bar_format="  {desc} [{bar:24}] {n_fmt} of {total_fmt} {unit}s, {remaining} left",
                ascii=" =",
            )
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        if self._lines is not None and self._lines.printed:
            done, total = self._done
            self._lines.say(f"{done} of {total} {self.unit}s, done")
            self._lines.printed = False
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SimulationProgress:
    """``progress(now_s)`` for one simulation: simulated time and wall time on stderr,
    from one second of wall time on."""

    def __init__(self, enabled: bool | str) -> None:
        self.enabled = bool(enabled)
        self._bar: Any = None
        self._lines = _Lines("simulating") if enabled == LINES else None
        if enabled == BAR or enabled is True:
            self._bar = tqdm(
                total=None,
                file=sys.stderr,
                leave=False,
                delay=1.0,
                bar_format="  simulating{postfix} simulated, {elapsed} wall",
            )

    def __call__(self, now_s: float) -> None:
        if self._lines is not None and self._lines.due():
            self._lines.say(f"t = {format_time(now_s)} simulated")
        if self._bar is not None:
            # tqdm puts ", " before a postfix: "simulating, t = 1.2 s simulated"
            self._bar.set_postfix_str(f"t = {format_time(now_s)}", refresh=False)
            self._bar.update(0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def notice(text: str, quiet: bool = False) -> None:
    """``clustersim: TEXT`` on stderr (a long run's notice,
    :func:`clustersim.budget.long_work_notice`), unless ``quiet`` or ``text`` is empty."""
    if text and not quiet:
        sys.stderr.write(f"clustersim: {text}\n")
        sys.stderr.flush()


WATCH_AFTER_S = 1.0
"""Work estimated shorter than this (seconds at :data:`clustersim.budget.EVENTS_PER_S`)
shows no :class:`WorkProgress`."""


class WorkProgress:
    """``progress(done, total)`` in estimated events (``clustersim collective``): a tqdm bar
    with the time left on a terminal, lines elsewhere; nothing for work estimated shorter
    than :data:`WATCH_AFTER_S`."""

    def __init__(self, enabled: bool | str, desc: str) -> None:
        self.enabled = bool(enabled)
        self.desc = desc
        self._bar: Any = None
        self._lines = _Lines(desc) if enabled == LINES else None
        self._done = (0.0, 0.0)

    def __call__(self, done: float, total: float) -> None:
        if not self.enabled or total < WATCH_AFTER_S * EVENTS_PER_S:
            return
        if self._lines is not None:
            self._done = (done, total)
            if self._lines.due():
                self._lines.say(f"{format_count(done)} of {format_count(total)} events")
            return
        text = f"{format_count(done)} of {format_count(total)}"
        if self._bar is None:
            self._bar = tqdm(
                total=total,
                desc=self.desc,
                postfix=text,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
                bar_format="  {desc} [{bar:24}]{postfix} events, {remaining} left",
                ascii=" =",
            )
        self._bar.n = done  # tqdm puts ", " before the postfix: "[===  ], 1.2 M of 6 M events"
        self._bar.set_postfix_str(text)

    def close(self) -> None:
        if self._lines is not None and self._lines.printed:
            done, total = self._done
            self._lines.say(f"{format_count(done)} of {format_count(total)} events, done")
            self._lines.printed = False
        if self._bar is not None:
            self._bar.close()
            self._bar = None
