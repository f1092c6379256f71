"""The network: links, flows and how flows share link bandwidth.

* :mod:`~clustersim.network.flow_level` -- the *flow-level max-min* model
  (:class:`Network`): every transfer is a flow, rates are max-min fair and
  recomputed whenever a flow starts or ends.
* :mod:`~clustersim.network.solver` -- the progressive filling behind it.
* :mod:`~clustersim.network.flow` -- a flow, and what the network reads from
  links and routes.

The *congestion-aware analytical* model prices whole collectives as weighted
flows on the same :class:`Network` (:mod:`clustersim.collectives.fluid`).

Determinism: all iteration is over lists and insertion-ordered dicts keyed by
integers or float times; entries due at the same time are handled in the
order they were scheduled (departures before arrivals).  Nothing depends on
hash seeds or ``id()`` (``id`` only keys a cache of validated routes), so the
same sequence of calls gives bit-identical times.
"""

from .flow import Flow, LinkLike, RouteLike
from .flow_level import LinkStats, Network
from .rates import RECOMPUTE_PRIORITY
from .solver import NUMPY_FILL_MIN_FLOWS, fill_arrays, max_min_rates

__all__ = [
    "Flow",
    "LinkLike",
    "LinkStats",
    "NUMPY_FILL_MIN_FLOWS",
    "Network",
    "RECOMPUTE_PRIORITY",
    "RouteLike",
    "fill_arrays",
    "max_min_rates",
]
