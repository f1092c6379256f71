"""Collective operations: names, what ``bytes`` means for each, bus-bandwidth factors.

``size_bytes`` follows nccl-tests' "size" column:

============== ==============================================================
operation      ``size_bytes`` S is ...
============== ==============================================================
broadcast      the buffer the root sends to every rank
reduce         the buffer every rank contributes; the root gets the sum
allreduce      the buffer every rank contributes and gets back summed
allgather      the gathered result on each rank (each contributes S / n)
reducescatter  the input on each rank (each ends with its S / n, summed)
gather         the gathered result at the root (each contributes S / n)
scatter        the buffer at the root (each rank receives S / n)
alltoall       what each rank sends in all (S / n to each rank, itself included)
barrier        ignored (zero-byte messages)
============== ==============================================================

Bus bandwidth (nccl-tests) = algorithm bandwidth (S / time) x the factor below,
so that it can be compared with the link bandwidth whatever n is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import Problem, ScenarioError, hinted


@dataclass(frozen=True)
class Operation:
    """A collective operation."""

    name: str
    rooted: bool
    """Whether the operation has a root rank (broadcast, reduce, gather, scatter)."""
    reduces: bool
    """Whether data is summed on the way (reduce, allreduce, reducescatter)."""
    bus_factor: Callable[[int], float]
    """nccl-tests bus-bandwidth factor for a group of n ranks."""
    description: str


def _one(n: int) -> float:
    return 1.0


def _ring_share(n: int) -> float:
    return (n - 1) / n


def _allreduce_factor(n: int) -> float:
    return 2 * (n - 1) / n


def _zero(n: int) -> float:
    return 0.0


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("broadcast", True, False, _one, "root's buffer to every rank"),
        Operation("reduce", True, True, _one, "sum of every rank's buffer at the root"),
        Operation("gather", True, False, _ring_share, "every rank's part to the root"),
        Operation("scatter", True, False, _ring_share, "a part of the root's buffer to each rank"),
        Operation("allgather", False, False, _ring_share, "every rank's part to every rank"),
        Operation(
            "reducescatter", False, True, _ring_share, "sum of every buffer, a part to each rank"
        ),
        Operation("allreduce", False, True, _allreduce_factor, "sum of every buffer to every rank"),
        Operation(
            "alltoall", False, False, _ring_share, "a distinct part from every rank to every rank"
        ),
        Operation("barrier", False, False, _zero, "wait until every rank has arrived"),
    )
}
"""Every collective operation, by canonical name."""

_ALIASES = {name.replace("-", "").replace("_", ""): name for name in OPERATIONS}


def canonical_op(name: str, path: str = "") -> str:
    """The canonical name of an operation (``all-reduce``, ``all_reduce`` -> ``allreduce``)."""
    key = str(name).lower().replace("-", "").replace("_", "")
    if key in _ALIASES:
        return _ALIASES[key]
    raise ScenarioError(
        Problem(
            path,
            hinted(f"unknown collective operation '{name}'", key, OPERATIONS),
            ", ".join(OPERATIONS),
        )
    )


def bandwidths(op: str, n: int, size_bytes: float, time_s: float) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in bytes/s, as nccl-tests defines them."""
    if time_s <= 0 or op == "barrier":
        return 0.0, 0.0
    algbw = size_bytes / time_s
    return algbw, algbw * OPERATIONS[op].bus_factor(n)


MIN_TIMED_RANKS = 2
"""Fewest ranks of a collective that is timed on its own (the ``collective`` workload and
``clustersim collective``)."""


def timed_group_problem(devices: Sequence[str], path: str, fix: str) -> Problem | None:
    """Why a collective over ``devices`` cannot be timed on its own, or None.

    With one rank nothing moves: every operation takes 0 s and its bandwidths (size /
    time) are undefined, so the ``collective`` workload and ``clustersim collective``
    refuse it, the same for every operation.  (Inside a training run a one-rank group
    -- tp = 1, dp = 1 -- is a defined no-op of 0 s.)  ``fix`` says what to change.
    """
    if len(devices) >= MIN_TIMED_RANKS:
        return None
    names = ", ".join(devices) or "none"
    message = (
        f"the group has {len(devices)} device ({names}); a collective needs at least "
        f"{MIN_TIMED_RANKS} (with one nothing moves and its bandwidth is undefined)"
    )
    return Problem(path, message, fix)


def root_problem(root: int, ranks: int, path: str) -> Problem | None:
    """Why ``root`` is not a rank of a group of ``ranks`` (0 .. ranks - 1), or None.

    Checked for every operation: the ``root`` algorithm centres non-rooted ones on it too.
    """
    if 0 <= root < ranks:
        return None
    return Problem(path, f"root {root} is not a rank of the group of {ranks}", f"0 .. {ranks - 1}")
