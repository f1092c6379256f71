"""Bookkeeping of a hybrid run: activation memory over time, bubbles per iteration window,
and how many data-parallel collectives share a link.  Units: seconds, bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...collectives import CollectiveCall
from ...metrics.spans import device_spans
from ...records import Record

Interval = tuple[float, float]


def link_sharing(topology: Any, calls: Sequence[CollectiveCall]) -> int:
    """The largest number of ``calls`` (run at once) whose ring-neighbour routes cross one link.

    The data-parallel collectives of a stage, one per tensor rank, start together;
    with tensor groups inside nodes each of them crosses the same NICs.
    """
    if len(calls) < 2:
        return 1
    users: dict[int, int] = {}
    for call in calls:
        devices = call.devices
        links = {
            link.index
            for a, b in zip(devices, devices[1:] + devices[:1], strict=True)
            for link in topology.first_route(a, b).links
        }
        for index in links:
            users[index] = users.get(index, 0) + 1
    return max(users.values(), default=1)


def stage_link_sharing(
    topology: Any, calls_by_stage: Mapping[int, Sequence[CollectiveCall]]
) -> dict[int, int]:
    """:func:`link_sharing` of each stage's calls, routed once per orbit: stages whose
    groups, taken together, sit alike (:mod:`clustersim.topology.symmetry`) cross alike links
    in alike numbers (the 16 stages of a 131,072-GPU run are one orbit: one routing of 8,192
    ring hops instead of 16)."""
    orbit_key = getattr(topology, "orbit_key", None)
    by_orbit: dict[Any, int] = {}
    out: dict[int, int] = {}
    for stage, calls in calls_by_stage.items():
        key = None
        if orbit_key is not None and len(calls) > 1:
            key = orbit_key(tuple(device for call in calls for device in call.devices))
        if key is None:
            out[stage] = link_sharing(topology, calls)
        else:
            if key not in by_orbit:
                by_orbit[key] = link_sharing(topology, calls)
            out[stage] = by_orbit[key]
    return out


class ActivationMemory:
    """Activations stored on one stage device: bytes and micro-batches, their peaks over time."""

    def __init__(self, record: bool) -> None:
        self.held: dict[tuple[int, int], float] = {}
        self.bytes = 0.0
        self.peak_bytes = 0.0
        self.peak_count = 0
        self.record = record
        self.timeline: list[list[float]] = []
        """``[time_s, micro-batches stored, bytes stored]`` at each change, iteration 0 only."""

    def store(self, key: tuple[int, int], nbytes: float, now: float, it: int) -> None:
        self.held[key] = nbytes
        self.bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.peak_count = max(self.peak_count, len(self.held))
        self._note(now, it)

    def shrink(self, key: tuple[int, int], share: float, now: float, it: int) -> None:
        """Keep ``share`` of what ``key`` stores (a zero-bubble B frees the rest)."""
        kept = self.held[key] * share
        self.bytes -= self.held[key] - kept
        self.held[key] = kept
        self._note(now, it)

    def free(self, key: tuple[int, int], now: float, it: int) -> None:
        self.bytes -= self.held.pop(key)
        if not self.held:
            self.bytes = 0.0
        self._note(now, it)

    def _note(self, now: float, it: int) -> None:
        if self.record and it == 0:
            self.timeline.append([now, len(self.held), self.bytes])


def iteration_windows(ends: Sequence[float]) -> list[Interval]:
    """Iteration windows: from the end of the previous iteration (or 0) to its end."""
    return [(ends[i - 1] if i else 0.0, end) for i, end in enumerate(ends)]


def bubble_by_iteration(
    records: Sequence[Record], devices: Sequence[str], windows: Sequence[Interval]
) -> dict[str, list[dict[str, float]]]:
    """Per device and iteration window: compute, exposed communication, idle (s), bubble fraction.

    ``bubble_fraction`` = idle / window: the share of the iteration the device neither
    computes nor communicates (waiting on another stage), as every training summary's
    ``bubble_fraction`` (:data:`clustersim.metrics.training.BUBBLE_FRACTION`); exposed
    communication (inter-stage transfers, the gradient all-reduce) is not bubble.  A
    transfer or collective counts on both of its ends.
    """
    spans = device_spans(records)
    ids = {name: i for i, name in enumerate(spans.names)}
    busy = spans.busy_in_windows(windows)
    out: dict[str, list[dict[str, float]]] = {}
    for device in devices:
        i = ids.get(device)
        rows = []
        for (lo, hi), (computes, busies) in zip(windows, busy, strict=True):
            compute_s = computes[i] if i is not None else 0.0
            busy_s = busies[i] if i is not None else 0.0
            length = hi - lo
            idle_s = max(length - busy_s, 0.0)
            rows.append(
                {
                    "compute_s": compute_s,
                    "exposed_communication_s": busy_s - compute_s,
                    "idle_s": idle_s,
                    "bubble_fraction": idle_s / length if length > 0 else 0.0,
                }
            )
        out[device] = rows
    return out
