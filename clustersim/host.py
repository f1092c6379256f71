"""This machine and this process: how much memory the process may use
(:func:`machine_memory_bytes`), and pausing its garbage collector while it builds millions
of objects that live on (:func:`gc_paused`).

Read portably: the physical memory from ``os.sysconf`` (Linux, macOS, the BSDs) or
Windows' ``GlobalMemoryStatusEx``, and inside a container the control group's limit when
it is smaller (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``).  What
:func:`clustersim.budget.default_max_memory` takes its share of.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager


def machine_memory_bytes() -> float | None:
    """This machine's memory, bytes: the physical memory, or the control group's limit
    where the process runs in one with less (a container: cgroup v2 ``memory.max``, v1
    ``memory.limit_in_bytes``); None where neither can be read."""
    sizes = [size for size in (_physical_memory(), _cgroup_memory()) if size]
    return float(min(sizes)) if sizes else None


def _physical_memory() -> int | None:
    """``SC_PHYS_PAGES x SC_PAGE_SIZE`` (Linux, macOS, the BSDs), or Windows'
    ``GlobalMemoryStatusEx``."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        pass
    try:  # Windows: no sysconf
        import ctypes

        words = ("total", "free", "page", "free_page", "virtual", "free_virtual", "extended")

        class _Status(ctypes.Structure):  # MEMORYSTATUSEX
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong)]
            _fields_ += [(name, ctypes.c_ulonglong) for name in words]

        status = _Status()
        status.length = ctypes.sizeof(_Status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
            return int(status.total)
    except (AttributeError, OSError, ValueError):
        pass
    return None


CGROUP_ROOT = "/sys/fs/cgroup"
"""Where control groups are mounted: a container's limit is ``memory.max`` (v2) or
``memory/memory.limit_in_bytes`` (v1) there, its own group's under the path that
:data:`PROC_CGROUP` names."""

PROC_CGROUP = "/proc/self/cgroup"
"""The control groups of this process (``N:controllers:/path`` lines)."""

_UNLIMITED = 2**60
"""A cgroup limit this large means none (v1 writes 2**63 rounded down to a page)."""


def _cgroup_memory() -> int | None:
    """The smallest memory limit of the control groups that hold this process (Linux)."""
    root = CGROUP_ROOT
    paths = [f"{root}/memory.max", f"{root}/memory/memory.limit_in_bytes"]
    try:
        with open(PROC_CGROUP, encoding="ascii") as fh:
            for line in fh:
                _, controllers, group = line.rstrip("\n").split(":", 2)
                if controllers == "":  # v2: 0::/path
                    paths.append(f"{root}{group}/memory.max")
                elif "memory" in controllers.split(","):
                    paths.append(f"{root}/memory{group}/memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    limits = []
    for path in dict.fromkeys(paths):
        try:
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            limits.append(int(text))
    return min(limits) if limits else None


PROMOTE_AFTER = 100_000
"""Tracked objects a pause must have left (net: :func:`gc.get_count`'s youngest count) for
:func:`gc_paused` to move them out of the young generation unscanned."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector.

    A run allocates millions of small objects that live until it ends; the
    collector would scan them again and again (it doubled the time of building
    a 2-million-send schedule, and of a 131,072-GPU cluster's 1.4 M links).  Cycles
    made meanwhile are collected after.

    A pause that leaves more than :data:`PROMOTE_AFTER` objects moves them to the oldest
    generation unscanned (:func:`promote_unscanned`): otherwise the first young collection
    after it scans them all at once (0.8 s over the 1.5 M records of Megatron's 1T run),
    though a run's objects die by reference count when its Result does (a run leaves no
    cycles but a few dozen objects: tests/test_gc_pause.py).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_count()[0] > PROMOTE_AFTER:
                promote_unscanned()
            gc.enable()


_OTHERS_FREEZE = False
"""Whether this process was seen to have frozen objects of its own (a test harness, a server
that forks).  Once seen it is not counted again: :func:`gc.get_freeze_count` walks every
frozen object, 0.1-1 s per call in a test worker whose whole heap its harness froze (105
large runs of one test session spent 99 s there)."""


def promote_unscanned() -> None:
    """Move every object the collector tracks to its oldest generation without scanning
    (:func:`gc.freeze` then :func:`gc.unfreeze`).  In a process that has frozen objects of
    its own (a test harness, a server that forks) they stay frozen, and so do these: nothing
    is unfrozen that another froze; they are freed by reference count as before, and a
    cycle among them waits for whoever unfreezes.  Whether another froze is counted until
    it is seen once (:data:`_OTHERS_FREEZE`), then taken as lasting: a process that
    unfreezes later leaves what its later large pauses made frozen."""
    global _OTHERS_FREEZE
    if not _OTHERS_FREEZE:
        _OTHERS_FREEZE = gc.get_freeze_count() > 0
    gc.freeze()
    if not _OTHERS_FREEZE:
        gc.unfreeze()
