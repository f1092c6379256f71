"""``trace.json`` moved to :mod:`clustersim.outputs.trace`; these names stay importable here."""

from .outputs.trace import (
    COMMUNICATION_KINDS,
    COMMUNICATION_STREAM,
    COMPUTE_STREAM,
    TS_DIGITS,
    US_PER_S,
    Placed,
    node_of,
    nodes_of,
    stream_of,
    trace_document,
    trace_events,
    trace_json,
    write_trace,
)

__all__ = [
    "COMMUNICATION_KINDS",
    "COMMUNICATION_STREAM",
    "COMPUTE_STREAM",
    "TS_DIGITS",
    "US_PER_S",
    "Placed",
    "node_of",
    "nodes_of",
    "stream_of",
    "trace_document",
    "trace_events",
    "trace_json",
    "write_trace",
]
