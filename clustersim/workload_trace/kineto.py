"""PyTorch profiler (Kineto) traces: Chrome-trace JSON from ``export_chrome_trace``.

What is read:

* GPU work: complete events (``"ph": "X"``) of category ``kernel``, ``gpu_memcpy`` or
  ``gpu_memset``, with ``ts`` and ``dur`` in microseconds and ``args.stream`` (else the
  ``tid``) as their stream;
* NCCL kernels (names starting with ``nccl``: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
  ``ncclKernel_AllReduce_RING_LL_Sum_float``) are the collectives; every other kernel
  is compute;
* their sizes and groups come from the CPU ops that carry ``In msg nelems`` (PyTorch's
  ``record_param_comms``, preferred when present, or ``nccl:all_reduce``): ``In msg
  nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name`` (or
  ``pg_name``) and ``Collective name``.  The i-th such op (by start time) gives the
  i-th NCCL kernel its size: nccl-tests' size is ``max(in, out) x dtype bytes``
  (the input of an all-reduce, reduce-scatter or all-to-all, the gathered output of
  an all-gather).  Ops named ``wait``, ``init`` or ``barrier`` and ops of zero
  elements launch no sized collective and are skipped.

Dependencies (``order``):

* ``streams``: each stream is a chain; a kernel starts when the one before it on its
  stream has ended;
* ``recorded`` (default): as ``streams``, and besides, a kernel waits for every kernel
  of another stream that had ended before it started in the recording (on each other
  stream, the last such kernel).  The order seen on the GPU is kept however much
  faster or slower the simulated collectives are; dependencies the trace does not
  show (a kernel that could have started earlier) are not found.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from .ops import DTYPE_BYTES, TraceFormatError, TraceOp, collective_op

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
SKIPPED_COMMS = frozenset({"wait", "init", "barrier", "coalesced"})
_KERNEL_OP = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def _gpu_events(events: list[Any]) -> list[Mapping[str, Any]]:
    gpu = [
        e
        for e in events
        if isinstance(e, Mapping)
        and e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in GPU_CATEGORIES
    ]
    for e in gpu:
        if not all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")):
            raise TraceFormatError(f"GPU event '{e.get('name')}' has no numeric ts and dur")
        if e["dur"] < 0:
            raise TraceFormatError(f"GPU event '{e.get('name')}' has a negative dur")
    return sorted(gpu, key=lambda e: e["ts"])


def _comm_ops(events: list[Any]) -> list[Mapping[str, Any]]:
    """The CPU ops that size the collectives, in start order."""
    sized = [
        e
        for e in events
        if isinstance(e, Mapping)
        and e.get("ph") == "X"
        and str(e.get("cat", "")).lower() not in GPU_CATEGORIES
        and isinstance(e.get("args"), Mapping)
        and "In msg nelems" in e["args"]
    ]
    if any(e.get("name") == "record_param_comms" for e in sized):
        sized = [e for e in sized if e.get("name") == "record_param_comms"]
    sized = [e for e in sized if _comm_name(e).lower() not in SKIPPED_COMMS]
    sized = [e for e in sized if _nelems(e, "In msg nelems") or _nelems(e, "Out msg nelems")]
    return sorted(sized, key=lambda e: e.get("ts", 0))


def _comm_name(event: Mapping[str, Any]) -> str:
    name = event["args"].get("Collective name")
    if name:
        return str(name)
    own = str(event.get("name", ""))
    return own.split(":", 1)[1] if own.startswith("nccl:") else ""


def _nelems(event: Mapping[str, Any], key: str) -> float:
    value = event["args"].get(key, 0)
    if isinstance(value, list):  # all_to_all_v split sizes
        value = sum(value)
    if not isinstance(value, (int, float)) or value < 0:
        raise TraceFormatError(f"{event.get('name')} at ts {event.get('ts')}: bad {key} {value!r}")
    return float(value)


def _collective(kernel: Mapping[str, Any], comm: Mapping[str, Any] | None) -> dict[str, Any]:
    """The collective fields of NCCL ``kernel`` sized by CPU op ``comm``."""
    name = str(kernel.get("name", ""))
    if comm is None:
        raise TraceFormatError(
            f"NCCL kernel '{name}' at ts {kernel['ts']} has no record_param_comms op giving "
            "its size (profile with record_shapes=True on PyTorch >= 2.1)"
        )
    spelled = _comm_name(comm)
    if not spelled:
        match = _KERNEL_OP.match(name)
        spelled = match.group(1) if match else name
    dtype = str(comm["args"].get("dtype", "")).lower()
    if dtype not in DTYPE_BYTES:
        raise TraceFormatError(
            f"{comm.get('name')} at ts {comm.get('ts')}: unknown dtype {dtype!r}"
        )
    nelems = max(_nelems(comm, "In msg nelems"), _nelems(comm, "Out msg nelems"))
    group = comm["args"].get("Group size")
    pg = comm["args"].get("Process Group Name", comm["args"].get("pg_name", ""))
    return {
        "op": collective_op(spelled),
        "size_bytes": nelems * DTYPE_BYTES[dtype],
        "group_size": int(group) if isinstance(group, (int, float)) and group > 0 else None,
        "group_name": str(pg),
    }


def recognizes(doc: Any) -> bool:
    """Whether a JSON document is a Kineto trace: a list of events, or a ``traceEvents`` list."""
    return isinstance(doc, list) or (isinstance(doc, Mapping) and "traceEvents" in doc)


def parse(doc: Any, order: str = "recorded") -> tuple[list[TraceOp], float]:
    """The ops of a Kineto trace in start order, and its GPU span (s)."""
    events = doc if isinstance(doc, list) else doc.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("traceEvents must be a list of events")
    gpu = _gpu_events(events)
    nccl = [e for e in gpu if str(e.get("name", "")).lower().startswith("nccl")]
    comms = _comm_ops(events)
    if comms and len(comms) != len(nccl):
        raise TraceFormatError(
            f"{len(nccl)} NCCL kernels but {len(comms)} record_param_comms ops sizing them"
        )
    sizing = {id(k): comms[i] if comms else None for i, k in enumerate(nccl)}
    streams: dict[str, list[tuple[float, str]]] = {}  # stream -> (end_us, id) in order
    ops: list[TraceOp] = []
    for i, e in enumerate(gpu):
        stream = str((e.get("args") or {}).get("stream", e.get("tid", "")))
        after = _after(streams, stream, e["ts"], order)
        extra = _collective(e, sizing[id(e)]) if id(e) in sizing else {}
        op_id = f"k{i}"
        ops.append(
            TraceOp(
                op_id,
                str(e.get("name", "")),
                "collective" if extra else "compute",
                e["dur"] * 1e-6,
                stream,
                after,
                **extra,
            )
        )
        streams.setdefault(stream, []).append((e["ts"] + e["dur"], op_id))
    span = (max(e["ts"] + e["dur"] for e in gpu) - gpu[0]["ts"]) * 1e-6 if gpu else 0.0
    return ops, span


def _after(
    streams: dict[str, list[tuple[float, str]]], stream: str, start_us: float, order: str
) -> tuple[str, ...]:
    """The ops a kernel starting at ``start_us`` on ``stream`` waits for (see the module)."""
    after = []
    own = streams.get(stream)
    if own:
        after.append(own[-1][1])
    if order == "recorded":
        for other, done in streams.items():
            if other == stream:
                continue
            k = bisect_right(done, (start_us, "\uffff"))
            if k:
                after.append(done[k - 1][1])
    return tuple(after)
