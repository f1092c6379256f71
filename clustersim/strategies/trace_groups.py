"""Which ranks of a replayed trace meet in which collective (:mod:`.trace`).

One trace replayed on every rank (SPMD): each collective op meets in blocks of its
recorded group size (:func:`spmd_meetings`).  A trace per rank: the i-th collective of
process group G on each rank meets the i-th of G on the others (:func:`match_collectives`).
Either way the outcome is a :class:`CollectivePlan`: every meeting's call, and for each
(rank, op id) the meeting it joins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collectives import CollectiveCall
from ..errors import Problem, ScenarioError
from ..workload_trace import TraceFormatError, TraceOp, WorkloadTrace, load_trace
from ..workload_trace.ranks import rank_files

KEY = "workload.trace"


@dataclass(frozen=True)
class PlannedMeeting:
    """One collective call of the replay and the ranks that meet in it."""

    summary_key: str
    """Its entry in the summary's ``collectives`` (an op's blocks share one)."""
    op: TraceOp
    """The op as the lowest of its ranks recorded it."""
    call: CollectiveCall


@dataclass
class CollectivePlan:
    """Every meeting of a replay, by key, and the meeting of each (rank, op id)."""

    meetings: dict[str, PlannedMeeting] = field(default_factory=dict)
    of: dict[tuple[int, str], str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.meetings)

    def __getitem__(self, key: str) -> PlannedMeeting:
        return self.meetings[key]

    def values(self) -> Iterator[PlannedMeeting]:
        return iter(self.meetings.values())

    def add(self, key: str, meeting: PlannedMeeting, members: Sequence[tuple[int, str]]) -> None:
        """Record ``meeting`` under ``key``, joined by the (rank, op id) pairs ``members``."""
        self.meetings[key] = meeting
        for member in members:
            self.of[member] = key


def meeting_key(plan: CollectivePlan, rank: int, op: TraceOp) -> str:
    """The meeting rank ``rank`` joins at collective ``op``."""
    return plan.of[(rank, op.id)]


def spmd_meetings(
    trace: WorkloadTrace,
    ranks: Sequence[str],
    calls_of: Callable[[TraceOp], list[CollectiveCall]],
) -> CollectivePlan:
    """One trace on every rank: each collective's calls (``calls_of``: one per block of
    consecutive ranks), rank r joining block r // size."""
    plan = CollectivePlan()
    for op in trace.collectives:
        calls = calls_of(op)
        size = calls[0].n
        for block, call in enumerate(calls):
            members = [(r, op.id) for r in range(block * size, (block + 1) * size)]
            plan.add(f"{op.id}@{block}", PlannedMeeting(op.id, op, call), members)
    return plan


def _group_label(op: TraceOp, rank: int, ranks: int) -> str:
    """The process group an op belongs to: its recorded name, else the block of its recorded
    size that ``rank`` is in, else every rank."""
    if op.group_name:
        return op.group_name
    if op.group_size and op.group_size < ranks:
        return f"blocks{op.group_size}.{rank // op.group_size}"
    return "all"


def match_collectives(
    traces: Sequence[WorkloadTrace],
    ranks: Sequence[str],
    call_of: Callable[[TraceOp, tuple[str, ...]], CollectiveCall],
) -> CollectivePlan:
    """A trace per rank: the i-th collective of each process group meets across the ranks
    that record it (the module docstring); refused where they disagree."""
    members: dict[str, list[tuple[int, TraceOp]]] = {}
    for rank, trace in enumerate(traces):
        seen: dict[str, int] = {}
        for op in trace.collectives:
            group = _group_label(op, rank, len(traces))
            i = seen.get(group, 0)
            seen[group] = i + 1
            members.setdefault(f"{group}#{i}", []).append((rank, op))
    plan = CollectivePlan()
    for key, joined in members.items():
        _check_agreement(key, joined, traces)
        first = joined[0][1]
        devices = tuple(ranks[r] for r, _ in joined)
        meeting = PlannedMeeting(key, first, call_of(first, devices))
        plan.add(key, meeting, [(r, op.id) for r, op in joined])
    return plan


def _check_agreement(
    key: str, joined: list[tuple[int, TraceOp]], traces: Sequence[WorkloadTrace]
) -> None:
    first_rank, first = joined[0]
    for rank, op in joined[1:]:
        same_size = math.isclose(op.size_bytes, first.size_bytes, rel_tol=1e-9)
        if op.op != first.op or not same_size:
            raise ScenarioError(
                Problem(
                    KEY,
                    f"collective {key}: rank {first_rank} ({traces[first_rank].path}, node "
                    f"{first.id}) records {first.op} of {first.size_bytes:g} B, rank {rank} "
                    f"({traces[rank].path}, node {op.id}) {op.op} of {op.size_bytes:g} B",
                    "ranks that meet in a collective record the same operation and size",
                )
            )
    size = first.group_size
    if size is not None and size != len(joined):
        names = ", ".join(str(r) for r, _ in joined[:8]) + (", ..." if len(joined) > 8 else "")
        raise ScenarioError(
            Problem(
                KEY,
                f"collective {key} (rank {first_rank}, node {first.id}) records a group of "
                f"{size} ranks, but {len(joined)} ranks' traces have it (ranks {names})",
                "one trace per rank of the recorded job",
            )
        )


