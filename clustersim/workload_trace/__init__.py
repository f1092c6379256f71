"""Workload traces recorded on one rank, read into a list of operations to replay.

Two formats are read:

* ``kineto`` -- a PyTorch profiler trace (``torch.profiler`` ``export_chrome_trace``):
  GPU kernels with their durations and streams, NCCL kernels, and the
  ``record_param_comms`` CPU ops that carry the collectives' sizes and groups
  (:mod:`clustersim.workload_trace.kineto`);
* ``chakra`` -- a Chakra execution trace: compute, memory, collective and point-to-point
  nodes with their data and control dependencies (:mod:`clustersim.workload_trace.chakra`),
  in the JSON form ``chakra_jsonizer`` writes or as Chakra's protobuf ``.et`` file
  (:mod:`clustersim.workload_trace.chakra_et`, which needs the protobuf package and imports
  it only then).  A file is read as protobuf when its name ends in ``.et`` (or
  ``.et.gz``), or when it is not JSON and its first bytes are binary.

:func:`load_trace` returns a :class:`WorkloadTrace` (:mod:`.ops`): :class:`TraceOp` s, each a
compute op (a recorded duration), a collective (clustersim's operation name, the
nccl-tests size in bytes, the process group's size and name) or a send or recv (bytes,
peer rank, tag), with the ids of the ops it waits for.  Every problem is a
:class:`~clustersim.errors.ScenarioError` at the key path given (``workload.trace``)
naming the file, and the rank when one is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import Problem, ScenarioError
from . import chakra, chakra_et, kineto
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


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TraceFormatError("no such file") from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read it: {exc.strerror or exc}") from None


def _binary(raw: bytes) -> bool:
    """Whether ``raw`` starts like no JSON text: gzip's magic, or control bytes."""
    head = raw[:64]
    return head.startswith(chakra_et.GZIP_MAGIC) or any(
        b < 0x20 and b not in b"\t\n\r" for b in head
    )


def _is_protobuf(path: Path, raw: bytes) -> bool:
    """A Chakra ``.et`` file: by its name, or binary first bytes."""
    return path.name.endswith((".et", ".et.gz")) or _binary(raw)


def _read_document(path: Path) -> tuple[Any, bool]:
    """The trace at ``path`` as a JSON document, and whether it was read from protobuf."""
    raw = _read_bytes(path)
    if _is_protobuf(path, raw):
        return chakra_et.document(raw), True
    try:
        text = raw.decode()
        try:
            return json.loads(text), False
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise
            return {"nodes": _concatenated(text)}, False
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceFormatError(f"not valid JSON ({exc})") from None


METADATA_KEYS = frozenset({"version", "attr"})
"""The fields of Chakra's ``GlobalMetadata``: an object holding no others is not a node."""


def _concatenated(text: str) -> list[Any]:
    """The nodes of JSON objects written one after another (``chakra_jsonizer`` writes the
    global metadata, then one object per node).  Protobuf's JSON mapping leaves out fields
    at their default, so a node without an ``id`` is node 0; the metadata is skipped."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        obj, at = decoder.raw_decode(text, at)
        if isinstance(obj, Mapping) and not set(obj) <= METADATA_KEYS:
            found.append({"id": 0, **obj})
    return found


def load_trace(
    path: Path,
    fmt: str = "auto",
    key: str = "workload.trace",
    order: str = "recorded",
    rank: int | None = None,
) -> WorkloadTrace:
    """Read the trace at ``path`` in format ``fmt`` (``auto`` looks at its keys).

    ``order`` is for Kineto traces (:func:`clustersim.workload_trace.kineto.parse`).
    Any problem is a ScenarioError at ``key`` naming the file, and ``rank`` if given (the
    rank whose trace it is: ``rank 3, node 17 (id 42): ...``)."""
    try:
        doc, protobuf = _read_document(path)
        chosen = _detect(doc) if fmt == "auto" else fmt
        if chosen not in READERS:
            raise TraceFormatError(f"unknown format '{fmt}' (allowed: {', '.join(FORMATS)})")
        if protobuf and chosen != "chakra":
            raise TraceFormatError(f"a Chakra protobuf trace, not {fmt} (format: chakra or auto)")
        ops, span = READERS[chosen].parse(doc, order)
        if not ops:
            raise TraceFormatError("no operations to replay (no GPU kernels or compute nodes)")
    except TraceFormatError as exc:
        where = f"rank {rank}, " if rank is not None else ""
        raise ScenarioError(Problem(key, f"{path}: {where}{exc}")) from None
    return WorkloadTrace(str(path), chosen, tuple(ops), span)
