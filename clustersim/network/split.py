"""A send split evenly over equal-cost routes (``cluster.spine_routing: split``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flow_level import Network


class SplitSend:
    """A send split evenly over equal-cost routes; notifies once, when the last part arrives."""

    __slots__ = ("left", "notify", "flows")

    def __init__(
        self,
        network: Network,
        routes: Any,
        size_bytes: float,
        notify: Callable[[Any], None],
        tag: Any,
    ) -> None:
        self.left = len(routes)
        self.notify = notify
        share = size_bytes / len(routes)
        self.flows = [network.transfer(r, share, self._part_done, tag) for r in routes]

    def _part_done(self, flow: Any) -> None:
        self.left -= 1
        if self.left == 0:
            self.notify(flow)
