"""What a collective costs the engine, counted before it runs (:mod:`clustersim.budget`).

:func:`call_work` gives the transfers and records of one call as
:func:`clustersim.collectives.run_collective` plays it:

* flow-level model: every send of the algorithm's schedule is a transfer
  (:meth:`Algorithm.sends`, counted without building the schedule); the records are one
  ``collective`` row per rank, plus a ``transfer`` row per send when the schedule is
  small enough to record them (:data:`~clustersim.collectives.execution.RECORD_TRANSFERS_UP_TO`,
  or as ``record_transfers`` says), plus about one reduction per two sends with
  ``reduce_cost``;
* analytical model: about one weighted flow per call (hierarchical: one per level
  phase) and a row per rank, plus the sends of any schedule built to price the call
  (:meth:`Algorithm.priced_sends`).

The sends of the schedule built for the call are its :attr:`~WorkEstimate.held_sends`
(memory: the schedule is built whole before it runs, every slice's at once).

Each slice played counts as a call of its own (they run at once): with ``channels``
(``auto``: NCCL's count) the distinct rotations a collective is played in
(:func:`clustersim.collectives.slices`), not NCCL's count when copies merge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..budget import NOTHING, WorkEstimate
from ..caches import registered
from .algorithm import algorithm
from .call import CollectiveCall, call_key
from .execution import RECORD_TRANSFERS_UP_TO
from .ring_replay import plays_whole

if TYPE_CHECKING:
    from ..topology import Topology

FLUID_FLOWS_PER_CALL = {"hierarchical": 3.0}
"""Weighted flows of one call in the analytical model, where more than one (its phases)."""

_WORK: dict[Hashable, WorkEstimate] = registered({})
""":func:`call_work` by :func:`_work_key`: a call's work is the same for every group of
devices that sits alike (:mod:`clustersim.topology.symmetry`): a data-parallel bucket of
each of a cluster's replicas is counted once (the shipped scenarios' walk asks 69,830 calls
of 2,489 kinds)."""
_WORK_KEPT = 8192
"""Calls whose work :func:`call_work` remembers (then it starts afresh)."""


def call_work(
    call: CollectiveCall,
    topology: Topology,
    *,
    model: str = "flow",
    channels: int | str = 1,
    record_transfers: bool | None = None,
    alone: bool = False,
) -> WorkEstimate:
    """The transfers and records of ``call`` run once in network ``model`` on ``channels``
    channels (a count or ``auto``; see the module docstring); ``alone``: nothing else runs
    while it does (a sweep's point, a collective workload's calls), so a ring that can be
    is played whole (its sends counted as :attr:`WorkEstimate.whole_sends`)."""
    if call.n < 2:
        return WorkEstimate(records=float(call.n))
    key = _work_key(call, topology, model, channels, record_transfers, alone)
    found = _WORK.get(key) if key is not None else None
    if found is not None:
        return found
    found = _counted_work(call, topology, model, channels, record_transfers, alone)
    if key is not None:
        if len(_WORK) >= _WORK_KEPT:
            _WORK.clear()
        _WORK[key] = found
    return found


def _work_key(call: CollectiveCall, topology: Topology, *more: Any) -> Hashable | None:
    """What :func:`call_work` remembers a call's work by: its fields but its devices, the
    orbit of its devices in ``topology`` (alike groups are sliced, chosen for and counted
    alike) and ``more``; None where the cluster has no orbits (a view, mixed nodes) or an
    option cannot be a key."""
    orbit_key = getattr(topology, "orbit_key", None)
    orbit = orbit_key(call.devices) if orbit_key is not None else None
    return None if orbit is None else call_key(call, orbit, topology, *more)


def _counted_work(
    call: CollectiveCall,
    topology: Topology,
    model: str,
    channels: int | str,
    record_transfers: bool | None,
    alone: bool = False,
) -> WorkEstimate:
    """:func:`call_work`, counted."""
    from . import slices

    parts = slices(call, topology, channels, model)
    part = parts[0]
    algo = algorithm(part.algorithm)
    if model == "analytical":
        flows = FLUID_FLOWS_PER_CALL.get(part.algorithm, 1.0)
        priced = algo.priced_sends(part, topology)
        one = WorkEstimate(flows, float(call.n), priced, held_sends=priced)
    else:
        sends = algo.sends(part, topology)
        if record_transfers is None:
            record_transfers = sends <= RECORD_TRANSFERS_UP_TO
        records = call.n + (sends if record_transfers else 0.0)
        if call.reduce_cost:
            records += sends / 2
        one = WorkEstimate(sends, records, held_sends=sends)
        if alone and len(parts) == 1 and not call.reduce_cost and plays_whole(part, topology):
            one = replace(one, whole_sends=sends)
    if len(parts) == 1:
        return one
    return replace(one * len(parts), held_sends=one.held_sends * len(parts))  # built at once


def calls_work(
    calls: list[CollectiveCall],
    topology: Topology,
    *,
    model: str = "flow",
    channels: int | str = 1,
) -> WorkEstimate:
    """The work of every call of ``calls``, each once.  Its
    :attr:`~clustersim.budget.WorkEstimate.held_sends` are those of the largest call of
    each operation on each communicator (its group of devices: its reductions run one at
    a time, and so do its gathers) summed over them, as they run at once: a pipeline's
    stages and tensor ranks each reduce their gradients over their own data-parallel
    group, and the distributed optimizer's parameter gathers overlap the reductions
    (GPT-3 175B on 16,384 GPUs, interleaved with both overlaps, every replica: 7.72 GB
    peak measured, 8.0 GB estimated with 16.7 M sends held, 5.5 GB keying by group
    alone; commit e712558)."""
    total = NOTHING
    largest: dict[tuple[str, tuple[str, ...]], float] = {}
    for call in calls:
        work = call_work(call, topology, model=model, channels=channels)
        total += work
        key = (call.op, tuple(call.devices))
        largest[key] = max(largest.get(key, 0.0), work.held_sends)
    return replace(total, held_sends=sum(largest.values()))


def events_by_chunk(
    call: CollectiveCall,
    topology: Topology,
    *,
    model: str,
    channels: int | str,
    iterations: int,
    record_transfers: bool | None = None,
) -> Callable[[float], float]:
    """The events of ``iterations`` runs of ``call`` as a function of its chunk (bytes): what
    :func:`larger_chunk` bisects for a long run's notice."""

    def events_of(size: float) -> float:
        sized = replace(call, chunk_bytes=size)
        once = call_work(
            sized, topology, model=model, channels=channels, record_transfers=record_transfers
        )
        return once.events * iterations

    return events_of


LARGEST_CHUNK_EXPONENT = 50
"""The largest chunk :func:`larger_chunk` offers: 2**50 bytes (1 PiB)."""


def larger_chunk(
    events_of: Callable[[float], float], chunk_bytes: float, events: float
) -> float | None:
    """The smallest power of two above ``chunk_bytes`` (``16B``, ``64KiB``: a size easy to
    type) whose work ``events_of(chunk)`` is at most ``events``: what a long run's notice
    suggests (:func:`clustersim.budget.long_work_notice`); None if none up to
    2**:data:`LARGEST_CHUNK_EXPONENT` (the chunk is not what makes the work).  The work
    falls as the chunk grows (fewer, larger sends), so the powers are bisected: about six
    calls of ``events_of``."""
    low = math.floor(math.log2(chunk_bytes)) + 1 if chunk_bytes > 0 else 0
    high = LARGEST_CHUNK_EXPONENT
    if low > high or events_of(2.0**high) > events:
        return None
    while low < high:  # the answer's exponent is in [low, high]
        middle = (low + high) // 2
        if events_of(2.0**middle) <= events:
            high = middle
        else:
            low = middle + 1
    return 2.0**low
