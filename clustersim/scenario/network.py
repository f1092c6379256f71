"""The ``network:`` section: how every scenario's communication is priced (the network
model, NCCL's channels and protocol), and the types of the ``channels`` and ``protocol`` keys
other sections share."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, Strict

from .fields import _Spec
from .plugins import plugin_name

MAX_CHANNELS = 64
"""Most channels a collective may run in (NCCL's limit)."""
Channels = Annotated[int, Strict(), Field(ge=1, le=MAX_CHANNELS)] | Literal["auto"]
"""Channels of a collective: a whole number 1 .. 64, or ``auto`` (NCCL's count)."""
PROTOCOL_NAMES = ("auto", "LL", "LL128", "Simple", "none")
"""Values of a ``protocol`` key; null, its spelling before ``none``, is read as ``none``."""
Protocol = Annotated[
    Literal["auto", "LL", "LL128", "Simple", "none"],
    BeforeValidator(lambda value: "none" if value is None else value),
]
"""An NCCL protocol to price (``none``: sends cost what the links give at line rate)."""


NetworkModelName = plugin_name("network-models")
"""The name of a registered network model (``clustersim list network-models``)."""


class NetworkSpec(_Spec):
    """How communication is priced."""

    model: NetworkModelName = "flow"
    """A registered network model (``clustersim list`` shows them; checked against the
    registry when the scenario is parsed, :mod:`clustersim.scenario.plugins`): ``flow``
    (flow-level max-min, default): every transfer, every send of a collective included, is
    a flow sharing links max-min fairly; ``analytical`` (congestion-aware analytical): each
    collective is a few weighted flows priced by its algorithm's alpha-beta cost, sharing
    links with everything in flight (few events; large sweeps)."""
    channels: Channels = "auto"
    """Channels per collective: each collective runs as this many equal slices at once on
    its ranks, every node's ranks rotated per channel (1 .. 64), or ``auto`` (default): the
    count NCCL's topology search gives the group (24 on one DGX A100 or H100 node, 16 across
    nodes with 8 NICs; ``clustersim/collectives/channels.py``).  Collectives of one process
    group always run one after another."""
    protocol: Protocol = "auto"
    """NCCL protocol priced for every collective: ``auto`` (default: the fastest by NCCL's
    tuner model, per collective), ``LL``, ``LL128``, ``Simple`` (base and per-hop latency,
    share of the links, links at the bandwidth NCCL reaches on them; see
    ``clustersim/collectives/protocol.py``), or ``none`` (null too): sends cost what the
    links give at their line rate."""