@dataclass(frozen=True)
class Exchange:
    """A send matched with its recv: ``size_bytes`` from rank ``src`` to rank ``dst``."""

    key: str
    """``send:SRC->DST[/TAG]#i``: the i-th such send."""
    src: int
    dst: int
    size_bytes: float
    send: TraceOp
    recv: TraceOp


def match_point_to_point(traces: Sequence[WorkloadTrace]) -> dict[tuple[int, str], Exchange]:
    """(rank, op id) of every send and recv -> its exchange: the i-th send from rank a to
    rank b (with tag t) meets the i-th recv on rank b from rank a (with tag t).  Refused,
    naming the node: one trace for every rank (peers are ranks of a trace set), a send or
    recv without its peer, a peer out of range, one without its partner, sizes that differ."""
    if len(traces) == 1 and traces[0].point_to_point:
        op = traces[0].point_to_point[0]
        raise ScenarioError(
            Problem(KEY, f"{traces[0].path}: node id {op.id} ({op.name}): a {op.kind} names a "
                    "peer rank, which one trace replayed on every rank does not have",
                    "a trace per rank (a pattern with %d or a folder) for sends and recvs")
        )  # fmt: skip
    sends: dict[str, tuple[int, TraceOp]] = {}
    recvs: dict[str, tuple[int, TraceOp]] = {}
    for rank, trace in enumerate(traces):
        seen: dict[str, int] = {}
        for op in trace.point_to_point:
            if op.peer is None or not 0 <= op.peer < len(traces):
                why = "names no peer rank" if op.peer is None else f"names rank {op.peer}"
                raise ScenarioError(
                    Problem(KEY, f"rank {rank} ({trace.path}), node id {op.id} ({op.name}): the "
                            f"{op.kind} {why}", f"comm_dst / comm_src of 0 to {len(traces) - 1}")
                )  # fmt: skip
            src, dst = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
            base = f"send:{src}->{dst}" + ("" if op.tag is None else f"/{op.tag}")
            i = seen.get(f"{op.kind}{base}", 0)
            seen[f"{op.kind}{base}"] = i + 1
            (sends if op.kind == "send" else recvs)[f"{base}#{i}"] = (rank, op)
    out: dict[tuple[int, str], Exchange] = {}
    for key in sends.keys() | recvs.keys():
        if key not in sends or key not in recvs:
            rank, op = sends.get(key) or recvs[key]
            partner = "recv" if key in sends else "send"
            raise ScenarioError(
                Problem(KEY, f"rank {rank} ({traces[rank].path}), node id {op.id} ({op.name}): "
                        f"its {op.kind} ({key}) has no matching {partner} on rank {op.peer}",
                        "every send matched by a recv with the same peers and tag, in order")
            )  # fmt: skip
        (a, send), (b, recv) = sends[key], recvs[key]
        if not math.isclose(send.size_bytes, recv.size_bytes, rel_tol=1e-9):
            raise ScenarioError(
                Problem(KEY, f"{key}: rank {a} node id {send.id} sends {send.size_bytes:g} B, "
                        f"rank {b} node id {recv.id} receives {recv.size_bytes:g} B")
            )  # fmt: skip
        exchange = Exchange(key, a, b, send.size_bytes, send, recv)
        out[(a, send.id)] = out[(b, recv.id)] = exchange
    return out


def summary_groups(plan: CollectivePlan) -> dict[str, tuple[TraceOp, list[CollectiveCall]]]:
    """Summary key -> (its op, the calls it ran as), in the order of the plan."""
    out: dict[str, tuple[TraceOp, list[CollectiveCall]]] = {}
    for meeting in plan.values():
        out.setdefault(meeting.summary_key, (meeting.op, []))[1].append(meeting.call)
    return out


def never_finished(key: str, op: TraceOp, calls: list[CollectiveCall], arrived: Any) -> str:
    """Why collective ``key`` has fewer ends than calls: how many ranks reached it."""
    reached = sum(m.arrived for k, m in arrived.items() if k == key or k.startswith(f"{key}@"))
    needed = sum(call.n for call in calls)
    return (
        f"collective {key} ({op.name}) never finished: {reached} of {needed} ranks reached "
        "it (a rank's trace waits for a collective the others never start)"
    )


def read_rank_traces(spec: str, base: Path, fmt: str, order: str) -> list[WorkloadTrace]:
    """Each rank's trace, rank order (ScenarioError at ``workload.trace``)."""
    try:
        files = rank_files(spec, base)
    except TraceFormatError as exc:
        raise ScenarioError(Problem(KEY, str(exc))) from None
    return [load_trace(path, fmt, KEY, order, rank=r) for r, path in enumerate(files)]


def ranks_for_traces(devices: tuple[str, ...], traces: int, defaulted: bool) -> tuple[str, ...]:
    """The devices replaying ``traces`` rank traces: rank r on the r-th; without
    ``workload.ranks`` the first ``traces`` GPUs."""
    if len(devices) == traces or (defaulted and len(devices) > traces):
        return devices[:traces]
    path = "workload.trace" if defaulted else "workload.ranks"
    raise ScenarioError(
        Problem(
            path,
            f"{traces} rank traces, but {len(devices)} devices to replay them"
            + ("" if defaulted else " match workload.ranks"),
            f"workload.ranks matching {traces} devices (rank r replays on the r-th)",
        )
    )
