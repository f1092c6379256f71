"""Chrome trace event JSON (``trace.json``) from the records of a run.

The file opens in Perfetto (ui.perfetto.dev) and chrome://tracing.  Its shape::

    {"traceEvents": [...], "displayTimeUnit": "ms"}

* a *process* per node: the device's ``node`` when a topology is given, else
  the ``rack{r}/node{n}`` prefix of its name, else ``cluster``;
* a *thread* per device and stream: ``<device> compute`` for compute records,
  ``<device> communication`` for transfers (on their source device) and
  collective records.  A slice must nest inside, or stay clear of, the other
  slices of its thread, so concurrent transfers that overlap only partly go
  to extra threads of the same stream (``<device> communication #2``, ...);
* one complete event (``"ph": "X"``) per record, in the order of
  :func:`clustersim.records.sorted_records`: ``name`` is the label, ``ts`` and
  ``dur`` are microseconds of simulated time, ``args`` holds the record's
  ``bytes``, ``flops``, ``src``, ``dst``, ``iteration``, ``microbatch``,
  ``stage`` and ``op`` (tags that do not apply are left out).

A folded trace (``--trace replica``, the default at scale: :mod:`.modes`) is given one
replica's records and the :class:`~.fold.DeviceFold` they came from: thread names say what
each device stands for (``<device> x 64 compute``), no receive slice or counter is drawn on
a device left out, and the document says what was left out twice: in ``otherData``
(``folded``, the words and summary.json's ``folded.rows`` block) and as a global instant
event at time 0 named by those words, which Perfetto shows on top of the timeline.

Everything is derived from the records only (``resource``, ``kind``, ``src``,
``dst`` and the tags), so a trace can be rebuilt from a finished
``timeline.csv``; the same records give the same bytes.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..host import gc_paused
from ..metrics import COMMUNICATION_KINDS
from ..records import Record, sorted_records
from .atomic import write_atomic
from .fold import DeviceFold
from .trace_tracks import (
    RECV_KIND,
    Bind,
    flow_binds,
    memory_counters,
    natural_key,
    network_counters,
    receive_record,
)

US_PER_S = 1e6
"""Trace timestamps are microseconds."""

TS_DIGITS = 6
"""Decimals kept of a microsecond timestamp (picoseconds), so the JSON is short and stable."""

COMPUTE_STREAM = "compute"
COMMUNICATION_STREAM = "communication"
RECEIVE_STREAM = "receive"
"""Streams of a device: records of :data:`COMMUNICATION_KINDS` run on the communication one,
receive slices (:mod:`.trace_tracks`) on the receive one."""
STREAMS = (COMPUTE_STREAM, COMMUNICATION_STREAM, RECEIVE_STREAM)
"""Streams in the order their threads are shown."""

_NODE_PREFIX = re.compile(r"^(rack[^/]+/node[^/]+)/")


def node_of(device: str, nodes: Mapping[str, str | None] | None = None) -> str:
    """The process a device belongs to: its topology node, its ``rackR/nodeN`` prefix, or ``cluster``."""
    if nodes is not None and nodes.get(device):
        return str(nodes[device])
    match = _NODE_PREFIX.match(device)
    return match.group(1) if match else "cluster"


def stream_of(record: Record) -> str:
    """``compute``, ``communication`` or ``receive``: the stream a record runs on."""
    if record.kind == RECV_KIND:
        return RECEIVE_STREAM
    return COMMUNICATION_STREAM if record.kind in COMMUNICATION_KINDS else COMPUTE_STREAM


def _us(seconds: float) -> float:
    value = round(seconds * US_PER_S, TS_DIGITS)
    return 0.0 if value == 0 else value


def _args(record: Record) -> dict[str, Any]:
    args: dict[str, Any] = {"bytes": record.bytes, "kind": record.kind}
    if record.flops:
        args["flops"] = record.flops
    for key in ("src", "dst", "op"):
        value = getattr(record, key)
        if value:
            args[key] = value
    for key in ("iteration", "microbatch", "stage"):
        value = getattr(record, key)
        if value >= 0:
            args[key] = value
    return args


class _Lanes:
    """Threads of one device and stream; a slice goes to the first lane where it nests.

    A lane keeps a stack of open slices (their end times).  A new slice fits a
    lane when, after popping the slices that ended by its start, it ends no
    later than the innermost open one (or none is open).
    """

    def __init__(self) -> None:
        self.stacks: list[list[float]] = []

    def place(self, start: float, end: float) -> int:
        for index, stack in enumerate(self.stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return index
        self.stacks.append([end])
        return len(self.stacks) - 1


def _assign_lanes(
    ordered: Sequence[Record], starts: Sequence[float], ends: Sequence[float]
) -> list[int]:
    """Lane of each record within its device and stream; outer slices are placed first.

    ``starts`` and ``ends`` are the records' times in trace microseconds."""
    lanes: dict[tuple[str, str], _Lanes] = {}
    lane_of = [0] * len(ordered)
    by_nesting = sorted(
        range(len(ordered)), key=lambda i: (ordered[i].start_s, -ordered[i].end_s, i)
    )
    for index in by_nesting:
        record = ordered[index]
        stream = lanes.setdefault((record.resource, stream_of(record)), _Lanes())
        lane_of[index] = stream.place(starts[index], ends[index])
    return lane_of


