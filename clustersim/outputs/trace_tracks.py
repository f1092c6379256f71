"""What ``trace.json`` adds to the records' slices: receive slices, flow arrows, counters.

* **Receive slices.**  A transfer's slice sits on its source device.  Each
  transfer of positive duration between two devices also gets a short slice on
  its destination's ``receive`` thread (``cat`` ``recv``): the last
  :data:`RECV_US` microseconds of the transfer (at most half of it), the moment
  the data lands, as NCCL's receive kernels end in a PyTorch profiler trace.
* **Flow arrows** (Perfetto's JSON flow events, version 2: ``bind_id`` with
  ``flow_out`` / ``flow_in`` on the ``X`` events, each slice bound to exactly
  the arrows meant for it): every transfer's slice has an arrow to its receive
  slice; within one collective call (same label, iteration, micro-batch and
  stage; steps are ``op`` ``step<k>``), the receive of step *k* on a device has
  an arrow to that device's next send of step *k + 1* that starts after it (the
  chunk it forwards).  Chained arrows share one ``bind_id``: a slice with both
  ``flow_in`` and ``flow_out`` is a step of the flow, as Perfetto reads it.  An
  arrow always ends strictly later than it starts, so no reader depends on the
  order of events with the same timestamp.
* **Network counters** (``"ph": "C"``, named ``<device> network`` with
  ``send_Bps`` and ``recv_Bps``): the bytes per second a device sends and
  receives, each transfer's bytes spread evenly over its duration, a step
  function whose integral is the bytes.  Routes are not in the records (which
  of the equal-cost routes a flow took is the engine's), so these are
  per-device network-interface counters, not per-link ones; only the
  :data:`NETWORK_COUNTER_CAP` devices that moved the most bytes get them, so a
  1,024-GPU trace stays small.
* **Memory counters** (``<device> activations`` with ``bytes``): a pipeline
  run's stored activations per stage over time (``summary.json``'s
  ``activation_memory.<stage>.timeline``, replica 0), on the first device (in
  natural order) that computes that stage.

Everything here is linear in the records (plus a sort).  Times are trace
microseconds (:func:`clustersim.outputs.trace._us` rounding).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..records import Record

RECV_US = 1.0
"""Length of a receive slice, microseconds (at most half of its transfer)."""

RECV_KIND = "recv"
"""``kind`` (and ``cat``) of receive slices."""

NETWORK_COUNTER_CAP = 16
"""Devices that get network counters: the ones that sent and received the most bytes."""

_STEP = re.compile(r"^step(\d+)$")

Bind = tuple[int, bool, bool]
"""A slice's flow binding: ``bind_id``, ``flow_in``, ``flow_out``."""


def receive_record(record: Record, us: Callable[[float], float]) -> Record | None:
    """The receive slice of a transfer (``None`` when it has none), as a record on ``dst``.

    ``us`` turns seconds into trace microseconds; the slice starts strictly after
    the transfer does."""
    if record.kind != "transfer" or not record.dst or record.dst == record.resource:
        return None
    length_s = min((record.end_s - record.start_s) / 2, RECV_US / 1e6)
    start_s = record.end_s - length_s
    if not us(record.start_s) < us(start_s):
        return None
    return record._replace(
        resource=record.dst, kind=RECV_KIND, start_s=start_s, src=record.resource
    )


def _step(record: Record) -> int | None:
    match = _STEP.match(record.op)
    return int(match.group(1)) if match else None


def _call(record: Record, device: str, step: int) -> tuple[Any, ...]:
    return (device, record.label, record.iteration, record.microbatch, record.stage, step)


def flow_binds(
    ordered: Sequence[Record],
    partner: Sequence[int],
    starts: Sequence[float],
    ends: Sequence[float],
) -> dict[int, Bind]:
    """Flow binding of each slice that has arrows, by index into ``ordered``.

    ``ordered`` is in timeline order; ``partner[i]`` is the index of transfer
    ``i``'s receive slice (-1 if none); ``starts``/``ends`` are trace times.
    Flow ids count from 1 in the order of the sends that start them.
    """
    binds: dict[int, Bind] = {}
    waiting: dict[tuple[Any, ...], deque[int]] = {}
    next_id = 1
    for index, record in enumerate(ordered):
        receive = partner[index]
        if receive < 0:
            continue
        step = _step(record)
        found = None
        if step:
            queue = waiting.get(_call(record, record.resource, step - 1))
            found = _take(queue, starts[index], ends) if queue else None
        if found is None:
            flow_id, flow_in = next_id, False
            next_id += 1
        else:
            flow_id, flow_in = binds[found][0], True
            binds[found] = (flow_id, True, True)
        binds[index] = (flow_id, flow_in, True)
        binds[receive] = (flow_id, True, False)
        if step is not None:
            waiting.setdefault(_call(record, record.dst, step), deque()).append(receive)
    return binds


