"""Workload traces recorded on one rank, read into a list of operations to replay.

Two formats are read, both JSON (no new dependency):

* ``kineto`` -- a PyTorch profiler trace (``torch.profiler`` ``export_chrome_trace``):
  GPU kernels with their durations and streams, NCCL kernels, and the
  ``record_param_comms`` CPU ops that carry the collectives' sizes and groups
  (:mod:`clustersim.workload_trace.kineto`);
* ``chakra`` -- a Chakra execution trace in the JSON form ``chakra_jsonizer`` writes:
  compute and collective nodes with their data and control dependencies
  (:mod:`clustersim.workload_trace.chakra`).

Chakra's protobuf ``.et`` files are refused with a message saying to convert them
with ``chakra_jsonizer`` (reading protobuf would need the protobuf package).

:func:`load_trace` returns a :class:`WorkloadTrace`: :class:`TraceOp` s, each a
compute op (a recorded duration) or a collective (clustersim's operation name, the
nccl-tests size in bytes, the process group's size and name), with the ids of the ops
it waits for.  Every problem is a :class:`~clustersim.errors.ScenarioError` at the key
path given (``workload.trace``) naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Problem, ScenarioError

FORMATS = ("auto", "chakra", "kineto")
"""Values of ``workload.format``."""


@dataclass(frozen=True)
class TraceOp:
    """One operation of a recorded trace."""

    id: str
    """Unique id inside the trace (``k12`` for a Kineto event, the node id for Chakra)."""
    name: str
    """The kernel's or node's name as recorded."""
    kind: str
    """``compute`` or ``collective``."""
    duration_s: float
    """Recorded duration (s); a compute op replays it, a collective only reports it."""
    stream: str = ""
    """The CUDA stream it ran on (Kineto), empty for Chakra."""
    after: tuple[str, ...] = ()
    """Ids of the ops that must end before it starts."""
    op: str = ""
    """A collective's clustersim operation (``allreduce``, ``allgather``, ...)."""
    size_bytes: float = 0.0
    """A collective's nccl-tests size (:mod:`clustersim.collectives.ops`)."""
    group_size: int | None = None
    """Ranks of a collective's process group, when recorded."""
    group_name: str = ""
    """A collective's process group name, when recorded."""


@dataclass(frozen=True)
class WorkloadTrace:
    """A parsed trace: its operations in a dependency-respecting order."""

    path: str
    format: str
    ops: tuple[TraceOp, ...]
    span_s: float
    """The trace's own makespan: last end - first start of its GPU work (Kineto), or its
    longest dependency path at the recorded durations (Chakra)."""

    @property
    def compute_s(self) -> float:
        """Recorded compute time of the rank: the sum of its compute ops' durations."""
        return sum(op.duration_s for op in self.ops if op.kind == "compute")

    @property
    def collectives(self) -> list[TraceOp]:
        return [op for op in self.ops if op.kind == "collective"]


class TraceFormatError(Exception):
    """What is wrong inside a trace file (turned into a ScenarioError by :func:`load_trace`)."""


DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
    "float64": 8, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "byte": 1, "uint8": 1, "char": 1, "int8": 1, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}  # fmt: skip
"""Bytes per element of the dtypes PyTorch writes in ``record_param_comms`` (lower case)."""

COLLECTIVE_NAMES = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "allgatherintotensor": "allgather",
    "allgatherbase": "allgather",
    "reducescatter": "reducescatter",
    "reducescattertensor": "reducescatter",
    "reducescatterbase": "reducescatter",
    "alltoall": "alltoall",
    "alltoallbase": "alltoall",
    "alltoallv": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
"""Collective names as traces spell them (lower case, ``_`` and ``-`` removed: NCCL's
``AllReduce``, PyTorch's ``all_reduce``, ``_allgather_base``) -> clustersim's operation."""


def collective_op(name: str) -> str:
    """clustersim's operation for a collective ``name`` as a trace spells it; a
    :class:`TraceFormatError` naming it if unknown."""
    key = name.lower().replace("_", "").replace("-", "").replace(":", "")
    if key.startswith("nccl"):
        key = key[4:]
    if key in COLLECTIVE_NAMES:
        return COLLECTIVE_NAMES[key]
    known = ", ".join(sorted(set(COLLECTIVE_NAMES.values())))
    raise TraceFormatError(f"unknown collective '{name}' (clustersim replays {known})")


def _detect(doc: Any) -> str:
    if isinstance(doc, list) or (isinstance(doc, Mapping) and "traceEvents" in doc):
        return "kineto"
    if isinstance(doc, Mapping) and "nodes" in doc:
        return "chakra"
    raise TraceFormatError(
        "neither a Kineto trace (a traceEvents list) nor a Chakra JSON trace (a nodes list)"
    )


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceFormatError("no such file") from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read it: {exc.strerror or exc}") from None
    try:
        text = raw.decode()
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise
            return {"nodes": _concatenated(text)}
    except (UnicodeDecodeError, ValueError) as exc:
        if path.suffix == ".et" or b"\x00" in raw[:64]:
            raise TraceFormatError(
                "a binary (protobuf) Chakra trace: convert it to JSON with chakra_jsonizer "
                "(clustersim reads JSON traces only)"
            ) from None
        raise TraceFormatError(f"not valid JSON ({exc})") from None


Parser = Callable[[Any, str], tuple[list[TraceOp], float]]
"""A format's parser: (document, order) -> the ops in a dependency order, recorded span (s)."""


def _concatenated(text: str) -> list[Any]:
    """The nodes of JSON objects written one after another (``chakra_jsonizer`` writes the
    global metadata, then one object per node); objects without an ``id`` are skipped."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        obj, at = decoder.raw_decode(text, at)
        if isinstance(obj, Mapping) and "id" in obj:
            found.append(obj)
    return found


def parsers() -> dict[str, Parser]:
    """Format name -> its parser."""
    from . import chakra, kineto

    return {"chakra": chakra.parse, "kineto": kineto.parse}


def load_trace(
    path: Path, fmt: str = "auto", key: str = "workload.trace", order: str = "recorded"
) -> WorkloadTrace:
    """Read the trace at ``path`` in format ``fmt`` (``auto`` looks at its keys).

    ``order`` is for Kineto traces (:func:`clustersim.workload_trace.kineto.parse`).
    Any problem is a ScenarioError at ``key`` naming the file."""
    try:
        doc = _read_json(path)
        chosen = _detect(doc) if fmt == "auto" else fmt
        if chosen not in parsers():
            raise TraceFormatError(f"unknown format '{fmt}' (allowed: {', '.join(FORMATS)})")
        ops, span = parsers()[chosen](doc, order)
        if not ops:
            raise TraceFormatError("no operations to replay (no GPU kernels or compute nodes)")
    except TraceFormatError as exc:
        raise ScenarioError(Problem(key, f"{path}: {exc}")) from None
    return WorkloadTrace(str(path), chosen, tuple(ops), span)
