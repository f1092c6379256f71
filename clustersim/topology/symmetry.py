"""Symmetry of racked clusters: when two groups of devices sit alike.

Two groups of devices (ordered lists of names) are *alike* when a relabelling of the
cluster's pods, of the racks inside each pod, of the NVLink domains inside each rack and
of the nodes inside each domain maps one onto the other, rank by rank, keeping each
device's place inside its node (``gpu3`` stays ``gpu3``).  In two-tier, three-tier and
rail-optimized clusters built from one node spec such a relabelling maps links onto links
of the same bandwidth and latency and routes onto routes in the same order (spine ``k``
and core ``m`` keep their numbers), so anything priced on the group's routes -- a
collective's cost, NCCL's choice of algorithm and protocol, its channels -- is the same
for both.  :func:`orbit_key` gives alike groups one key; callers pricing thousands of
groups of one shape (the data-parallel rings of a 16,384-GPU cluster) price one of each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

OrbitKey = tuple[tuple[int, int, int, int, str], ...]
"""Per rank: (pod, rack, NVLink domain, node) numbered by first appearance, and the
device's own name inside its node."""


_KEY_CACHE_NAMES = 1 << 18
"""Names in the groups whose orbit keys :meth:`Orbits.key` remembers (then it starts
afresh): about 25 MB of keys."""


class Orbits:
    """A racked cluster's places indexed by level: pod -> its racks, rack -> its NVLink
    domains, domain -> its nodes, each in build order (a node outside a multi-node NVLink
    domain is its own domain).  ``places`` maps a device to where it sits (``rack``,
    ``node`` and ``nvdomain`` attributes), ``pod_of`` a rack to its pod (None: one pod)."""

    def __init__(self, places: Mapping[str, Any], pod_of: Sequence[int] | None) -> None:
        self.places = places
        self.pod_of = pod_of
        self._keys: dict[tuple[str, ...], OrbitKey | None] = {}
        self._names_kept = 0
        self.domain_of: dict[str, str] = {}
        for place in places.values():
            if "/nvdomain" in place.nvdomain:  # a domain of several nodes (docs/internals.md)
                self.domain_of[place.node] = place.nvdomain
        racks: dict[int, dict[int, None]] = {}
        domains: dict[int, dict[str, None]] = {}
        nodes: dict[str, dict[str, None]] = {}
        for place in places.values():
            rack, domain = place.rack, self.domain_of.get(place.node, place.node)
            racks.setdefault(self._pod(rack), {})[rack] = None
            domains.setdefault(rack, {})[domain] = None
            nodes.setdefault(domain, {})[place.node] = None
        self.racks_of = {pod: list(v) for pod, v in racks.items()}
        self.domains_of = {rack: list(v) for rack, v in domains.items()}
        self.nodes_of = {domain: list(v) for domain, v in nodes.items()}

    def _pod(self, rack: int) -> int:
        return self.pod_of[rack] if self.pod_of is not None else 0

    def key(self, names: Sequence[str]) -> OrbitKey | None:
        """The orbit of the group ``names`` (see the module docstring): equal keys, alike
        groups; None if a name has no place (a device outside the racks, such as
        checkpoint storage).  Remembered per group (a group is priced many times: its
        channels, ``auto``, its work estimate, each bucket)."""
        group = tuple(names)
        found = self._keys.get(group, False)
        if found is False:
            if self._names_kept + len(group) > _KEY_CACHE_NAMES:
                self._keys.clear()
                self._names_kept = 0
            found = self._keys[group] = self._key(group)
            self._names_kept += len(group)
        return found

    def _key(self, names: Sequence[str]) -> OrbitKey | None:
        pods: dict[int, int] = {}
        racks: dict[int, int] = {}
        domains: dict[str, int] = {}
        nodes: dict[str, int] = {}
        places, domain_of = self.places, self.domain_of
        out = []
        for name in names:
            place = places.get(name)
            if place is None:
                return None
            node = place.node
            out.append(
                (
                    pods.setdefault(self._pod(place.rack), len(pods)),
                    racks.setdefault(place.rack, len(racks)),
                    domains.setdefault(domain_of.get(node, node), len(domains)),
                    nodes.setdefault(node, len(nodes)),
                    name.rsplit("/", 1)[-1],
                )
            )
        return tuple(out)

    def canonical(self, key: OrbitKey) -> list[str]:
        """The first group of the orbit ``key`` names: label ``i`` of each level is the
        ``i``-th pod, the ``i``-th rack of its pod not yet taken, and so on."""
        pods = sorted(self.racks_of)
        pod_at: dict[int, int] = {}
        rack_at: dict[int, int] = {}
        domain_at: dict[int, str] = {}
        node_at: dict[int, str] = {}
        taken: dict[object, int] = {}
        names = []
        for p, r, d, n, local in key:
            pod = pod_at.setdefault(p, pods[p])
            if r not in rack_at:
                rack_at[r] = self.racks_of[pod][_next(taken, ("pod", pod))]
            rack = rack_at[r]
            if d not in domain_at:
                domain_at[d] = self.domains_of[rack][_next(taken, ("rack", rack))]
            domain = domain_at[d]
            if n not in node_at:
                node_at[n] = self.nodes_of[domain][_next(taken, ("domain", domain))]
            names.append(f"{node_at[n]}/{local}")
        return names


def _next(taken: dict[object, int], level: object) -> int:
    """The next free position under ``level`` (0, 1, ...), marked taken."""
    at = taken.get(level, 0)
    taken[level] = at + 1
    return at
