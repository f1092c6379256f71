"""What a trace is read into: its operations (:class:`TraceOp`) and the whole trace
(:class:`WorkloadTrace`), the error a reader raises (:class:`TraceFormatError`), and the
names traces give collectives and dtypes (:func:`collective_op`, :data:`DTYPE_BYTES`), which
every reader shares.  Units: seconds, bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TraceOp:
    """One operation of a recorded trace."""

    id: str
    """Unique id inside the trace (``k12`` for a Kineto event, the node id for Chakra)."""
    name: str
    """The kernel's or node's name as recorded."""
    kind: str
    """``compute``, ``collective``, or ``send`` / ``recv`` (a Chakra point-to-point node)."""
    duration_s: float
    """Recorded duration (s); a compute op replays it, a collective only reports it."""
    stream: str = ""
    """The CUDA stream it ran on (Kineto), empty for Chakra."""
    after: tuple[str, ...] = ()
    """Ids of the ops that must end before it starts."""
    op: str = ""
    """A collective's clustersim operation (``allreduce``, ``allgather``, ...)."""
    size_bytes: float = 0.0
    """A collective's nccl-tests size (:mod:`clustersim.collectives.ops`); the bytes a send
    or recv moves."""
    group_size: int | None = None
    """Ranks of a collective's process group, when recorded."""
    group_name: str = ""
    """A collective's or send's or recv's process group name, when recorded."""
    peer: int | None = None
    """The other rank of a send (its destination) or recv (its source), when recorded."""
    tag: int | None = None
    """A send's or recv's tag (matches a send to its recv), when recorded."""


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

    @property
    def point_to_point(self) -> list[TraceOp]:
        """The sends and recvs."""
        return [op for op in self.ops if op.kind in ("send", "recv")]


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
