"""Exceptions of clustersim.

Every error a user can cause derives from :class:`ClustersimError`.  The CLI
turns them into one clear message and exit code 2; library code never prints.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class ClustersimError(Exception):
    """Base class of every error caused by bad input."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where, what, and what is allowed."""

    path: str
    """Key path inside the document, e.g. ``cluster.node.nic.bandwidth``."""
    message: str
    """What was wrong."""
    allowed: str = ""
    """What is allowed instead (may be empty)."""

    def render(self, source: str = "") -> str:
        where = ": ".join(part for part in (source, self.path or "<top level>") if part)
        text = f"{where}: {self.message}"
        if self.allowed:
            text += f" (allowed: {self.allowed})"
        return text


class ScenarioError(ClustersimError):
    """A scenario (or part of one) is invalid.  Carries one or more problems."""

    def __init__(self, problems: Sequence[Problem] | Problem, source: str = "") -> None:
        self.problems: list[Problem] = (
            [problems] if isinstance(problems, Problem) else list(problems)
        )
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(p.render(self.source) for p in self.problems)

    def with_source(self, source: str) -> ScenarioError:
        """The same problems (and kind of error), attributed to the file ``source``."""
        return type(self)(self.problems, source)

    def prefixed(self, prefix: str) -> ScenarioError:
        """The same problems with ``prefix`` put in front of each key path."""
        return type(self)(
            [Problem(join_path(prefix, p.path), p.message, p.allowed) for p in self.problems],
            self.source,
        )


class SimulationError(ClustersimError):
    """The simulation itself cannot go on (deadlock, misuse of the engine API)."""


class WriteError(ClustersimError, OSError):
    """An output could not be written although it was checked before the work began (the
    disk filled up, a folder was removed or made read-only meanwhile).

    Also an :class:`OSError` (``errno``, ``strerror``, ``filename``), so code that catches
    those still does.  The CLI prints it in one line and exits with code 1.
    """

    def __init__(self, path: object, exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or str(exc), str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def join_path(*parts: str | int) -> str:
    """Join key-path parts: ``join_path('a', 'b', 3, 'c') == 'a.b[3].c'``."""
    out = ""
    for part in parts:
        if part == "" or part is None:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("["):
            out += part
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' did you mean X?' hint, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" did you mean '{close[0]}'?" if close else ""


def hinted(message: str, word: object, choices: Iterable[str]) -> str:
    """``message`` followed by '; did you mean X?' when ``word`` is text close to one of ``choices``."""
    hint = did_you_mean(word, choices) if isinstance(word, str) else ""
    return f"{message};{hint}" if hint else message
