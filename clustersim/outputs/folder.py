"""An output folder replaced as a unit: written in full beside it, then swapped in.

:func:`replace_folder` is how a run folder (:func:`.run_folder.write_run_folder`),
a compare folder and a plan folder are written:

1. the destination is checked (:func:`.paths.check_output_folder`): it may only
   hold clustersim's own outputs, so that ``-o ~`` cannot wipe a home folder;
2. leftovers of earlier writers of the same destination that died (SIGKILL,
   power loss) are removed: sibling folders named ``.NAME.tmp-PID-HEX`` or
   ``.NAME.old-PID-HEX`` whose process no longer exists;
3. every file is written into a new sibling folder ``.NAME.tmp-PID-HEX`` (same
   parent, so same file system: the renames below are atomic);
4. the new folder takes the destination's place: on Linux in one step
   (``renameat2(RENAME_EXCHANGE)`` swaps the two folders), elsewhere by renaming
   the old folder aside (``.NAME.old-PID-HEX``) and the new one into place;
5. the old folder, now under the temporary name, is deleted.

So the destination always holds a complete set of files, the old one or the new
one, never a mix, and no stale file of the old set (a ``report.html``, a
``gantt.png``) survives next to new ones.  Any failure or interruption
(KeyboardInterrupt included) deletes the temporary folder before the error goes
on.  Two writers of one destination each swap in a whole folder: the last to
finish wins.  Where the two renames of step 4 are used and a process is killed
between them, the next writer finds the destination missing and renames the old
folder back before anything else.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import WriteError
from .paths import check_output_folder, name_max

_LEFTOVER = re.compile(r"(?P<kind>tmp|old)-(?P<pid>\d+)-[0-9a-f]+")
"""The part of a sibling's name after :func:`sibling_prefix`: ``tmp-PID-HEX`` or ``old-PID-HEX``."""
_SUFFIX_BYTES = 32
"""Room for ``tmp-PID-HEX`` after the prefix (a PID has at most 10 digits)."""


def replace_folder(
    dest: str | os.PathLike[str],
    fill: Callable[[Path], Sequence[str]],
    flag: str = "output folder",
) -> list[Path]:
    """Replace the folder ``dest`` (made if missing) by one ``fill(folder)`` writes in full.

    ``fill`` writes its files into the empty folder it is given and returns their
    names; the result is those names under ``dest``.  Problems with ``dest`` are
    a :class:`~clustersim.errors.ScenarioError` at key path ``flag``, raised
    before ``fill`` runs; an :class:`OSError` afterwards (disk full) is a
    :class:`~clustersim.errors.WriteError` naming the file, and leaves the old
    folder as it was.
    """
    target = check_output_folder(dest, flag)
    remove_leftovers(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(dest, exc) from exc
    temporary: Path | None = None
    try:
        # Named before it is made, so that the cleanup below finds it whenever an
        # interruption comes (a signal is handled between any two steps of this thread,
        # whichever thread of the process received it).
        temporary = _sibling_name(target, "tmp")
        while not _made(temporary):
            temporary = _sibling_name(target, "tmp")
        names = list(fill(temporary))
        _copy_mode(target, temporary)
        _swap(temporary, target, flag, dest)
    except OSError as exc:
        if temporary is None:
            raise WriteError(dest, exc) from exc
        name = Path(exc.filename).name if isinstance(exc.filename, str) else ""
        written = Path(dest) / name if name and name != temporary.name else Path(dest)
        raise WriteError(written, exc) from exc
    finally:
        if temporary is not None:
            _remove(temporary)  # after a swap it holds the old folder
    return [Path(dest) / name for name in names]


def sibling_prefix(target: Path) -> str:
    """``.NAME.``, the start of the temporary siblings' names of ``target`` (a hash of the
    name instead when the name is too long to take a suffix)."""
    prefix = f".{target.name}."
    if len(os.fsencode(prefix)) + _SUFFIX_BYTES > name_max(target.parent):
        prefix = f".{hashlib.sha256(os.fsencode(target.name)).hexdigest()[:16]}."
    return prefix


def leftovers(target: Path) -> list[tuple[Path, str, int]]:
    """Temporary siblings of ``target``: (path, ``tmp`` or ``old``, pid of their writer)."""
    prefix = sibling_prefix(target)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        match = _LEFTOVER.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        if match:
            found.append((target.parent / name, match["kind"], int(match["pid"])))
    return found


def remove_leftovers(target: Path) -> None:
    """Delete the temporary siblings of ``target`` whose writer is dead; when ``target`` is
    missing, an old folder set aside by a writer killed mid-swap is renamed back first."""
    for path, kind, pid in leftovers(target):
        if pid == os.getpid() or _alive(pid):
            continue
        if kind == "old" and not os.path.lexists(target):
            try:
                os.rename(path, target)
                continue
            except OSError:
                pass
        _remove(path)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (always true where that cannot be asked safely)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sibling_name(target: Path, kind: str) -> Path:
    """A fresh name beside ``target``, for it, this process and ``kind`` (``tmp`` or ``old``)."""
    return target.parent / f"{sibling_prefix(target)}{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def _made(path: Path) -> bool:
    """Make the empty folder ``path``: False if the name is taken (another, fresh name is
    then drawn; one with this process's id can only be a leftover of a dead one)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    return True


def _copy_mode(target: Path, temporary: Path) -> None:
    """Give the new folder the permission bits of the one it replaces."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return
    os.chmod(temporary, mode)


def _swap(temporary: Path, target: Path, flag: str, dest: str | os.PathLike[str]) -> None:
    """Put ``temporary`` at ``target``; the old folder, if any, ends at ``temporary``."""
    for _ in range(3):
        try:
            os.rename(temporary, target)  # no folder there, or an empty one
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        check_output_folder(dest, flag)  # still only clustersim's files (another writer's)
        try:
            if _exchange(temporary, target):
                return
        except FileNotFoundError:
            continue  # removed meanwhile: rename again
        _swap_in_two_steps(temporary, target)
        return
    raise OSError(errno.EBUSY, "the folder kept changing while it was replaced", str(target))


def _swap_in_two_steps(temporary: Path, target: Path) -> None:
    """Where folders cannot be exchanged: the old one aside, the new one in, the old one to
    ``temporary`` (put back if the new one cannot go in)."""
    aside = _sibling_name(target, "old")
    os.rename(target, aside)
    try:
        os.rename(temporary, target)
    except BaseException:
        os.rename(aside, target)
        raise
    os.rename(aside, temporary)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2``); False where the
    system or the file system cannot."""
    function = _libc_renameat2()
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))


@functools.cache
def _libc_renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28 and later), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def _remove(path: Path) -> None:
    """Delete a temporary folder and what it holds, quietly (it may be gone already)."""
    shutil.rmtree(path, ignore_errors=True)
