"""The package's caches of work done on a cluster, and how to let them all go at once.

Pricing and playing collectives keep what they worked out for a topology (its ring and tree
hop costs, NCCL's channel graphs, the slices of a call, the fluid phases of a group, views
of the fabric) in module-level caches, so that the next call, run or plan candidate on the
same cluster does not work it out again.  Each cache is bounded, but its entries hold the
topology they were made for: after a run of 131,072 GPUs they keep its 1.4 M links alive
(about 2.7 M objects, 0.5 GB) until the cache fills up with something else.

:func:`clear_caches` empties every cache registered here: a program that is done with a
large cluster (a notebook, a long-lived service, a test session) gets its memory back, and
every later fork of the process (a process pool's workers) copies a smaller heap.  Results
never depend on what is cached: the caches only save work.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["clear_caches", "registered"]


class _Clearable(Protocol):
    def clear(self) -> None: ...


C = TypeVar("C", bound=_Clearable)

_CACHES: list[_Clearable] = []


def registered(cache: C) -> C:
    """Register ``cache`` (a dict or anything with ``clear()``) for :func:`clear_caches`;
    returns it, so a module writes ``_CACHE: dict[K, V] = registered({})``."""
    _CACHES.append(cache)
    return cache


def clear_caches() -> None:
    """Empty every registered cache (see the module docstring).  Costs nothing to results:
    the next call on a cluster works out again what it needs."""
    for cache in _CACHES:
        cache.clear()
