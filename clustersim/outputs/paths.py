"""Output paths, checked before any work is done.

Every command that writes checks its output paths first, so that a bad one is
refused in one line (exit code 2) before minutes of simulation, not with a
traceback after them.  A problem names the argument, the path, what is wrong
and what is allowed:

* :func:`check_output_folder` -- a folder that is, or can be made, writable;
  with ``whole=True`` (run, compare and plan folders, replaced as a unit by
  :func:`.folder.replace_folder`) also one that holds only clustersim's own
  outputs (:data:`OUTPUT_FILES`), is not a mount point, not ``/`` and not the
  current folder or one holding it;
* :func:`check_output_file` -- a file (``collective --csv``, a golden file)
  whose folder passes the check above.

Names are checked against the file system's limits (``NAME_MAX`` bytes per
name, ``PATH_MAX`` bytes per path, with room kept for temporary names), and
writing is tried for real: a folder is made and removed in the nearest
existing folder, which catches read-only file systems and missing permissions
even for root.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

from ..errors import Problem, ScenarioError

RUN_FILES = (
    "summary.json",
    "timeline.csv",
    "timeline.parquet",
    "links.csv",
    "trace.json",
    "scenario.resolved.yaml",
    "gantt.png",
    "gantt.svg",
    "report.html",
    "devices.csv",
)
"""What a run folder may hold: ``clustersim run`` and ``clustersim report`` write them."""
COMPARE_FILES = ("compare.csv", "compare.md", "compare.png", "compare.svg")
"""What ``clustersim compare -o`` writes."""
PLAN_FILES = ("plan.csv", "plan.md", "plan.png", "plan.svg")
"""What ``clustersim plan -o`` writes."""
CHOOSE_FILES = ("choose.csv", "choose.md", "frontier.png", "frontier.svg")
"""What ``clustersim choose -o`` writes, with :data:`OUTPUT_FOLDERS`' ``plans``."""
OUTPUT_FILES = frozenset(RUN_FILES + COMPARE_FILES + PLAN_FILES + CHOOSE_FILES)
"""Names of the files a folder replaced as a unit may hold; any other entry (a file of the
user's, a subfolder not in :data:`OUTPUT_FOLDERS`) makes clustersim refuse to replace it."""
OUTPUT_FOLDERS = {"plans": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.csv")}
"""Subfolders a folder replaced as a unit may hold, and the names of the files they may
hold: ``clustersim choose``'s per-cluster plan tables (``plans/NAME.csv``)."""

NAME_MAX = 255
"""Longest name of one file or folder, bytes, when the file system does not say."""
PATH_MAX = 4096
"""Longest path, bytes, when the file system does not say."""
RESERVED_BYTES = 64
"""Bytes of a path kept free for the temporary names written next to and inside it."""

_OLD_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[^.]+\.tmp")
"""A file's temporary name (``.summary.json.abc123.tmp``) left by an interrupted older version."""


def check_output_folder(
    path: str | os.PathLike[str], flag: str = "output folder", whole: bool = True
) -> Path:
    """The absolute, symlink-resolved folder ``path`` names, once it is known to be writable.

    ``whole``: the folder is replaced as a unit, so it must hold only clustersim's
    outputs and its parent folder must be writable too.  A problem is a
    :class:`~clustersim.errors.ScenarioError` at key path ``flag``.
    """
    target = _resolved(path, flag)
    _check_lengths(target, flag, path, RESERVED_BYTES)
    if target == Path(target.anchor):
        raise _refused(flag, path, "is the root folder", "a folder below it")
    if whole and _holds_cwd(target):
        message = "is the current folder or holds it, and the output folder is replaced as a whole"
        raise _refused(flag, path, message, "a new folder, or one inside it")
    if os.path.isdir(target):
        if whole:
            _check_replaceable(target, flag, path)
        if whole:
            _check_writable(target.parent, flag, path, _BESIDE)
        else:
            _check_writable(target, flag, path)
        if whole and not os.access(target, os.W_OK | os.X_OK):
            raise _refused(flag, path, "is not writable (its old files could not be removed)")
        return target
    if os.path.lexists(target) or os.path.exists(target):
        raise _refused(flag, path, f"exists and is {_kind(target)}, not a folder", _FOLDER)
    _check_makeable(target, flag, path)
    return target


def check_output_file(path: str | os.PathLike[str], flag: str = "output file") -> Path:
    """The absolute file ``path`` names, once its folder is known to be writable: not a
    folder, not a pipe or device, a name of legal length.  Problems as
    :func:`check_output_folder`'s."""
    target = _resolved(path, flag)
    _check_lengths(target, flag, path, RESERVED_BYTES)
    if os.path.isdir(target):
        raise _refused(flag, path, "is a folder, not a file", "a file name")
    if os.path.exists(target) and not os.path.isfile(target):
        raise _refused(flag, path, f"exists and is {_kind(target)}", "a regular file or a new name")
    if os.path.isdir(target.parent):
        _check_writable(target.parent, flag, path)
    else:
        _check_makeable(target.parent, flag, path)
    return target


def foreign_entries(folder: str | os.PathLike[str]) -> list[str]:
    """Names in ``folder`` clustersim does not write (not in :data:`OUTPUT_FILES`, a
    subfolder other than :data:`OUTPUT_FOLDERS`, or one of those holding anything else),
    sorted; a folder holding any of them is not replaced."""
    foreign = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if name in OUTPUT_FOLDERS and entry.is_dir(follow_symlinks=False):
                foreign += [f"{name}/{inner}" for inner in _foreign_inside(entry.path, name)]
                continue
            match = _OLD_TEMPORARY.fullmatch(name)
            ours = name in OUTPUT_FILES or bool(match and match["name"] in OUTPUT_FILES)
            if not ours or entry.is_dir(follow_symlinks=False):
                foreign.append(name)
    return sorted(foreign)


def _foreign_inside(folder: str, name: str) -> list[str]:
    """Entries of the output subfolder ``name`` that are not its files (:data:`OUTPUT_FOLDERS`)."""
    pattern = OUTPUT_FOLDERS[name]
    with os.scandir(folder) as entries:
        return [
            e.name
            for e in entries
            if not (pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False))
        ]


