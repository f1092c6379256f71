"""The collective communication library.

Collectives are built from transfers on the simulated network (flow-level
mode, the default), so contention, oversubscription and stragglers act on
them; or priced in closed form by their algorithm's alpha-beta cost
(analytical mode, ``network: {model: analytical}``).

```python
from clustersim.collectives import CollectiveCall, run_collective
call = CollectiveCall("allreduce", devices, 160e6, algorithm="ring")
done = run_collective(sim, call)       # a SimPy event; yield it from a process
```
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import simpy

from ..caches import registered
from ..errors import Problem, ScenarioError
from .algorithm import (
    Algorithm,
    algorithm,
    applicable_algorithms,
    check_call,
    registered_algorithms,
)
from .auto import resolve, resolve_once
from .call import CollectiveCall, HopCost, call_key, node_groups
from .channels import (
    AUTO,
    MAX_CHANNELS,
    channel_order,
    nccl_channels,
    node_nics,
    simulated_slices,
)
from .communicator import communicator
from .execution import execute
from .models import Launch, network_model
from .ops import OPERATIONS, bandwidths, canonical_op, root_problem, timed_group_problem
from .protocol import PROTOCOLS, priced_cost, protocol_call
from .schedule import Schedule

if TYPE_CHECKING:
    from ..engine import Simulation
    from ..topology import Topology

__all__ = [
    "OPERATIONS",
    "Algorithm",
    "CollectiveCall",
    "HopCost",
    "Schedule",
    "analytical_time",
    "applicable_algorithms",
    "bandwidths",
    "canonical_op",
    "channel_count",
    "check_call",
    "execute",
    "hold_group",
    "registered_algorithms",
    "root_problem",
    "run_collective",
    "slices",
    "timed_group_problem",
    "what_ran",
]


def label_of(call: CollectiveCall) -> str:
    """Timeline label of a call, e.g. ``allreduce/ring``."""
    return f"{call.op}/{call.algorithm}"


def run_collective(
    sim: Simulation,
    call: CollectiveCall,
    *,
    model: str = "flow",
    label: str | None = None,
    iteration: int = -1,
    record_transfers: bool | None = None,
    channels: int | str = 1,
    group: Hashable | None = None,
    op: str = "",
) -> simpy.Event:
    """Submit ``call`` to its process group; the event fires when every rank is done.

    ``model`` is ``flow`` (simulate the algorithm's transfers, flow-level max-min) or
    ``analytical`` (congestion-aware analytical: the algorithm's alpha-beta cost, its
    bandwidth part played as weighted flows that share links with everything else in
    flight; see :mod:`clustersim.collectives.fluid`).

    Collectives of one group run in issue order, one at a time
    (:mod:`clustersim.collectives.communicator`): ``call`` starts now if its group is
    idle, else when the collectives submitted before it have ended.  ``group`` names the
    communicator (default: the call's device tuple).  ``channels`` (a count, or ``auto``:
    NCCL's) splits the call into that many equal slices that run at once
    (:func:`channel_call`: each node's ranks rotated per channel; copies of a rotation
    played as one, :func:`slices`).  ``algorithm: auto`` and ``protocol: auto`` are
    resolved once for the call, the same for every slice (:mod:`clustersim.collectives.auto`).  ``op`` is the ``op`` of the
    call's ``collective`` records (default empty; its sends' transfers keep ``step<k>``).
    """
    algo = check_call(call, sim.topology)
    parts = slices(call, sim.topology, channels, model)
    # A slice runs the call's algorithm, or what auto chose for it (checked by auto).
    algos = [
        algo if part.algorithm == call.algorithm else algorithm(part.algorithm) for part in parts
    ]
    label = label or label_of(parts[0])

    def start() -> simpy.Event:
        events = [
            _start(sim, part, algo, model, label, iteration, record_transfers, channel, op)
            for channel, (part, algo) in enumerate(zip(parts, algos, strict=True))
        ]
        return events[0] if len(events) == 1 else sim.all_of(events)

    key = call.devices if group is None else group
    return communicator(sim, key).submit(start)


def slices(
    call: CollectiveCall, topology: Topology, channels: int | str = 1, model: str = "flow"
) -> list[CollectiveCall]:
    """The slices ``call`` runs as on ``channels`` channels (``auto``: NCCL's count,
    :mod:`~clustersim.collectives.channels`) in network ``model``, ``auto`` resolved once
    for all of them (:func:`~clustersim.collectives.auto.choose_once`): as many as
    :func:`~clustersim.collectives.channels.simulated_slices` says (the channels' distinct
    rotations, each carrying its copies' bytes), each priced beside the others."""
    key = call_key(call, call.devices, topology, channels, model)
    found = _SLICES.get(key) if key is not None else None
    if found is not None:  # a call is sliced for its estimate, its run and its summary
        return list(found)
    count = channel_count(call, topology, channels)
    played = simulated_slices(call, topology, count, network_model(model).plays_sends)
    parts = [
        _standing_for(channel_call(call, topology, c, played), c, count, played)
        for c in range(played)
    ]
    found = resolve_once(parts, topology)
    if key is not None:
        if len(_SLICES) >= _SLICES_KEPT:
            _SLICES.clear()
        _SLICES[key] = found
    return list(found)


def _standing_for(part: CollectiveCall, c: int, channels: int, played: int) -> CollectiveCall:
    """Slice ``c`` of ``played`` with the connections of the ``channels`` it stands for:
    ``c``, ``c + played``, ... (its copies' channels, merged into it)."""
    connections = tuple(range(c, channels, played))
    return part if part.connections == connections else replace(part, connections=connections)


_SLICES: dict[tuple[Any, ...], list[CollectiveCall]] = registered({})
_SLICES_KEPT = 4096
"""Calls whose slices :func:`slices` remembers (then it starts afresh)."""


def channel_count(call: CollectiveCall, topology: Topology, channels: int | str = 1) -> int:
    """``channels`` as a count for ``call``: ``auto`` is NCCL's; else a whole number 1 .. 64."""
    if channels == AUTO:
        return nccl_channels(call.devices, topology) if call.n > 1 else 1
    if not (isinstance(channels, int) and 1 <= channels <= MAX_CHANNELS):
        raise ScenarioError(
            Problem("channels", f"expected auto or a whole number 1 .. 64, got {channels!r}")
        )
    return channels


def what_ran(call: CollectiveCall, topology: Topology, channels: int | str = 1) -> str:
    """``algorithm/protocol`` that runs ``call`` (``auto`` resolved, one choice for all its
    channels), or the algorithm alone without a protocol."""
    ran = slices(call, topology, channels)[0] if call.n > 1 else call
    return "/".join(x for x in (ran.algorithm, ran.protocol) if x)


def channel_call(
    call: CollectiveCall, topology: Topology, channel: int, channels: int
) -> CollectiveCall:
    """Slice ``channel`` of ``call`` split over ``channels``: S / channels bytes, and (with
    several channels, on several nodes) each node's ranks rotated so that the channel's
    ring or tree enters and leaves the node through the GPUs and the NIC NCCL gives it
    (:func:`~clustersim.collectives.channels.channel_order`).  The root stays the same
    device."""
    if channels == 1:
        return call
    part = replace(call, size_bytes=call.size_bytes / channels)
    groups = node_groups(call, topology)
    if groups is None or len(groups) < 2:
        return part
    order = []
    for ranks in groups:
        order += channel_order(ranks, node_nics(call.devices, ranks, topology), channel)
    devices = tuple(call.devices[r] for r in order)
    root = order.index(call.root) if OPERATIONS[call.op].rooted else call.root
    return replace(part, devices=devices, root=root)


def _start(
    sim: Simulation,
    call: CollectiveCall,
    algo: Algorithm,
    model: str,
    label: str,
    iteration: int,
    record_transfers: bool | None,
    channel: int = 0,
    op: str = "",
) -> simpy.Event:
    """Start ``call`` now, in the network model ``model``, on connection ``channel``; its end event.

    With a protocol, the base latency passes first, sends carry the wire bytes and
    routes the protocol's hop latency, or the algorithm's share of NCCL's latency model
    (:func:`~clustersim.collectives.protocol.protocol_call`)."""
    topology: Any = sim.topology
    protocol = PROTOCOLS.get(call.protocol) if call.protocol else None
    delay = 0.0
    if protocol is not None and call.n > 1:
        topology, call = protocol_call(algo, call, sim.topology, protocol)
        delay = protocol.base_latency(algo.name)
    launch = Launch(
        sim, call, algo, label, iteration, topology, delay, record_transfers, channel, op
    )
    return network_model(model).start(launch)


def analytical_time(call: CollectiveCall, topology: Topology) -> float:
    """Seconds ``call`` takes by its algorithm's alpha-beta formula (with its protocol)."""
    check_call(call, topology)
    call = resolve(call, topology)
    return priced_cost(check_call(call, topology), call, topology)


def hold_group(
    sim: Simulation,
    devices: tuple[str, ...] | list[str],
    seconds: float,
    label: str,
    *,
    iteration: int = -1,
    nbytes: float = 0.0,
    microbatch: int = -1,
    stage: int = -1,
) -> simpy.Event:
    """Hold ``devices`` in a collective priced at ``seconds`` (no flows): one ``collective``
    record per device from now, and the event that fires when it ends."""
    start = sim.now
    sim.book_collective(
        devices, label, start, start + seconds, nbytes, iteration, microbatch, stage
    )
    return sim.timeout(seconds, f"the priced time of collective '{label}'")
