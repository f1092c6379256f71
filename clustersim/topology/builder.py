"""Building a topology: the builder that collects devices and links, and the fabrics.

A *fabric* is a cluster kind (``cluster.kind``: two_tier, rail_optimized,
three_tier, switch, ring, fully_connected, custom).  Each is a function
``spec -> Topology`` registered in :data:`FABRICS`; a new fabric is a new
module that registers its builder and is listed in :data:`BUILTIN_FABRICS`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

from clustersim.errors import Problem, ScenarioError
from clustersim.host import gc_paused
from clustersim.registry import Registry

from .graph import Device, Link, Topology

BUILTIN_FABRICS = ("tiered", "flat", "custom")
"""Modules of :mod:`clustersim.topology` whose builders register on import."""


def _first_sentence(doc: str) -> str:
    """The first sentence of a docstring, on one line, without reST markup."""
    text = " ".join(doc.replace("``", "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


FABRICS: Registry[Any] = Registry(
    "fabrics",
    "cluster kind",
    builtins=[f"clustersim.topology.{module}" for module in BUILTIN_FABRICS],
    describe=lambda name, build: f"{name:<16} {_first_sentence(build.__doc__ or '')}",
)
"""Cluster kind -> function building its :class:`~clustersim.topology.Topology` from the spec."""

# Frozen dataclasses set each field through object.__setattr__, which doubles the
# cost of building a million links (a fully connected 1,024-device cluster).  The
# slot descriptors give the same object at half the cost.
_new_object = object.__new__
_set_index = Link.index.__set__  # type: ignore[attr-defined]
_set_name = Link.name.__set__  # type: ignore[attr-defined]
_set_src = Link.src.__set__  # type: ignore[attr-defined]
_set_dst = Link.dst.__set__  # type: ignore[attr-defined]
_set_bandwidth = Link.bandwidth_Bps.__set__  # type: ignore[attr-defined]
_set_latency = Link.latency_s.__set__  # type: ignore[attr-defined]
_get_stored_name = Link.name.__get__  # type: ignore[attr-defined]


def with_bandwidth(link: Link, bandwidth_Bps: float) -> Link:
    """A copy of ``link`` at ``bandwidth_Bps`` (bytes/s), everything else kept: what
    :func:`dataclasses.replace` gives, made through the slots (about five times faster;
    views of a topology copy hundreds of thousands of links to reprice them)."""
    if type(link) not in (Link, WiredLink):
        return replace(link, bandwidth_Bps=bandwidth_Bps)
    made = _new_object(type(link))
    _set_index(made, link.index)
    _set_name(made, _get_stored_name(link))  # a wired link's name stays made from its ends
    _set_src(made, link.src)
    _set_dst(made, link.dst)
    _set_bandwidth(made, bandwidth_Bps)
    _set_latency(made, link.latency_s)
    return made


class WiredLink(Link):
    """A link the builder made: named by its ends (``src->dst``), a name it does not store
    (1.4 M links of a 131,072-GPU cluster would hold 125 MB of names).  A copy made with
    :func:`dataclasses.replace` stores the name it is given."""

    __slots__ = ()

    @property  # type: ignore[override]
    def name(self) -> str:
        stored = _get_stored_name(self, WiredLink)
        return f"{self.src}->{self.dst}" if stored is None else stored  # type: ignore[no-any-return]

    @name.setter
    def name(self, value: str) -> None:
        _set_name(self, value)


class FabricBuilder:
    """Collects devices, switches and links in build order."""

    __slots__ = ("devices", "switches", "links")

    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self.switches: list[str] = []
        self.links: list[Link] = []

    def device(
        self,
        name: str,
        kind: Literal["gpu", "cpu"],
        spec: Any,
        node: str | None = None,
        rack: str | None = None,
    ) -> str:
        """Add a device with the compute/memory fields of ``spec``; returns its name."""
        self.devices[name] = Device(
            name=name,
            kind=kind,
            index=len(self.devices),
            flops_per_s=float(spec.flops_per_s),
            efficiency=float(spec.efficiency),
            memory_bytes=float(spec.memory_bytes),
            memory_bandwidth_Bps=float(spec.memory_bandwidth_Bps),
            node=node,
            rack=rack,
            compute=getattr(spec, "compute", None),
            type=getattr(spec, "type_name", ""),
        )
        return name

    def switch(self, name: str) -> str:
        self.switches.append(name)
        return name

    def link(self, src: str, dst: str, bandwidth_Bps: float, latency_s: float) -> Link:
        """Append the directed link ``src->dst`` (bytes/s, seconds); a ScenarioError if a
        bandwidth or latency computed from the spec (an uplink's) is not finite, or 0 B/s."""
        if not (0.0 < bandwidth_Bps < math.inf and 0.0 <= latency_s < math.inf):
            message = (
                f"link {src}->{dst} would have {bandwidth_Bps!r} B/s and {latency_s!r} s: "
                "the numbers it is computed from overflow"
            )
            raise ScenarioError(Problem("cluster", message, "a finite bandwidth above 0"))
        link = _new_object(WiredLink)
        _set_index(link, len(self.links))
        _set_name(link, None)  # made from the ends when read
        _set_src(link, src)
        _set_dst(link, dst)
        _set_bandwidth(link, bandwidth_Bps)
        _set_latency(link, latency_s)
        self.links.append(link)
        return link

    def cable(self, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> tuple[Link, Link]:
        """A full-duplex cable: links ``a->b`` and ``b->a``, in that order."""
        return (
            self.link(a, b, bandwidth_Bps, latency_s),
            self.link(b, a, bandwidth_Bps, latency_s),
        )


def build_topology(cluster_spec: Any) -> Topology:
    """The topology of a validated cluster spec (``Scenario.cluster``).

    Raises ScenarioError (key paths under ``cluster.``) for what the spec's
    schema cannot check alone: NVLink pairs out of range, duplicate names or
    unknown link endpoints in custom clusters.
    """
    kind = getattr(cluster_spec, "kind", "two_tier")
    build = FABRICS.lookup(kind, "cluster.kind")
    with gc_paused():  # 1.4 M links at 131,072 GPUs: twice as fast, and linear
        return build(cluster_spec)
