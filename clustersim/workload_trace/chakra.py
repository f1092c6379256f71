"""Chakra execution traces as nodes: one ``{"nodes": [...]}`` JSON document, the objects
``chakra_jsonizer`` writes one after another (protobuf's JSON mapping: ``dataDeps``,
``durationMicros``, ``int64Val`` as text; snake_case keys are read too), or the nodes of a
protobuf ``.et`` file (:mod:`clustersim.workload_trace.chakra_et` reads them into the
same mappings).

What is read from each node: ``id``, ``name``, ``type``, ``duration_micros``,
``data_deps`` and ``ctrl_deps`` (both are dependencies: a node starts when every node
it names has ended), and the attributes ``comm_type``, ``comm_size`` (bytes, taken as
nccl-tests' size) and ``pg_name`` of collective nodes; ``comm_size``, ``pg_name``,
``comm_src``, ``comm_dst`` and ``comm_tag`` of point-to-point nodes (ASTRA-sim's feeder
reads the last three as ``int32_val``).

* ``COMP_NODE`` and the memory and metadata nodes replay their recorded duration on
  the compute stream (metadata nodes usually have none);
* ``COMM_COLL_NODE`` is a collective, its kind from :data:`COMM_TYPES`;
* ``COMM_SEND_NODE`` and ``COMM_RECV_NODE`` are ``send`` and ``recv`` ops: their size,
  their peer (a send's ``comm_dst``, a recv's ``comm_src``, a rank) and tag;
* ``INVALID_NODE`` (also a node without a type: protobuf's default) is refused.

Errors name the node by its index in the file (from 0) and its id: ``node 17 (id 42)``.

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
BARRIER, BARRIER_NAME = 9, "BARRIER"
"""``CollectiveCommType.BARRIER``, by number and by name: refused, having no size."""


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
    if value is None:
        raise TraceFormatError(f"{what}: missing (a number >= 0 is needed)")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{what}: expected a number, got {value!r}") from None
    if not number >= 0 or number == float("inf"):
        raise TraceFormatError(f"{what}: expected a finite number >= 0, got {value!r}")
    return number


def _node_type(node: Mapping[str, Any], where: str) -> str:
    kind = _get(node, "type", 0)
    if isinstance(kind, int) or (isinstance(kind, str) and kind.isdigit()):
        kind = NODE_TYPES.get(int(kind), kind)
    if kind not in NODE_TYPES.values():
        known = ", ".join(f"{n} ({name})" for n, name in NODE_TYPES.items() if n)
        raise TraceFormatError(f"{where}: unknown node type {kind!r} (allowed: {known})")
    if kind == NODE_TYPES[0]:
        raise TraceFormatError(f"{where}: an {kind} (type 0, or none given) is not a node")
    return str(kind)


def _rank(value: Any, what: str) -> int | None:
    """A rank or tag attribute: a whole number >= 0, None when absent."""
    if value is None:
        return None
    number = _number(value, what)
    if number != int(number):
        raise TraceFormatError(f"{what}: expected a whole number, got {value!r}")
    return int(number)


def _point_to_point(node: Mapping[str, Any], kind: str, where: str) -> dict[str, Any]:
    """A send's or recv's size, peer rank and tag (ASTRA-sim: a send goes to ``comm_dst``,
    a recv comes from ``comm_src``)."""
    attrs = _attrs(node)
    peer = "comm_dst" if kind == "COMM_SEND_NODE" else "comm_src"
    return {
        "size_bytes": _number(attrs.get("comm_size"), f"{where}.comm_size"),
        "group_name": str(attrs.get("pg_name") or ""),
        "peer": _rank(attrs.get(peer), f"{where}.{peer}"),
        "tag": _rank(attrs.get("comm_tag"), f"{where}.comm_tag"),
    }


def _collective(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    attrs = _attrs(node)
    comm = attrs.get("comm_type")
    if isinstance(comm, str) and comm.isdigit():
        comm = int(comm)
    op = COMM_TYPES.get(comm, ("", ""))[1] if isinstance(comm, int) else _COMM_BY_NAME.get(comm)
    if comm in (BARRIER, BARRIER_NAME):
        raise TraceFormatError(f"{where}: a BARRIER (comm_type 9) is not replayed (no size)")
    if not op:
        known = ", ".join(f"{n} ({name})" for n, (name, _) in COMM_TYPES.items())
        raise TraceFormatError(f"{where}: unknown collective comm_type {comm!r} (allowed: {known})")
    return {
        "op": op,
        "size_bytes": _number(attrs.get("comm_size"), f"{where}.comm_size"),
        "group_name": str(attrs.get("pg_name") or ""),
    }


POINT_TO_POINT = {"COMM_SEND_NODE": "send", "COMM_RECV_NODE": "recv"}
"""Chakra's point-to-point node types -> the :class:`TraceOp` kind."""


def _op(node: Any, i: int) -> TraceOp:
    if not isinstance(node, Mapping) or "id" not in node:
        raise TraceFormatError(f"node {i}: a node must be a mapping with an id")
    where = f"node {i} (id {node['id']})"
    kind = _node_type(node, where)
    deps = [*(_get(node, "data_deps") or []), *(_get(node, "ctrl_deps") or [])]
    if kind == "COMM_COLL_NODE":
        op_kind, extra = "collective", _collective(node, where)
    elif kind in POINT_TO_POINT:
        op_kind, extra = POINT_TO_POINT[kind], _point_to_point(node, kind, where)
    else:
        op_kind, extra = "compute", {}
    return TraceOp(
        str(node["id"]),
        str(node.get("name", node["id"])),
        op_kind,
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
    index: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.id in by_id:
            raise TraceFormatError(f"node {i} (id {op.id}): duplicate id, node {index[op.id]}'s")
        by_id[op.id], index[op.id] = op, i
    for i, op in enumerate(ops):
        for dep in op.after:
            if dep not in by_id:
                raise TraceFormatError(f"node {i} (id {op.id}): depends on unknown node id {dep}")
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