Placed = tuple[Record, int, int, float, float]
"""A record with its trace pid, tid, ``ts`` and ``dur`` (microseconds)."""

CounterTrack = tuple[int, int, str, list[tuple[float, dict[str, float]]]]
"""A counter's pid, tid, name and ``(ts, args)`` points."""


@dataclass
class _Layout:
    """Everything trace.json holds, in the order it is written."""

    metadata: list[dict[str, Any]]
    placed: list[Placed]
    """Records and receive slices, in timeline order."""
    binds: dict[int, Bind]
    """Flow binding of the slices with arrows, by index into ``placed``."""
    counters: list[CounterTrack]


def _with_receives(
    records: Iterable[Record], hidden: frozenset[str] = frozenset()
) -> tuple[list[Record], list[int]]:
    """Records and receive slices in timeline order, and each one's receive slice (-1: none);
    none on the ``hidden`` devices."""
    ordered = sorted_records(records)
    receives = [receive_record(r, _us) for r in ordered]
    if hidden:
        receives = [r if r is None or r.resource not in hidden else None for r in receives]
    combined = ordered + [r for r in receives if r is not None]
    order = sorted(range(len(combined)), key=lambda i: _timeline_key(combined[i]))
    position = [0] * len(combined)
    for new, old in enumerate(order):
        position[old] = new
    partner = [-1] * len(combined)
    extra = len(ordered)
    for index, receive in enumerate(receives):
        if receive is not None:
            partner[position[index]] = position[extra]
            extra += 1
    return [combined[i] for i in order], partner


def _timeline_key(r: Record) -> tuple[Any, ...]:
    """:func:`clustersim.records.sorted_records`' order."""
    return (r.start_s, r.end_s, r.resource, r.kind, r.label, r.op)


def _layout(
    records: Iterable[Record],
    nodes: Mapping[str, str | None] | None,
    summary: Mapping[str, Any] | None = None,
    fold: DeviceFold | None = None,
) -> _Layout:
    """Place each slice (pid, tid, ts, dur), bind its arrows and build the counters."""
    hidden = fold.dropped if fold is not None else frozenset()
    ordered, partner = _with_receives(records, hidden)
    starts = [_us(r.start_s) for r in ordered]
    ends = [_us(r.end_s) for r in ordered]
    lane_of = _assign_lanes(ordered, starts, ends)
    pids: dict[str, int] = {}
    threads: dict[tuple[str, str, int], int] = {}
    placed: list[Placed] = []
    for index, record in enumerate(ordered):
        device = record.resource
        pid = pids.setdefault(node_of(device, nodes), len(pids) + 1)
        key = (device, stream_of(record), lane_of[index])
        tid = threads.setdefault(key, len(threads) + 1)
        start = starts[index]
        placed.append((record, pid, tid, start, max(ends[index] - start, 0.0)))
    counters: list[CounterTrack] = []
    first_tid: dict[str, int] = {}
    for key in sorted(threads, key=_thread_key):
        first_tid.setdefault(key[0], threads[key])
    found = network_counters(ordered, starts, ends, hidden)
    memory = memory_counters(summary, ordered, _us)
    for device in sorted(set(found) | set(memory), key=natural_key):
        pid = pids.setdefault(node_of(device, nodes), len(pids) + 1)
        if device not in first_tid:
            first_tid[device] = threads.setdefault((device, RECEIVE_STREAM, 0), len(threads) + 1)
        for counter in (found.get(device), memory.get(device)):
            if counter is not None:
                counters.append((pid, first_tid[device], *counter))
    binds = flow_binds(ordered, partner, starts, ends)
    stands_for = fold.stands_for if fold is not None else {}
    return _Layout(_metadata(pids, threads, nodes, stands_for), placed, binds, counters)


