"""A collective call: an operation over a group of devices, its ranks grouped by node, and
the alpha-beta cost of one hop between two of them.

These are what every algorithm, the channel search and the protocols read; they import
nothing of the collective library, so everything in it may import them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, fields
from typing import Any

from ..topology import Topology


@dataclass(frozen=True)
class CollectiveCall:
    """One collective: an operation over a group of devices.

    ``size_bytes`` is nccl-tests' size (see :mod:`clustersim.collectives.ops`);
    ``root`` a rank index (rooted operations); ``chunk_bytes`` the pipelining
    chunk of algorithms that pipeline (``None``: the algorithm's default);
    ``bidirectional`` runs a ring both ways, half the data each way;
    ``reduce_cost`` makes each reduction cost its bytes over the receiving
    device's memory bandwidth (free by default).
    """

    op: str
    devices: tuple[str, ...]
    size_bytes: float
    algorithm: str = "ring"
    root: int = 0
    chunk_bytes: float | None = None
    bidirectional: bool = False
    reduce_cost: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    """Algorithm-specific options (e.g. hierarchical's ``inter`` algorithm)."""
    protocol: str | None = None
    """NCCL protocol (``LL``, ``LL128``, ``Simple``, or ``auto``: the fastest by the cost
    model) priced on top of the links (:mod:`clustersim.collectives.protocol`); None (or
    ``none``, kept as None): sends cost only what the links give."""
    connections: tuple[int, ...] = (0,)
    """The channels (NCCL connections) whose sends this call stands for: with ECMP each
    connection of a pair hashes onto its own route, so the congestion-aware analytical
    model spreads a pair's flows evenly over these connections' routes, as the flow-level
    model plays them (:func:`clustersim.collectives.slices` sets them per slice)."""

    def __post_init__(self) -> None:
        if self.protocol == "none":
            object.__setattr__(self, "protocol", None)

    @property
    def n(self) -> int:
        """Number of ranks."""
        return len(self.devices)


@dataclass(frozen=True)
class HopCost:
    """Alpha-beta cost of sending between two devices on an idle network."""

    alpha_s: float
    """Latency of the route in seconds."""
    beta_s_per_B: float
    """Seconds per byte: 1 / the route's bottleneck bandwidth."""

    def time(self, nbytes: float) -> float:
        """alpha + nbytes x beta, in seconds."""
        return self.alpha_s + nbytes * self.beta_s_per_B

    @classmethod
    def between(cls, topology: Topology, src: str, dst: str) -> HopCost:
        """The cost of the (first) route from ``src`` to ``dst``."""
        route = topology.first_route(src, dst)
        return cls(route.latency_s, 1.0 / route.bottleneck_Bps)

    @classmethod
    def worst(cls, costs: list[HopCost]) -> HopCost:
        """Largest alpha and largest beta of ``costs`` (the slowest hop dominates)."""
        return cls(max(c.alpha_s for c in costs), max(c.beta_s_per_B for c in costs))


def node_groups(call: CollectiveCall, topology: Topology) -> list[list[int]] | None:
    """Ranks of ``call`` grouped by node, nodes in order of first rank; None if a device has no node."""
    groups: dict[str, list[int]] = {}
    for rank, name in enumerate(call.devices):
        node = topology.device(name).node
        if node is None:
            return None
        groups.setdefault(node, []).append(rank)
    return list(groups.values())


def call_key(call: CollectiveCall, devices: Hashable, *more: Any) -> Hashable | None:
    """``call`` as a cache key: its fields with ``devices`` standing for its devices (the
    devices themselves, or the orbit of a group that sits alike), its options as sorted
    items, then ``more``; None when an option cannot be a key (a nested mapping)."""
    own = tuple(
        devices if f.name == "devices" else getattr(call, f.name)
        for f in fields(call)
        if f.name != "options"
    )
    try:
        options = tuple(sorted(call.options.items()))
        hash(options)
    except TypeError:
        return None
    return (own, options, *more)
