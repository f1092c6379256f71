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

:func:`load_trace` returns a :class:`WorkloadTrace` (:mod:`.ops`): :class:`TraceOp` s, each a
compute op (a recorded duration) or a collective (clustersim's operation name, the
nccl-tests size in bytes, the process group's size and name), with the ids of the ops
it waits for.  Every problem is a :class:`~clustersim.errors.ScenarioError` at the key
path given (``workload.trace``) naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import Problem, ScenarioError
from . import chakra, kineto
from .ops import (
    COLLECTIVE_NAMES,
    DTYPE_BYTES,
    TraceFormatError,
    TraceOp,
    WorkloadTrace,
    collective_op,
)

__all__ = [
    "COLLECTIVE_NAMES",
    "DTYPE_BYTES",
    "FORMATS",
    "READERS",
    "TraceFormatError",
    "TraceOp",
    "WorkloadTrace",
    "collective_op",
    "load_trace",
]

READERS: dict[str, ModuleType] = {"kineto": kineto, "chakra": chakra}
"""Format name -> its reader, in the order ``auto`` tries them.  A reader is a module of this
package with ``recognizes(document) -> bool`` and ``parse(document, order)`` (a
:data:`Parser`); a new format is a module and an entry here."""

FORMATS = ("auto", *READERS)
"""Values of ``workload.format``."""

Parser = Callable[[Any, str], tuple[list[TraceOp], float]]
"""A format's parser: (document, order) -> the ops in a dependency order, recorded span (s)."""


def _detect(doc: Any) -> str:
    for name, reader in READERS.items():
        if reader.recognizes(doc):
            return name
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


def load_trace(
    path: Path, fmt: str = "auto", key: str = "workload.trace", order: str = "recorded"
) -> WorkloadTrace:
    """Read the trace at ``path`` in format ``fmt`` (``auto`` looks at its keys).

    ``order`` is for Kineto traces (:func:`clustersim.workload_trace.kineto.parse`).
    Any problem is a ScenarioError at ``key`` naming the file."""
    try:
        doc = _read_json(path)
        chosen = _detect(doc) if fmt == "auto" else fmt
        if chosen not in READERS:
            raise TraceFormatError(f"unknown format '{fmt}' (allowed: {', '.join(FORMATS)})")
        ops, span = READERS[chosen].parse(doc, order)
        if not ops:
            raise TraceFormatError("no operations to replay (no GPU kernels or compute nodes)")
    except TraceFormatError as exc:
        raise ScenarioError(Problem(key, f"{path}: {exc}")) from None
    return WorkloadTrace(str(path), chosen, tuple(ops), span)