def _take(queue: deque[int], start: float, ends: Sequence[float]) -> int | None:
    """The first receive in ``queue`` that ended by ``start``, removed from it."""
    for position, receive in enumerate(queue):
        if ends[receive] <= start:
            del queue[position]
            return receive
    return None


Counter = tuple[str, list[tuple[float, dict[str, float]]]]
"""A counter's name and its ``(ts, args)`` points, strictly increasing in ``ts``."""


def network_counters(
    ordered: Sequence[Record],
    starts: Sequence[float],
    ends: Sequence[float],
    hidden: frozenset[str] = frozenset(),
) -> dict[str, Counter]:
    """Device -> its ``network`` counter, for the :data:`NETWORK_COUNTER_CAP` busiest (none
    for the ``hidden`` devices: those a folded trace leaves out).

    Each transfer between two devices with bytes and a positive duration adds
    ``bytes / duration`` to its source's ``send_Bps`` and its destination's
    ``recv_Bps`` over ``[start, end)``; a rate is exactly 0 when nothing is on it."""
    moved: dict[str, float] = {}
    changes: dict[str, list[tuple[float, int, int, float]]] = {}
    for index, record in enumerate(ordered):
        if record.kind != "transfer" or not record.dst or record.dst == record.resource:
            continue
        duration_us = ends[index] - starts[index]
        if record.bytes <= 0 or duration_us <= 0:
            continue
        rate = record.bytes / (duration_us / 1e6)
        for device, side in ((record.resource, 0), (record.dst, 1)):
            moved[device] = moved.get(device, 0.0) + record.bytes
            points = changes.setdefault(device, [])
            points.append((starts[index], side, 1, rate))
            points.append((ends[index], side, -1, -rate))
    shown = [d for d in moved if d not in hidden]
    busiest = sorted(shown, key=lambda d: (-moved[d], natural_key(d)))[:NETWORK_COUNTER_CAP]
    return {d: (f"{d} network", _sweep(changes[d])) for d in busiest}


def _sweep(changes: list[tuple[float, int, int, float]]) -> list[tuple[float, dict[str, float]]]:
    changes.sort(key=lambda c: c[0])
    rates, active = [0.0, 0.0], [0, 0]
    points: list[tuple[float, dict[str, float]]] = []
    for position, (ts, side, step, delta) in enumerate(changes):
        active[side] += step
        rates[side] = rates[side] + delta if active[side] else 0.0
        if position + 1 < len(changes) and changes[position + 1][0] == ts:
            continue
        points.append((ts, {"recv_Bps": rates[1], "send_Bps": rates[0]}))
    return points


def memory_counters(
    summary: Mapping[str, Any] | None,
    ordered: Sequence[Record],
    us: Callable[[float], float],
) -> dict[str, Counter]:
    """Device -> its ``activations`` counter, from ``summary["activation_memory"]``."""
    stages = (summary or {}).get("activation_memory") or {}
    if not isinstance(stages, Mapping) or not stages:
        return {}
    devices: dict[int, set[str]] = {}
    for record in ordered:
        if record.kind == "compute" and record.stage >= 0:
            devices.setdefault(record.stage, set()).add(record.resource)
    first = {stage: min(found, key=natural_key) for stage, found in devices.items()}
    counters: dict[str, Counter] = {}
    for stage, block in stages.items():
        device = first.get(int(stage)) if str(stage).isdigit() else None
        timeline = block.get("timeline") if isinstance(block, Mapping) else None
        if device is None or not timeline or device in counters:
            continue
        points: dict[float, dict[str, float]] = {}
        for time_s, _held, nbytes in timeline:
            points[us(time_s)] = {"bytes": float(nbytes)}
        counters[device] = (f"{device} activations", sorted(points.items()))
    return counters


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that puts gpu2 before gpu10: text and whole numbers alternating, text first."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
