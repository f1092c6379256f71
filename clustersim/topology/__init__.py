"""Cluster topology: devices, switches, directed links and routes.

* :mod:`~clustersim.topology.graph` -- :class:`Link`, :class:`Device`,
  :class:`Route` and :class:`Topology` (lookup, globs, routing).
* :mod:`~clustersim.topology.builder` -- :func:`build_topology` and the
  registry of fabrics (cluster kinds).
* :mod:`~clustersim.topology.tiered`, :mod:`~clustersim.topology.flat`,
  :mod:`~clustersim.topology.custom` -- the built-in fabrics.
* :mod:`~clustersim.topology.storage` -- :func:`attach_storage`: a checkpoint storage
  service cabled to a built topology.
"""

from .builder import FABRICS, FabricBuilder, build_topology, with_bandwidth
from .graph import EMPTY_ROUTE, MAX_ROUTES, Device, Link, Route, Topology, TopologyView
from .storage import STORAGE, attach_storage
from .tiered import nic_node, pod_uplink_Bps, rack_uplink_Bps

__all__ = [
    "nic_node",
    "EMPTY_ROUTE",
    "FABRICS",
    "FabricBuilder",
    "MAX_ROUTES",
    "STORAGE",
    "Device",
    "Link",
    "Route",
    "Topology",
    "TopologyView",
    "attach_storage",
    "build_topology",
    "pod_uplink_Bps",
    "rack_uplink_Bps",
    "with_bandwidth",
]
