"""Mixed clusters: a racked cluster whose nodes are of several kinds (``cluster.node_groups``).

```yaml
cluster:
  kind: two_tier
  racks: 6
  nodes_per_rack: 8
  node_groups:                       # in build order: racks 0-3 A100, racks 4-5 H100
    - {preset: dgx-a100, count: 32, gpu_hour_price: 1.6}
    - {preset: dgx-h100, count: 16, gpu_hour_price: 2.9}
```

Each group is a node (:class:`~clustersim.scenario.node.NodeSpec`, a preset and the keys beside
it) and how many nodes are of that kind.  Nodes take the groups' kinds in build order -- rack
by rack (pod by pod, group by group), node by node -- so a group whose count is a multiple of
the nodes per rack fills whole racks; device names do not change (``rack4/node0/gpu3``).  The
cluster's ``node`` is then the first group's node: what every node shares (GPUs and NICs per
node, the NIC transport) is read from it.  Units: counts, currency per GPU-hour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from clustersim.errors import Problem, join_path

from .fields import Count, Float, Invalid
from .node import NodeSpec

SHARED = (
    ("gpus", lambda node: node.gpus, "GPUs per node"),
    ("nics", lambda node: node.nics, "NICs per node"),
    ("nic.transport", lambda node: node.nic.transport, "NIC transport"),
)
"""What every node of a mixed cluster must share: (key, read it, what it is).  Placement,
rails and the racks' uplinks assume nodes of one shape; the GPUs and links may differ."""


class NodeGroupSpec(NodeSpec):
    """Nodes of one kind in a mixed cluster: a node (a preset and keys beside it) and a count."""

    count: Count
    """How many nodes are of this kind; the groups' counts add up to the cluster's nodes."""
    gpu_hour_price: Float | None = Field(None, gt=0)
    """Price of one of this group's GPU-hours (optional; the cluster's ``gpu_hour_price``
    otherwise)."""


def with_first_node(node: NodeSpec | None, groups: Sequence[NodeGroupSpec] | None) -> NodeSpec:
    """The node a racked cluster reads what its nodes share from: ``node``, or the first of
    ``groups`` when only they are given.  :class:`Invalid` at ``node`` when both or neither
    are given."""
    if groups is None:
        if node is None:
            raise Invalid(Problem("node", "required key missing", "node: {...} or node_groups"))
        return node
    if node is not None:
        message = "both node and node_groups given: node_groups lists every node kind"
        raise Invalid(Problem("node", message, "one of node or node_groups"))
    return groups[0]


def group_problems(groups: Sequence[NodeGroupSpec], nodes: int, how: str) -> list[Problem]:
    """What is wrong with the node groups of a racked cluster of ``nodes`` nodes (``how``:
    how that count follows from its keys): counts that do not add up, groups of different
    shapes or with NVLink domains across nodes."""
    problems: list[Problem] = []
    counted = sum(group.count for group in groups)
    if counted != nodes:
        counts = " + ".join(str(group.count) for group in groups)
        message = f"the groups hold {counts} = {counted} nodes; the cluster has {nodes} ({how})"
        problems.append(Problem("node_groups", message, f"counts adding up to {nodes}"))
    first = groups[0]
    for i, group in enumerate(groups):
        for key, read, what in SHARED:
            if read(group) != read(first):
                message = (
                    f"{what} {read(group)} differ from the first group's {read(first)}: the "
                    "nodes of a mixed cluster share their shape"
                )
                problems.append(
                    Problem(join_path("node_groups", i, key), message, str(read(first)))
                )
        if group.nvlink_domain != 1:
            message = "NVLink domains across nodes are not modelled in a mixed cluster"
            problems.append(Problem(join_path("node_groups", i, "nvlink_domain"), message, "1"))
    return problems


def check_groups(spec: Any, nodes: int, how: str) -> None:
    """:func:`group_problems` of a cluster ``spec`` with node groups raised as
    :class:`Invalid`; nothing without."""
    if spec.node_groups:
        problems = group_problems(spec.node_groups, nodes, how)
        if problems:
            raise Invalid(problems)


def node_kinds(spec: Any, nodes: int, first: int = 0) -> list[NodeSpec]:
    """The kind of each of the ``nodes`` nodes of a racked cluster ``spec`` from node
    ``first`` on, in build order: its ``node`` for all, or its ``node_groups`` one after
    another.  O(groups + nodes)."""
    groups = getattr(spec, "node_groups", None)
    if not groups:
        return [spec.node] * nodes
    kinds: list[NodeSpec] = []
    start, stop = first, first + nodes
    at = 0  # the first node of the group
    for group in groups:
        low, high = max(start, at), min(stop, at + group.count)
        kinds += [group] * max(high - low, 0)
        at += group.count
    return kinds


def is_mixed(spec: Any) -> bool:
    """True when the cluster ``spec`` lists node groups (even of one kind)."""
    return bool(getattr(spec, "node_groups", None))


def mean_gpu_hour_price(spec: Any) -> float | None:
    """Price of one GPU-hour of the cluster ``spec``: its ``gpu_hour_price``, or in a mixed
    cluster the mean over its GPUs of their groups' prices (a group without one takes the
    cluster's); None when a price is missing."""
    price = getattr(spec, "gpu_hour_price", None)
    groups = getattr(spec, "node_groups", None)
    if not groups:
        return price
    gpus = [group.count * group.gpus for group in groups]
    prices = [group.gpu_hour_price or price for group in groups]
    if any(p is None for p in prices) or not sum(gpus):
        return None
    return sum(n * p for n, p in zip(gpus, prices, strict=True)) / sum(gpus)  # type: ignore[operator]