def _placed(
    records: Iterable[Record], nodes: Mapping[str, str | None] | None
) -> tuple[list[dict[str, Any]], list[Placed]]:
    """The metadata events, and each slice (in timeline order) with pid, tid, ts and dur."""
    layout = _layout(records, nodes)
    return layout.metadata, layout.placed


@gc_paused()
def trace_events(
    records: Iterable[Record],
    nodes: Mapping[str, str | None] | None = None,
    summary: Mapping[str, Any] | None = None,
    fold: DeviceFold | None = None,
) -> list[dict[str, Any]]:
    """The ``traceEvents`` list: metadata events (and a folded trace's instant event), one
    ``X`` event per record and receive slice (with its flow binding), then the counter events.

    ``nodes`` maps device names to node names (``Topology`` devices' ``node``);
    without it processes come from the device names.  ``summary`` (a run's
    summary.json) gives the memory counters.  ``fold``: the records are one replica's
    (see the module docstring).
    """
    layout = _layout(records, nodes, summary, fold)
    events = layout.metadata + ([fold_marker(fold)] if fold is not None else [])
    for index, (record, pid, tid, start, duration) in enumerate(layout.placed):
        event = {
            "name": record.label or record.kind,
            "cat": record.kind,
            "ph": "X",
            "ts": start,
            "dur": duration,
            "pid": pid,
            "tid": tid,
            "args": _args(record),
        }
        bind = layout.binds.get(index)
        if bind is not None:
            event["bind_id"] = bind[0]
            if bind[1]:
                event["flow_in"] = True
            if bind[2]:
                event["flow_out"] = True
        events.append(event)
    for pid, tid, name, points in layout.counters:
        for ts, args in points:
            events.append({"name": name, "ph": "C", "ts": ts, "pid": pid, "tid": tid, "args": args})
    return events


FOLD_FLAG = "--trace"
"""The flag named in a folded trace's words."""


def fold_note(fold: DeviceFold) -> dict[str, Any]:
    """A folded trace's ``otherData``: what was left out, in words and as summary.json's
    ``folded.rows`` block."""
    return {"folded": fold.sentence(FOLD_FLAG), "rows": fold.block(["trace.json"]).as_dict()}


def fold_marker(fold: DeviceFold) -> dict[str, Any]:
    """The global instant event at time 0 that names what a folded trace left out."""
    return {"name": fold.sentence(FOLD_FLAG), "ph": "i", "s": "g", "ts": 0.0, "pid": 0, "tid": 0}


