"""Files written atomically: to a temporary name in the target's folder, then moved into place.

A reader never sees a half-written file, and a failed write leaves the old
file (or none) and no temporary name behind.  An :class:`OSError` while writing
(disk full, folder gone) is a :class:`~clustersim.errors.WriteError` naming the
file.  Whole folders are replaced as a unit by :mod:`.folder`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import WriteError
from .paths import name_max

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _umask() -> int:
    """The process's file-creation mask."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """A file to write ``path`` through: a temporary name in the same folder, renamed into
    place when the block ends without an error (and removed if it fails)."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise WriteError(target, exc) from exc
    try:
        text = "b" not in mode
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if text else {})) as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, target)
    except WriteError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError(target, exc) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _prefix(target: Path) -> str:
    """``.NAME.``, the start of the temporary name; shorter when NAME leaves no room."""
    prefix = f".{target.name}."
    if len(os.fsencode(prefix)) + 16 > name_max(target.parent):
        return ".clustersim."
    return prefix


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename."""
    with atomic_file(path) as fh:
        fh.write(text)
    return path


def save_figure(
    fig: Figure, path: str | os.PathLike[str], fmt: str | None = None, reproducible: bool = True
) -> Path:
    """Write ``fig`` atomically as PNG or SVG (``fmt``, else by the path's suffix).

    ``reproducible``: the same figure gives the same bytes (100 dpi, no date or
    software stamp, SVG ids from a fixed salt), as every chart clustersim writes
    is (:func:`.figures.save_png_svg`).  Otherwise matplotlib's defaults (the
    figure's dpi, its version stamp).  Either way an SVG keeps its text as text
    (``svg.fonttype: none``): labels can be searched, selected and read by a screen
    reader, the file is smaller, and it is written about a quarter faster than with
    every glyph drawn as a path (the viewer draws the text in its own copy of the
    font, DejaVu Sans or its fallback).
    """
    import matplotlib

    target = Path(path)
    fmt = fmt or target.suffix.lstrip(".").lower() or "png"
    if not reproducible:
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            with atomic_file(target, "wb") as fh:
                fig.savefig(fh, format=fmt)
        return target
    with matplotlib.rc_context({"svg.hashsalt": "clustersim", "svg.fonttype": "none"}):
        with atomic_file(target, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=100, metadata=_metadata(fmt))
    return target


def _metadata(fmt: str) -> dict[str, Any]:
    if fmt == "svg":
        return {"Date": None}
    if fmt == "png":
        return {"Software": None}
    return {}
