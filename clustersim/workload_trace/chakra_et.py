"""Chakra execution traces in protobuf (``.et`` files, one per rank: ``workload.0.et``, ...).

An ``.et`` file is a stream of length-delimited protobuf messages: each message is
preceded by its length in bytes as a varint (base-128, low group first), the
``GlobalMetadata`` first, then one ``Node`` per message to the end of the file (the schema:
:mod:`clustersim.workload_trace.et_schema`).  Chakra's tools also read it gzip-compressed;
so does this reader.

Each node is turned into the mapping :mod:`clustersim.workload_trace.chakra` reads from
a JSON trace (``id``, ``name``, ``type``, ``duration_micros``, ``data_deps``,
``ctrl_deps``, ``attr`` as ``[{"name": ..., "<type>_val": ...}]``), so one parser serves
both forms and an ``.et`` file replays as its ``chakra_jsonizer`` JSON does.  Fields left
at their protobuf default read as the JSON form that omits them: an absent ``name`` is the
node's id, an absent ``type`` is ``INVALID_NODE`` (refused).

A truncated stream (a length prefix, or the message it announces, running past the end
of the file) or a message that does not parse is a :class:`TraceFormatError` naming the
node (its index in the file, from 0, after the metadata) and the byte offset.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from typing import Any

from .ops import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"


def _varint(raw: bytes, at: int) -> tuple[int, int] | None:
    """The varint at ``raw[at:]`` and the offset after it; None if it runs past the end."""
    value, shift = 0, 0
    while at < len(raw):
        byte = raw[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise TraceFormatError(f"a length prefix of more than 10 bytes ending at byte {at}")
    return None


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_stream(messages: Iterable[Any]) -> bytes:
    """``messages`` (protobuf messages: the metadata, then the nodes) as an ``.et`` stream."""
    out = bytearray()
    for message in messages:
        payload = message.SerializeToString()
        out += _encode_varint(len(payload)) + payload
    return bytes(out)


def _frames(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(byte offset, payload) of each length-delimited message of ``raw``."""
    at = 0
    while at < len(raw):
        head = _varint(raw, at)
        if head is None:
            raise _Truncated(at, "its length prefix runs past the end of the file")
        size, start = head
        if start + size > len(raw):
            raise _Truncated(
                at, f"its length prefix says {size} bytes, {len(raw) - start} are left"
            )
        yield at, raw[start : start + size]
        at = start + size


class _Truncated(Exception):
    def __init__(self, at: int, what: str) -> None:
        super().__init__(what)
        self.at = at


def _message_name(index: int) -> str:
    return "the global metadata" if index < 0 else f"node {index}"


def _decompressed(raw: bytes) -> bytes:
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise TraceFormatError(f"a gzip file that does not decompress ({exc})") from None


def _schema() -> Any:
    try:
        from . import et_schema
    except ImportError:
        raise TraceFormatError(
            "reading a protobuf Chakra trace needs the protobuf package (pip install protobuf)"
        ) from None
    return et_schema.messages()


def document(raw: bytes) -> dict[str, Any]:
    """The nodes of an ``.et`` stream as a Chakra JSON document: ``{"nodes": [...]}``,
    with its ``GlobalMetadata.version`` as ``schema``."""
    schema = _schema()
    from google.protobuf.message import DecodeError  # importable: _schema() imported protobuf

    raw = _decompressed(raw)
    if not raw:
        raise TraceFormatError("an empty file (no global metadata, no nodes)")
    version, nodes = "", []
    read = 0
    try:
        for at, payload in _frames(raw):
            index, read = read - 1, read + 1
            kind = schema.GlobalMetadata if index < 0 else schema.Node
            try:
                message = kind.FromString(payload)
            except DecodeError as exc:
                raise TraceFormatError(
                    f"{_message_name(index)} (at byte {at}): does not parse as a Chakra "
                    f"{kind.DESCRIPTOR.name} ({exc or 'malformed'})"
                ) from None
            if index < 0:
                version = message.version
            else:
                nodes.append(_node(message, schema))
    except _Truncated as exc:
        raise TraceFormatError(
            f"{_message_name(read - 1)} (at byte {exc.at}): truncated file: {exc}"
        ) from None
    return {"schema": version, "nodes": nodes}


def _enum_name(enum: Any, number: int) -> str | int:
    """The name of ``number`` in ``enum``, or the number if the schema does not know it."""
    value = enum.values_by_number.get(number)
    return value.name if value is not None else number


def _attr(attr: Any) -> dict[str, Any]:
    which = attr.WhichOneof("value")
    if which is None:
        return {"name": attr.name}
    value = getattr(attr, which)
    return {"name": attr.name, which: list(value.values) if which.endswith("_list") else value}


def _node(node: Any, schema: Any) -> dict[str, Any]:
    """A ``Node`` message as the mapping :func:`clustersim.workload_trace.chakra.parse` reads."""
    found: dict[str, Any] = {"id": node.id}
    if node.name:
        found["name"] = node.name
    found["type"] = _enum_name(schema.node_type, node.type)
    found["duration_micros"] = node.duration_micros
    found["data_deps"] = list(node.data_deps)
    found["ctrl_deps"] = list(node.ctrl_deps)
    found["attr"] = [_attr(a) for a in node.attr]
    return found
