"""The one progress display of the CLI: a tqdm bar on stderr.

Shown only when it helps: on a terminal by default (``--progress`` forces it
where a command offers it), never with ``--quiet``, and only for work long
enough to watch (``min_total`` runs, or one second of wall time for a
simulation).  The line is cleared when the work ends, so stdout and the final
stderr stay as they were without it.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from ..units import format_time

QUIET_HELP = "no progress bar on stderr"
"""Help of ``-q/--quiet`` on the commands where it only turns progress off."""


def wanted(quiet: bool = False, forced: bool | None = None) -> bool:
    """Whether to show progress: ``forced`` if given, else on a terminal; never if ``quiet``."""
    if quiet:
        return False
    return sys.stderr.isatty() if forced is None else forced


class Progress:
    """``progress(done, total)`` for a count of runs, drawn as a tqdm bar on stderr.

    ``desc`` names the work (``compare``, ``planning``); ``unit`` what is counted.
    """

    def __init__(self, enabled: bool, desc: str, unit: str = "run", min_total: int = 1) -> None:
        self.enabled = enabled
        self.desc = desc
        self.unit = unit
        self.min_total = min_total
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_total:
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
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SimulationProgress:
    """``progress(now_s)`` for one simulation: simulated time and wall time on stderr,
    from one second of wall time on."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None
        if enabled:
            self._bar = tqdm(
                total=None,
                file=sys.stderr,
                leave=False,
                delay=1.0,
                bar_format="  simulating... t = {postfix} simulated, {elapsed} wall",
            )

    def __call__(self, now_s: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(format_time(now_s), refresh=False)
            self._bar.update(0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
