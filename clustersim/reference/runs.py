"""Commands a documentation page runs as the site is built, and what they show.

A page writes a marker where a command's output should be::

    <!-- clustersim: run scenarios/pipeline/1f1b_m8.yaml -o {out} | show: gantt.png -->

When the site is built the command runs (in this process, through the CLI's ``main``),
its output folder ``{out}`` a fresh temporary one; the marker becomes the command as a
reader types it (``{out}`` shown as ``reports/PAGE``), what it printed, and the files named
after ``show:`` -- images (``.png``, ``.svg``) put into the site beside the page, Markdown
(``.md``) written inline.  A command that exits with anything but 0 fails the build, so the
tutorials are run, and checked, on every ``make docs``: their figures are made by the
build, never pasted.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import shlex
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

RUN = re.compile(r"<!-- clustersim: (?P<args>[^|>]*?)(?:\s*\|\s*show:\s*(?P<show>[^>]*?))?\s*-->")
"""A run marker: the command's arguments, then optionally the files it writes to show."""
IMAGES = (".png", ".svg")
"""Files shown as images; ``.md`` files are written inline."""
GENERATED = "generated"
"""Folder of the site where the commands' images go."""


@dataclass
class Run:
    """One marker's command, played."""

    args: list[str]
    """Its arguments, ``{out}`` replaced by the folder it wrote to."""
    shown_as: str
    """The folder the command is shown writing to (``reports/PAGE``)."""
    show: list[str]
    """Files of the output folder to show, in order."""
    stdout: str = ""
    """What it printed (its warnings first), the temporary folder replaced by
    :attr:`shown_as`."""
    files: dict[str, bytes] = field(default_factory=dict)
    """The shown files' contents, by name."""


class RunFailed(RuntimeError):
    """A page's command exited with a code other than 0."""


def markers(text: str) -> list[re.Match[str]]:
    """The run markers of a page, in order."""
    return list(RUN.finditer(text))


def play(
    match: re.Match[str],
    shown_as: str,
    folder: Path,
    main: Callable[[Sequence[str]], int],
) -> Run:
    """Run one marker's command with ``main`` (the CLI's), its ``{out}`` in ``folder``."""
    out = str(folder)
    args = [a.replace("{out}", out) for a in shlex.split(match.group("args"))]
    show = (match.group("show") or "").split()
    printed, warned = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(warned):
        code = main(args)
    if code != 0:
        raise RunFailed(
            f"`clustersim {match.group('args')}` exited with {code}: {warned.getvalue()}"
        )
    text = warned.getvalue() + printed.getvalue()  # warnings come first, as in a terminal
    run = Run(args, shown_as, show, text.replace(out, shown_as))
    for name in show:
        path = folder / name
        if not path.is_file():
            raise RunFailed(f"`clustersim {match.group('args')}` wrote no {name}")
        run.files[name] = path.read_bytes()
    return run


def play_page(text: str, page: str, main: Callable[[Sequence[str]], int]) -> list[Run]:
    """Every marker of a page (``page``: its path in the site, ``tutorials/x.md``), played
    in order; each writes to a temporary folder of its own."""
    stem = Path(page).stem
    runs = []
    with tempfile.TemporaryDirectory(prefix="clustersim-docs-") as scratch:
        for k, match in enumerate(markers(text)):
            folder = Path(scratch) / f"{stem}-{k}"
            folder.mkdir(parents=True, exist_ok=True)
            runs.append(play(match, f"reports/{stem}", folder, main))
    return runs


def image_path(page: str, k: int, name: str) -> str:
    """Where run ``k``'s image ``name`` of ``page`` goes in the site."""
    return f"{GENERATED}/{Path(page).stem}-{k}-{name}"


def rendered(text: str, page: str, runs: Sequence[Run]) -> str:
    """``text`` with each marker replaced by its run: command, output, shown files."""
    found = markers(text)
    if len(found) != len(runs):
        raise RunFailed(f"{page}: {len(found)} markers but {len(runs)} runs")
    pieces, at = [], 0
    for k, (match, run) in enumerate(zip(found, runs, strict=True)):
        pieces.append(text[at : match.start()])
        pieces.append(_block(run, page, k, match.group("args")))
        at = match.end()
    pieces.append(text[at:])
    return "".join(pieces)


def _block(run: Run, page: str, k: int, written: str) -> str:
    command = "clustersim " + written.replace("{out}", run.shown_as)
    lines = ["```sh", command, "```", ""]
    if run.stdout.strip():
        lines += ["```text", run.stdout.rstrip(), "```", ""]
    here = posixpath.dirname(page)
    for name in run.show:
        if name.endswith(IMAGES):
            target = posixpath.relpath(image_path(page, k, name), here or ".")
            lines += [f"![{name}, as `{command}` wrote it]({target})", ""]
        else:
            lines += [run.files[name].decode("utf-8").strip(), ""]
    return "\n".join(lines)
