"""Hybrid placement: data-, tensor-, context- and pipeline-parallel ranks mapped onto the workers.

``parallelism: {dp, tp, pp, order}`` splits the workers (``data_parallel.workers``,
default every GPU, in topology order: node by node) into a dp x pp grid of
tensor-parallel groups of tp GPUs.  ``order`` lists the axes innermost first
(default ``[tp, pp, dp]``, Megatron-LM's): worker number

    rank = c[order[0]] + n[order[0]] (c[order[1]] + n[order[1]] c[order[2]])

holds coordinate c of each axis, so with the default the tp GPUs of a group
are consecutive (one node), the stages of a replica follow each other and the
replicas come last.

On a mixed cluster (node groups filled kind by kind) the order decides what sits on one GPU
type: with ``[tp, pp, dp]`` a replica's tp x pp workers are consecutive, so each replica
is of one type; with ``[tp, dp, pp]`` a stage's tp x dp workers are, so each stage is
(what ``pipeline.stages: balanced`` balances; docs/mixed-clusters.md).

Context parallelism (``cp``, ring attention) is a fourth axis: when ``order``
does not list it, it comes right after ``tp`` (Megatron-Core's tp-cp-pp-dp),
so with ``cp`` = 1 every rank is where it was with three axes.  A stage of a
replica then holds ``cp`` tensor groups (its *stage group*, cp rank by cp
rank), and the gradients are reduced over dp x cp (:meth:`Placement.dp_group`).

Impossible combinations are errors naming the key: dp x tp x pp different
from the number of workers, a tensor-parallel group spanning nodes without
``allow_cross_node_tp`` (tensor parallelism needs NVLink bandwidth), a tensor-parallel
group of several GPU types (a mixed cluster's: its GPUs split each layer in lock step).
A context-parallel ring may hold several types: its ranks exchange keys and values
step by step, so the slowest sets the pace, as in data parallelism.  The rules
and their messages live in :mod:`clustersim.parallel.rules`; this module finds
the groups they judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from ..errors import Problem
from ..scenario import ParallelismSpec
from ..topology import Topology
from . import rules

AXES = ("tp", "cp", "pp", "dp")


@dataclass(frozen=True)
class Placement:
    """Which worker holds tensor rank t of stage s of replica d."""

    dp: int
    tp: int
    pp: int
    order: tuple[str, ...]
    """Axes innermost first, as given (``cp`` may be missing: see :attr:`axes`)."""
    workers: tuple[str, ...]
    cp: int = 1

    @property
    def axes(self) -> tuple[str, ...]:
        """The four axes innermost first: ``order``, with ``cp`` right after ``tp`` if absent."""
        if "cp" in self.order:
            return self.order
        at = self.order.index("tp") + 1
        return (*self.order[:at], "cp", *self.order[at:])

    def rank(self, d: int, s: int, t: int, c: int = 0) -> int:
        """Index into ``workers`` of (replica d, stage s, tensor rank t, context rank c)."""
        dp, pp, tp, cp = self._strides
        return d * dp + s * pp + t * tp + c * cp

    @cached_property
    def _strides(self) -> tuple[int, int, int, int]:
        """The stride in ``workers`` of one step along dp, pp, tp and cp (the axes nest in
        :attr:`axes` order, innermost first)."""
        sizes = {"dp": self.dp, "pp": self.pp, "tp": self.tp, "cp": self.cp}
        strides, stride = {}, 1
        for axis in self.axes:
            strides[axis] = stride
            stride *= sizes[axis]
        return strides["dp"], strides["pp"], strides["tp"], strides["cp"]

    def device(self, d: int, s: int, t: int, c: int = 0) -> str:
        return self.workers[self.rank(d, s, t, c)]

    def tp_group(self, d: int, s: int, c: int = 0) -> tuple[str, ...]:
        """The tensor group of context rank c of stage s of replica d, tensor rank 0 first."""
        return tuple(self.device(d, s, t, c) for t in range(self.tp))

    def cp_group(self, d: int, s: int, t: int) -> tuple[str, ...]:
        """The context-parallel ring of tensor rank t of stage s of replica d, cp rank 0 first."""
        return tuple(self.device(d, s, t, c) for c in range(self.cp))

    def stage_group(self, d: int, s: int) -> tuple[str, ...]:
        """Every device of stage s of replica d: the tensor groups of cp ranks 0, 1, ..."""
        return tuple(x for c in range(self.cp) for x in self.tp_group(d, s, c))

    def dp_group(self, s: int, t: int) -> tuple[str, ...]:
        """The devices holding the same shard (stage s, tensor rank t) in every replica and
        context rank (the gradients are reduced over dp x cp), in rank order."""
        return tuple(self.device(d, s, t, c) for d in range(self.dp) for c in range(self.cp))

    def grid(self) -> list[list[tuple[str, ...]]]:
        """``grid[d][s]``: the stage group of stage s of replica d (the tensor group when
        cp = 1)."""
        return [[self.stage_group(d, s) for s in range(self.pp)] for d in range(self.dp)]


def place(
    workers: Sequence[str],
    parallelism: ParallelismSpec,
    topology: Topology,
    path: str = "parallelism",
) -> Placement:
    """The placement of ``parallelism`` on ``workers``; ScenarioError for impossible ones
    (the rules of :mod:`clustersim.parallel.rules`)."""
    n, tp, pp, cp = len(workers), parallelism.tp, parallelism.pp, parallelism.cp
    dp = parallelism.dp
    if dp is None:
        rules.enforce(rules.grid_split_problem(n, tp, pp, path, cp=cp))
        dp = n // (tp * pp * cp)
    rules.enforce(rules.grid_size_problem(n, dp, tp, pp, path, cp=cp))
    placement = Placement(dp, tp, pp, tuple(parallelism.order), tuple(workers), cp)
    if tp > 1 and not parallelism.allow_cross_node_tp:
        rules.enforce(_node_problem(placement, topology, path))
    if tp > 1:
        rules.enforce(_type_problem(placement, topology, path))
    return placement


def _type_problem(placement: Placement, topology: Topology, path: str) -> Problem | None:
    """The first tensor-parallel group whose GPUs are of several types (mixed clusters)."""
    devices = topology.devices
    if len({devices[x].type for x in placement.workers}) <= 1:
        return None
    for d in range(placement.dp):
        for s, c in ((s, c) for s in range(placement.pp) for c in range(placement.cp)):
            group = placement.tp_group(d, s, c)
            types = [devices[x].type for x in group]
            problem = rules.tensor_group_type_problem(group, types, d, s, path)
            if problem is not None:
                return problem
    return None


def _node_problem(placement: Placement, topology: Topology, path: str) -> Problem | None:
    """The first tensor-parallel group spread over nodes (clusters with nodes only)."""
    devices = topology.devices
    for d in range(placement.dp):
        for s, c in ((s, c) for s in range(placement.pp) for c in range(placement.cp)):
            group = placement.tp_group(d, s, c)
            nodes = sorted({devices[x].node for x in group if devices[x].node is not None})
            if len(nodes) <= 1:
                continue
            per_node = sum(1 for x in devices.values() if x.node == nodes[0] and x.kind == "gpu")
            spread = rules.SpreadGroup(placement.order, d, s, nodes)
            return rules.tensor_group_node_problem(placement.tp, per_node, spread=spread, path=path)
    return None
