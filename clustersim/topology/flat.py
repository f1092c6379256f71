"""Flat clusters: devices on one switch, a ring, or fully connected."""

from __future__ import annotations

from typing import Any

from .builder import FABRICS, FabricBuilder
from .graph import Device, Link, Route, Topology


def _flat_devices(b: FabricBuilder, spec: Any) -> list[str]:
    kind = spec.device_kind
    return [b.device(f"{kind}{i}", kind, spec.device) for i in range(int(spec.devices))]


class _SwitchRouter:
    __slots__ = ("up", "down")

    def __init__(self, up: list[Link], down: list[Link]) -> None:
        self.up = up  # [device index]: device -> switch
        self.down = down  # [device index]: switch -> device

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        return (Route.of((self.up[src.index], self.down[dst.index])),)


def _build_switch(spec: Any) -> Topology:
    """Devices on one non-blocking switch."""
    b = FabricBuilder()
    names = _flat_devices(b, spec)
    switch = b.switch("switch")
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    up: list[Link] = []
    down: list[Link] = []
    for name in names:
        there, back = b.cable(name, switch, bw, lat)
        up.append(there)
        down.append(back)
    return Topology("switch", b.devices, b.links, b.switches, _SwitchRouter(up, down))


class _RingRouter:
    __slots__ = ("forward", "backward")

    def __init__(self, forward: list[Link], backward: list[Link] | None) -> None:
        self.forward = forward  # [i]: link i -> i+1 (mod n)
        self.backward = backward  # [i]: link i -> i-1 (mod n); None if unidirectional

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        n = len(self.forward)
        i, j = src.index, dst.index
        ahead = (j - i) % n
        behind = n - ahead
        found: list[Route] = []
        if self.backward is None or ahead <= behind:
            found.append(Route.of(self.forward[(i + k) % n] for k in range(ahead)))
        if self.backward is not None and behind <= ahead:
            back = Route.of(self.backward[(i - k) % n] for k in range(behind))
            if not found or found[0].links != back.links:  # n == 2: the same single cable
                found.append(back)
        return tuple(found)


def _build_ring(spec: Any) -> Topology:
    """Devices in a ring: each cabled to the next."""
    b = FabricBuilder()
    names = _flat_devices(b, spec)
    n = len(names)
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    if n < 2:
        router = _RingRouter([], None)
    elif spec.bidirectional:
        # Cable i joins i and i+1; with two devices a single cable closes the ring.
        cables = [b.cable(names[i], names[(i + 1) % n], bw, lat) for i in range(n if n > 2 else 1)]
        if n == 2:
            cables.append(cables[0][::-1])
        forward = [cables[i][0] for i in range(n)]  # i -> i+1
        backward = [cables[i - 1][1] for i in range(n)]  # i -> i-1
        router = _RingRouter(forward, backward)
    else:
        router = _RingRouter(
            [b.link(names[i], names[(i + 1) % n], bw, lat) for i in range(n)], None
        )
    return Topology("ring", b.devices, b.links, b.switches, router)


class _FullRouter:
    __slots__ = ("links", "n")

    def __init__(self, links: list[Link], n: int) -> None:
        self.links = links
        self.n = n

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        i, j = src.index, dst.index
        lo, hi = (i, j) if i < j else (j, i)
        cable = lo * (2 * self.n - lo - 1) // 2 + (hi - lo - 1)
        return (Route.of((self.links[2 * cable + (i > j)],)),)


def _build_fully_connected(spec: Any) -> Topology:
    """Every pair of devices cabled directly."""
    b = FabricBuilder()
    names = _flat_devices(b, spec)
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    cable = b.cable
    for i, a in enumerate(names):
        for other in names[i + 1 :]:
            cable(a, other, bw, lat)
    return Topology(
        "fully_connected", b.devices, b.links, b.switches, _FullRouter(b.links, len(names))
    )


FABRICS.add("switch", _build_switch)
FABRICS.add("ring", _build_ring)
FABRICS.add("fully_connected", _build_fully_connected)