def _metadata(
    pids: Mapping[str, int],
    threads: Mapping[tuple[str, str, int], int],
    nodes: Mapping[str, str | None] | None,
    stands_for: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Process and thread names, sorted so devices and streams read in order; a device that
    stands for others (a folded trace) named ``<device> x N``."""
    events: list[dict[str, Any]] = []
    for rank, process in enumerate(sorted(pids, key=natural_key)):
        pid = pids[process]
        events.append(_meta("process_name", pid, 0, {"name": process}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": rank}))
    for (device, stream, lane), tid in sorted(threads.items(), key=lambda kv: _thread_key(kv[0])):
        pid = pids[node_of(device, nodes)]
        suffix = f" #{lane + 1}" if lane else ""
        count = (stands_for or {}).get(device, 1)
        shown = f"{device} x {count}" if count > 1 else device
        events.append(_meta("thread_name", pid, tid, {"name": f"{shown} {stream}{suffix}"}))
    order = sorted(threads, key=_thread_key)
    for index, key in enumerate(order):
        pid = pids[node_of(key[0], nodes)]
        events.append(_meta("thread_sort_index", pid, threads[key], {"sort_index": index}))
    return events


def _thread_key(key: tuple[str, str, int]) -> tuple[Any, ...]:
    device, stream, lane = key
    return (natural_key(device), STREAMS.index(stream), lane)


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def trace_document(
    records: Iterable[Record],
    nodes: Mapping[str, str | None] | None = None,
    summary: Mapping[str, Any] | None = None,
    fold: DeviceFold | None = None,
) -> dict[str, Any]:
    """``{"traceEvents": [...], "displayTimeUnit": "ms"}``, and ``otherData`` when folded."""
    document = {"traceEvents": trace_events(records, nodes, summary, fold), "displayTimeUnit": "ms"}
    if fold is not None:
        document["otherData"] = fold_note(fold)
    return document


@gc_paused()
def trace_json(
    records: Iterable[Record],
    nodes: Mapping[str, str | None] | None = None,
    summary: Mapping[str, Any] | None = None,
    fold: DeviceFold | None = None,
) -> str:
    """The text of ``trace.json``: compact, one event per line, the same bytes for the same records.

    Each line is what ``json.dumps(event, separators=(",", ":"), ensure_ascii=False)``
    gives for the event of :func:`trace_events`; the ``X`` and ``C`` events are
    written without building their dicts (a large run has millions of them).  ``fold``:
    the records are one replica's (see the module docstring).  Like :func:`trace_events`,
    it runs with the garbage collector paused (:func:`clustersim.host.gc_paused`): the
    collections its allocations would trigger scan every record of the run again.
    """
    layout = _layout(records, nodes, summary, fold)
    lines = [_compact(e) for e in layout.metadata]
    if fold is not None:
        lines.append(_compact(fold_marker(fold)))
    text = _JsonText()
    binds = layout.binds
    lines.extend(text.event(*item, binds.get(i)) for i, item in enumerate(layout.placed))
    for pid, tid, name, points in layout.counters:
        lines.extend(text.counter(name, ts, pid, tid, args) for ts, args in points)
    body = ",\n".join(lines)
    other = f'"otherData":{_compact(fold_note(fold))},' if fold is not None else ""
    return '{"displayTimeUnit":"ms",' + other + '"traceEvents":[\n' + body + "\n]}\n"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _JsonText:
    """JSON text of ``X`` events, equal to :func:`_compact` of their dicts; strings cached."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}

    def string(self, value: str) -> str:
        found = self._strings.get(value)
        if found is None:
            found = self._strings[value] = _compact(value)
        return found

    def event(
        self,
        record: Record,
        pid: int,
        tid: int,
        start: float,
        duration: float,
        bind: Bind | None = None,
    ) -> str:
        string = self.string
        flow = ""
        if bind is not None:
            flow = f',"bind_id":{bind[0]}' + _FLOW_TEXT[bind[1], bind[2]]
        return (
            f'{{"name":{string(record.label or record.kind)},"cat":{string(record.kind)},'
            f'"ph":"X","ts":{_number(start)},"dur":{_number(duration)},"pid":{pid},'
            f'"tid":{tid},"args":{self.args(record)}{flow}}}'
        )

    def counter(self, name: str, ts: float, pid: int, tid: int, args: dict[str, float]) -> str:
        """A ``C`` event as JSON text."""
        values = ",".join(f"{self.string(k)}:{_number(v)}" for k, v in args.items())
        return (
            f'{{"name":{self.string(name)},"ph":"C","ts":{_number(ts)},"pid":{pid},'
            f'"tid":{tid},"args":{{{values}}}}}'
        )

    def args(self, record: Record) -> str:
        """:func:`_args` of ``record`` as JSON text."""
        string = self.string
        parts = [f'"bytes":{_number(record.bytes)}', f'"kind":{string(record.kind)}']
        if record.flops:
            parts.append(f'"flops":{_number(record.flops)}')
        for key, value in (("src", record.src), ("dst", record.dst), ("op", record.op)):
            if value:
                parts.append(f'"{key}":{string(value)}')
        for key, value in (
            ("iteration", record.iteration),
            ("microbatch", record.microbatch),
            ("stage", record.stage),
        ):
            if value >= 0:
                parts.append(f'"{key}":{value}')
        return "{" + ",".join(parts) + "}"


_FLOW_TEXT = {
    (False, True): ',"flow_out":true',
    (True, False): ',"flow_in":true',
    (True, True): ',"flow_in":true,"flow_out":true',
}
"""JSON text of a binding's ``flow_in`` / ``flow_out`` keys."""


def _number(value: float) -> str:
    """A number as ``json.dumps`` writes it (floats by repr, non-finite ones by name)."""
    if value.__class__ is float:
        if value != value or value in (math.inf, -math.inf):
            return _compact(value)
        return repr(value)
    return str(value)


def nodes_of(topology: Any) -> dict[str, str | None]:
    """Device name -> node name from a :class:`clustersim.topology.Topology`."""
    return {name: device.node for name, device in topology.devices.items()}


def write_trace(
    path: str | os.PathLike[str],
    records: Sequence[Record],
    nodes: Mapping[str, str | None] | None = None,
    summary: Mapping[str, Any] | None = None,
    fold: DeviceFold | None = None,
) -> Path:
    """Write ``trace.json`` atomically (a temporary name, then renamed)."""
    return write_atomic(Path(path), trace_json(records, nodes, summary, fold))
