"""Hybrid placement: data-, tensor- and pipeline-parallel ranks mapped onto the workers.

``parallelism: {dp, tp, pp, order}`` splits the workers (``data_parallel.workers``,
default every GPU, in topology order: node by node) into a dp x pp grid of
tensor-parallel groups of tp GPUs.  ``order`` lists the axes innermost first
(default ``[tp, pp, dp]``, Megatron-LM's): worker number

    rank = c[order[0]] + n[order[0]] (c[order[1]] + n[order[1]] c[order[2]])

holds coordinate c of each axis, so with the default the tp GPUs of a group
are consecutive (one node), the stages of a replica follow each other and the
replicas come last.

Impossible combinations are errors naming the key: dp x tp x pp different
from the number of workers, a tensor-parallel group spanning nodes without
``allow_cross_node_tp`` (tensor parallelism needs NVLink bandwidth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import Problem, ScenarioError
from ..scenario import ParallelismSpec
from ..topology import Topology

AXES = ("tp", "pp", "dp")


@dataclass(frozen=True)
class Placement:
    """Which worker holds tensor rank t of stage s of replica d."""

    dp: int
    tp: int
    pp: int
    order: tuple[str, ...]
    """Axes innermost first."""
    workers: tuple[str, ...]

    def rank(self, d: int, s: int, t: int) -> int:
        """Index into ``workers`` of (replica d, stage s, tensor rank t)."""
        coords = {"dp": d, "pp": s, "tp": t}
        sizes = {"dp": self.dp, "pp": self.pp, "tp": self.tp}
        rank, stride = 0, 1
        for axis in self.order:
            rank += coords[axis] * stride
            stride *= sizes[axis]
        return rank

    def device(self, d: int, s: int, t: int) -> str:
        return self.workers[self.rank(d, s, t)]

    def tp_group(self, d: int, s: int) -> tuple[str, ...]:
        """The devices of stage s of replica d, tensor rank 0 first."""
        return tuple(self.device(d, s, t) for t in range(self.tp))

    def dp_group(self, s: int, t: int) -> tuple[str, ...]:
        """The devices holding the same shard (stage s, tensor rank t) in every replica."""
        return tuple(self.device(d, s, t) for d in range(self.dp))

    def grid(self) -> list[list[tuple[str, ...]]]:
        """``grid[d][s]``: the tensor-parallel group of stage s of replica d."""
        return [[self.tp_group(d, s) for s in range(self.pp)] for d in range(self.dp)]


def place(
    workers: Sequence[str],
    parallelism: ParallelismSpec,
    topology: Topology,
    path: str = "parallelism",
) -> Placement:
    """The placement of ``parallelism`` on ``workers``; ScenarioError for impossible ones."""
    n, tp, pp = len(workers), parallelism.tp, parallelism.pp
    dp = parallelism.dp if parallelism.dp is not None else _default_dp(n, tp, pp, path)
    if dp * tp * pp != n:
        raise ScenarioError(
            Problem(
                f"{path}.dp",
                f"dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp}, but there are {n} workers",
                f"dp x tp x pp = {n} (or select workers with data_parallel.workers)",
            )
        )
    placement = Placement(dp, tp, pp, tuple(parallelism.order), tuple(workers))
    if tp > 1 and not parallelism.allow_cross_node_tp:
        _check_tp_in_node(placement, topology, path)
    return placement


def _default_dp(n: int, tp: int, pp: int, path: str) -> int:
    if n % (tp * pp):
        key = f"{path}.pp" if tp == 1 else f"{path}.tp" if pp == 1 else path
        raise ScenarioError(
            Problem(
                key,
                f"tp {tp} x pp {pp} = {tp * pp} does not divide the {n} workers",
                f"tp x pp dividing {n}",
            )
        )
    return n // (tp * pp)


def _check_tp_in_node(placement: Placement, topology: Topology, path: str) -> None:
    """Every tensor-parallel group on one node (clusters with nodes only)."""
    devices = topology.devices
    for d in range(placement.dp):
        for s in range(placement.pp):
            group = placement.tp_group(d, s)
            nodes = sorted({devices[x].node for x in group if devices[x].node is not None})
            if len(nodes) <= 1:
                continue
            per_node = sum(1 for x in devices.values() if x.node == nodes[0] and x.kind == "gpu")
            reason = (
                f"tp {placement.tp} is larger than a node's {per_node} GPUs"
                if placement.tp > per_node
                else f"with order {list(placement.order)} the tensor-parallel group of replica "
                f"{d} stage {s} spans nodes {', '.join(nodes)}"
            )
            raise ScenarioError(
                Problem(
                    f"{path}.tp",
                    f"{reason}; tensor parallelism needs NVLink inside a node",
                    f"tp <= {per_node} with tp innermost in order, "
                    "or parallelism.allow_cross_node_tp: true",
                )
            )
