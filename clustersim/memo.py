"""A bounded memo for work that is asked for again only sometimes.

Pricing and playing a collective routes its group over the fabric; a data-parallel group's
buckets ask for the same routes again and again, but a one-iteration run at scale asks for
most groups once.  :class:`RepeatMemo` keeps a value only from the second time its key is
asked for, so that the groups asked for once cost no memory, and holds at most ``limit``
values (all dropped when full, as the other caches of the package do).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def kept(cache: dict[K, V], key: K, make: Callable[[], V], limit: int) -> V:
    """``cache[key]``, made by ``make()`` and kept the first time it is asked for (the
    cache emptied first when it holds ``limit`` values, as the package's caches are)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= limit:
            cache.clear()
        found = cache[key] = make()
    return found


class RepeatMemo(Generic[V]):
    """Values by key, kept from a key's second offer on (see the module docstring)."""

    __slots__ = ("limit", "kept", "asked")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """Most values (and most keys asked for once) remembered."""
        self.kept: dict[Hashable, V] = {}
        self.asked: set[Hashable] = set()

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key``, or None."""
        return self.kept.get(key)

    def offer(self, key: Hashable, value: V) -> None:
        """Keep ``value`` if ``key`` was offered before; else remember that it was."""
        if key in self.asked:
            if len(self.kept) >= self.limit:
                self.kept.clear()
            self.kept[key] = value
            return
        if len(self.asked) >= self.limit:
            self.asked.clear()
        self.asked.add(key)

    def clear(self) -> None:
        """Forget every value and every key."""
        self.kept.clear()
        self.asked.clear()