def name_max(folder: str | os.PathLike[str]) -> int:
    """Longest name (bytes) the file system of ``folder`` accepts."""
    return _pathconf(folder, "PC_NAME_MAX", NAME_MAX)


def path_max(folder: str | os.PathLike[str]) -> int:
    """Longest path (bytes) the file system of ``folder`` accepts."""
    return _pathconf(folder, "PC_PATH_MAX", PATH_MAX)


_FOLDER = "a folder, or a path where one can be made"


def _refused(
    flag: str, path: str | os.PathLike[str], message: str, allowed: str = ""
) -> ScenarioError:
    """The problem of ``path``, given as ``flag``: ``-o: 'PATH' MESSAGE (allowed: ...)``."""
    return ScenarioError(Problem(flag, f"'{_shown(os.fspath(path))}' {message}", allowed))


def _shown(text: str, width: int = 80) -> str:
    """``text``, its middle left out when longer than ``width`` characters."""
    if len(text) <= width:
        return text
    half = (width - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


def _resolved(path: str | os.PathLike[str], flag: str) -> Path:
    """``path`` made absolute with symlinks resolved; an empty path or a NUL byte refused."""
    text = os.fspath(path)
    if not text:
        raise ScenarioError(Problem(flag, "is empty", "a path"))
    if "\0" in text:
        raise _refused(flag, text.replace("\0", "\\0"), "holds a NUL byte", "a path without one")
    return Path(os.path.realpath(text))


def _check_lengths(
    target: Path, flag: str, path: str | os.PathLike[str], reserved: int = 0
) -> None:
    """Each name of ``target`` within NAME_MAX bytes, the whole within PATH_MAX less ``reserved``."""
    ancestor = _existing_ancestor(target)
    longest = name_max(ancestor)
    for part in target.parts[1:]:
        size = len(os.fsencode(part))
        if size > longest:
            message = f"has a name of {size} bytes ('{_shown(part, 40)}')"
            raise _refused(flag, path, message, f"names of at most {longest} bytes")
    size, limit = len(os.fsencode(str(target))), path_max(ancestor) - reserved
    if size > limit:
        message = f"is {size} bytes long as an absolute path"
        raise _refused(flag, path, message, f"paths of at most {limit} bytes")


def _check_replaceable(target: Path, flag: str, path: str | os.PathLike[str]) -> None:
    """A folder clustersim may replace as a unit: not a mount point, only its own outputs."""
    if os.path.ismount(target):
        message = "is a mount point, and the output folder is replaced as a whole"
        raise _refused(flag, path, message, "a folder inside it")
    try:
        foreign = foreign_entries(target)
    except OSError as exc:
        raise _refused(flag, path, f"cannot be listed: {exc.strerror}") from None
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        message = (
            f"holds entries clustersim does not write ({shown}); the output folder is "
            "replaced as a whole, so they would be lost"
        )
        raise _refused(flag, path, message, "a new or empty folder, or an earlier output folder")


def _check_makeable(folder: Path, flag: str, path: str | os.PathLike[str]) -> None:
    """The missing ``folder`` can be made: its nearest existing ancestor is a writable folder."""
    ancestor = _existing_ancestor(folder)
    if not os.path.isdir(ancestor):
        message = f"cannot be made: '{ancestor}' is {_kind(ancestor)}, not a folder"
        raise _refused(flag, path, message, _FOLDER)
    _check_writable(ancestor, flag, path)


_BESIDE = "the output folder is replaced as a whole, through a temporary folder beside it"


def _check_writable(folder: Path, flag: str, path: str | os.PathLike[str], why: str = "") -> None:
    """Make and remove a folder in ``folder``: the real test of writing there.  ``why``:
    the reason ``folder`` (the parent of ``path``) must be writable, when it is not ``path``."""
    probe = folder / f".clustersim-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as exc:
        if why:
            message = f"cannot be replaced: '{folder}' is not writable ({exc.strerror}), and {why}"
            raise _refused(flag, path, message, "a folder inside a writable one") from None
        where = "" if Path(os.path.realpath(path)) == folder else f" (in '{folder}')"
        message = f"is not writable{where}: {exc.strerror}"
        raise _refused(flag, path, message, "a folder this user can write in") from None


def _holds_cwd(target: Path) -> bool:
    """Whether ``target`` is the current folder or one of its ancestors."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        return False
    return target == cwd or target in cwd.parents


def _existing_ancestor(target: Path) -> Path:
    """``target`` or its nearest ancestor that exists (as anything)."""
    for candidate in (target, *target.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(target.anchor)


def _kind(path: Path) -> str:
    """What ``path`` is, in words: a file, a named pipe, a device, ..."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken link" if os.path.islink(path) else "unreadable"
    kinds = (
        (stat.S_ISREG, "a file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def _pathconf(folder: str | os.PathLike[str], name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value and value > 0 else default
