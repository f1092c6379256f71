"""A pair's connection: the route the sends between two ranks take on one channel."""

from __future__ import annotations

from typing import Any


def pair_route(topology: Any, src: str, dst: str, connection: int = 0) -> Any:
    """The route every send from ``src`` to ``dst`` on ``connection`` (a channel) takes, or
    False to split each send over the equal-cost routes (``spine_routing: split``).

    With ECMP the pair's connection hashes once onto one route (as a NCCL connection's
    packets keep their path): every send of the pair takes it.
    """
    found = topology.routes(src, dst)
    if len(found) == 1:
        return found[0]
    if topology.spine_routing == "split":
        return False
    return topology.route(src, dst, f"connection{connection}")  # see fluid.pair_flows
