"""Chakra execution traces in JSON: one ``{"nodes": [...]}`` document, or the objects
``chakra_jsonizer`` writes one after another (protobuf's JSON mapping: ``dataDeps``,
``durationMicros``, ``int64Val`` as text; snake_case keys are read too).

What is read from each node: ``id``, ``name``, ``type``, ``duration_micros``,
``data_deps`` and ``ctrl_deps`` (both are dependencies: a node starts when every node
it names has ended), and the attributes ``comm_type``, ``comm_size`` (bytes, taken as
nccl-tests' size) and ``pg_name`` of collective nodes.

* ``COMP_NODE`` and the memory and metadata nodes replay their recorded duration on
  the compute stream (metadata nodes usually have none);
* ``COMM_COLL_NODE`` is a collective, its kind from :data:`COMM_TYPES`;
* ``COMM_SEND_NODE`` and ``COMM_RECV_NODE`` (point to point) are refused.

The enums are Chakra's ``schema/protobuf/et_def.proto`` (``NodeType`` and
``CollectiveCommType``), given by name or by number.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from .ops import TraceFormatError, TraceOp

NODE_TYPES = {
    0: "INVALID_NODE",
    1: "METADATA_NODE",
    2: "MEM_LOAD_NODE",
    3: "MEM_STORE_NODE",
    4: "COMP_NODE",
    5: "COMM_SEND_NODE",
    6: "COMM_RECV_NODE",
    7: "COMM_COLL_NODE",
}
"""Chakra's ``NodeType`` numbers (et_def.proto)."""

COMM_TYPES = {
    0: ("ALL_REDUCE", "allreduce"),
    1: ("REDUCE", "reduce"),
    2: ("ALL_GATHER", "allgather"),
    3: ("GATHER", "gather"),
    4: ("SCATTER", "scatter"),
    5: ("BROADCAST", "broadcast"),
    6: ("ALL_TO_ALL", "alltoall"),
    7: ("REDUCE_SCATTER", "reducescatter"),
    8: ("REDUCE_SCATTER_BLOCK", "reducescatter"),
}
"""Chakra's ``CollectiveCommType`` (et_def.proto) -> clustersim's operation; ``BARRIER``
(9) has no size and is not replayed."""

_COMM_BY_NAME = {name: op for name, op in COMM_TYPES.values()}


def _get(node: Mapping[str, Any], snake: str, default: Any = None) -> Any:
    """``node[snake]``, or its protobuf-JSON camelCase spelling."""
    if snake in node:
        return node[snake]
    head, *rest = snake.split("_")
    return node.get(head + "".join(p.title() for p in rest), default)


def _attrs(node: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute name -> value (the first ``*_val`` key of each attribute)."""
    found = {}
    for attr in _get(node, "attr", []) or []:
        if not isinstance(attr, Mapping) or "name" not in attr:
            continue
        values = [v for k, v in attr.items() if k.lower().endswith("val")]
        found[str(attr["name"])] = values[0] if values else None
    return found


def _number(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{what}: expected a number, got {value!r}") from None
    if not number >= 0 or number == float("inf"):
        raise TraceFormatError(f"{what}: expected a finite number >= 0, got {value!r}")
    return number


def _node_type(node: Mapping[str, Any], where: str) -> str:
    kind = _get(node, "type")
    if isinstance(kind, int) or (isinstance(kind, str) and kind.isdigit()):
        kind = NODE_TYPES.get(int(kind), kind)
    if kind not in NODE_TYPES.values():
        raise TraceFormatError(f"{where}: unknown node type {kind!r}")
    return str(kind)


def _collective(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    attrs = _attrs(node)
    comm = attrs.get("comm_type")
    if isinstance(comm, str) and comm.isdigit():
        comm = int(comm)
    op = COMM_TYPES.get(comm, ("", ""))[1] if isinstance(comm, int) else _COMM_BY_NAME.get(comm)
    if not op:
        known = ", ".join(f"{n} ({name})" for n, (name, _) in COMM_TYPES.items())
        raise TraceFormatError(f"{where}: unknown collective comm_type {comm!r} (allowed: {known})")
    return {
        "op": op,
        "size_bytes": _number(attrs.get("comm_size"), f"{where}.comm_size"),
        "group_name": str(attrs.get("pg_name") or ""),
    }


def _op(node: Any, i: int) -> TraceOp:
    where = f"nodes[{i}]"
    if not isinstance(node, Mapping) or "id" not in node:
        raise TraceFormatError(f"{where}: a node must be a mapping with an id")
    kind = _node_type(node, where)
    if kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        raise TraceFormatError(f"{where}: point-to-point {kind} nodes are not replayed")
    deps = [*(_get(node, "data_deps") or []), *(_get(node, "ctrl_deps") or [])]
    extra = _collective(node, where) if kind == "COMM_COLL_NODE" else {}
    return TraceOp(
        str(node["id"]),
        str(node.get("name", node["id"])),
        "collective" if extra else "compute",
        _number(_get(node, "duration_micros", 0), f"{where}.duration_micros") * 1e-6,
        after=tuple(dict.fromkeys(str(d) for d in deps)),
        **extra,
    )


def recognizes(doc: Any) -> bool:
    """Whether a JSON document is a Chakra trace: it has ``nodes``."""
    return isinstance(doc, Mapping) and "nodes" in doc


def parse(doc: Any, order: str = "") -> tuple[list[TraceOp], float]:
    """The nodes of a Chakra JSON trace in dependency order, and its longest dependency
    path at the recorded durations (s).  ``order`` is unused (dependencies are explicit)."""
    nodes = doc.get("nodes") if isinstance(doc, Mapping) else None
    if not isinstance(nodes, list):
        raise TraceFormatError("nodes must be a list of nodes")
    ops = [_op(node, i) for i, node in enumerate(nodes)]
    by_id: dict[str, TraceOp] = {}
    for op in ops:
        if op.id in by_id:
            raise TraceFormatError(f"duplicate node id {op.id}")
        by_id[op.id] = op
    for op in ops:
        for dep in op.after:
            if dep not in by_id:
                raise TraceFormatError(f"node {op.id} depends on unknown node {dep}")
    ordered = _topological(ops, by_id)
    end: dict[str, float] = {}
    for op in ordered:
        end[op.id] = max((end[d] for d in op.after), default=0.0) + op.duration_s
    return ordered, max(end.values(), default=0.0)


def _topological(ops: list[TraceOp], by_id: dict[str, TraceOp]) -> list[TraceOp]:
    """Kahn's algorithm, ties in file order; a cycle is a TraceFormatError."""
    waiting = {op.id: len(op.after) for op in ops}
    users: dict[str, list[str]] = {}
    for op in ops:
        for dep in op.after:
            users.setdefault(dep, []).append(op.id)
    ready = deque(op.id for op in ops if not op.after)
    ordered: list[TraceOp] = []
    while ready:
        current = ready.popleft()
        ordered.append(by_id[current])
        for user in users.get(current, []):
            waiting[user] -= 1
            if not waiting[user]:
                ready.append(user)
    if len(ordered) != len(ops):
        stuck = [op.id for op in ops if waiting[op.id]][:10]
        raise TraceFormatError(f"dependency cycle among nodes {', '.join(stuck)}")
    return ordered
