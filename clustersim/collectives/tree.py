"""Pipelined tree algorithms as NCCL runs them: a binary tree and the double binary tree.

Model and schedule
------------------
A tree's share of the message is cut into c = ceil(m / chunk) equal pieces of
p = m / c bytes (m = the bytes a tree carries; ``call.chunk_bytes``, default
:data:`TREE_CHUNK_BYTES` = 1 MiB; a zero-byte message is one piece).  Each tree
edge, in each direction it is used, is a *stream* (one NCCL connection): its
pieces go in order, and a piece that follows the previous one without a gap
does not pay the route latency again (:meth:`Schedule.send`'s
``stream_after``), so a stream of c pieces over one hop takes alpha + m beta.

* broadcast: a node sends piece k to all its children at once as soon as it
  has it (they share its uplink in the flow-level model);
* reduce: a node sends piece k to its parent once piece k has arrived from
  every child (the receiver sums each piece it gets);
* allreduce: reduce to the root and broadcast from it; the root sends piece k
  down as soon as it has reduced it, so both pipelines run at once;
* barrier: allreduce of one zero-byte piece on the first tree.

Ranks are multi-ported, as NCCL's tree kernels are: a rank receives from its
children and its parent and sends to them concurrently, and the network
shares the links (max-min in the flow-level model).

Trees (positions are ranks relative to ``call.root``; allreduce and barrier
use root 0):

* ``tree``: the complete binary tree, position j has children 2j+1, 2j+2.
* ``double_tree``: NCCL's two complementary in-order binary trees (Sanders,
  Speck & Träff 2009).  Tree 1: position 0 is the root with one child, the
  largest power of two below n; a position q > 0 whose lowest set bit is b has
  parent (q - b) + 2b, or q - b if that is >= n, so odd positions are leaves.
  Tree 2 is tree 1 shifted by one (node q played by position q + 1 mod n): for
  even n every position is a leaf in one tree and interior in the other; for
  odd n the same holds except position 0.  Each tree carries half the data.
  For broadcast and reduce the call's root (position 0) also feeds tree 2's
  root (broadcast) or receives tree 2's reduced pieces from it (reduce).

An all-reduce (or barrier) whose ranks sit on several nodes, some with more
than one rank, runs as NCCL's: the trees above are built over the *nodes*,
and each node's ranks form a chain below the node's head (its first rank; the
second tree's chains run from the last rank, so the two trees leave a node
through different GPUs, as NCCL's channels do).  A node's NIC then carries
what a node of the node-level tree sends: 2 S for the double tree, like the
ring's 2 (n-1)/n S, and S on two nodes (each node the root of one tree), where
the tree beats the ring.

Cost
----
With alpha the route latency of a hop and the links' bandwidths, :meth:`cost`
is ``A + (F + L (c - 1)) p + R`` seconds:

* A: the latency of the longest root-leaf path, up and down for an all-reduce
  (2 D alpha on uniform hops, D the depth: a latency-bound all-reduce costs
  2 log2(n) hops, like halving-doubling), once for a broadcast or reduce;
* L: seconds per byte of the busiest link in steady state, every stream that
  crosses it counted once (on a switch, an interior rank's uplink carries 1
  piece up and 2 down per piece: L = 3 beta for one tree; the double tree's
  rank is interior in one tree and a leaf in the other: 4 half pieces, so L
  = 4 beta on pieces of half the size, a bandwidth term of 2 S beta -- the
  ring's 2 (n-1)/n S beta as n grows);
* F: seconds per byte of the first piece along the slowest root-leaf path
  (the pipeline fill), each hop at its share of its links with every stream of
  the same phase (up or down), 2 beta a level on a switch;
* R: reductions on the path (depth x two pieces' sums) when ``reduce_cost``.

On a switch this is the flow-level time within 1% for one tree at 64 MB and
more, and within 10% for the double tree; with few pieces it errs on the slow
side (at most 2.3x, a one-piece double tree on a few ranks), never fast by
more than 1% (tests/test_collectives_tree.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..caches import registered
from ..memo import kept
from ..topology import Topology
from .algorithm import Algorithm
from .bus import route_latency
from .call import CollectiveCall, node_groups
from .fluid import pair_flows
from .ops import OPERATIONS
from .schedule import Schedule

TREE_CHUNK_BYTES = float(2**20)
"""Default pipelining piece of the tree algorithms: 1 MiB."""

TREE_OPS = frozenset({"broadcast", "reduce", "allreduce", "barrier"})


@dataclass(frozen=True)
class Tree:
    """A rooted tree over positions 0 .. n-1: ``parent[q]`` (-1 at the root), ordered children."""

    root: int
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]

    @classmethod
    def from_parents(cls, parent: list[int]) -> Tree:
        """The tree of a parent list (children in increasing position order)."""
        kids: list[list[int]] = [[] for _ in parent]
        for q, up in enumerate(parent):
            if up >= 0:
                kids[up].append(q)
        root = parent.index(-1)
        return cls(root, tuple(parent), tuple(tuple(k) for k in kids))

    def relabel(self, play: list[int]) -> Tree:
        """The same tree with node q played by position ``play[q]``."""
        parent = [-1] * len(play)
        for q, up in enumerate(self.parent):
            parent[play[q]] = play[up] if up >= 0 else -1
        kids: list[tuple[int, ...]] = [()] * len(play)
        for q, ks in enumerate(self.children):
            kids[play[q]] = tuple(play[k] for k in ks)
        return Tree(play[self.root], tuple(parent), tuple(kids))

    def bottom_up(self) -> list[int]:
        """Positions with every child before its parent."""
        order = self.top_down()
        order.reverse()
        return order

    def top_down(self) -> list[int]:
        """Positions with every parent before its children (breadth first)."""
        order = [self.root]
        for q in order:
            order.extend(self.children[q])
        return order

    def depth(self) -> int:
        """Edges from the root to the deepest node."""
        level = {self.root: 0}
        for q in self.top_down():
            for k in self.children[q]:
                level[k] = level[q] + 1
        return max(level.values())


def binary_tree(n: int) -> Tree:
    """Complete binary tree: position j has children 2j+1 and 2j+2."""
    return Tree.from_parents([-1] + [(j - 1) // 2 for j in range(1, n)])


def inorder_tree(n: int) -> Tree:
    """NCCL-style in-order binary tree rooted at 0 (odd positions are leaves)."""
    parent = [-1] * n
    for q in range(1, n):
        low = q & -q
        up = (q ^ low) | (low << 1)
        parent[q] = up if up < n else q ^ low
    return Tree.from_parents(parent)


def double_trees(n: int) -> tuple[Tree, Tree]:
    """The two complementary trees: the in-order tree, and it shifted by one position."""
    first = inorder_tree(n)
    return first, first.relabel([(q + 1) % n for q in range(n)])


def pieces_of(nbytes: float, chunk: float | None) -> tuple[int, float]:
    """(c, p): ``nbytes`` cut into c = ceil(nbytes / chunk) equal pieces of p bytes (c >= 1)."""
    chunk = TREE_CHUNK_BYTES if chunk is None else chunk
    count = max(1, math.ceil(nbytes / chunk)) if chunk > 0 else 1
    return count, nbytes / count


def _spread_groups(call: CollectiveCall, topology: Topology) -> list[list[int]] | None:
    """Ranks of ``call`` grouped by node (:func:`hierarchical.node_groups`), or None when
    the group spans one node, or a device has no node, or no node has two of its ranks."""
    groups = node_groups(call, topology)
    if groups is None or len(groups) < 2 or len(groups) == call.n:
        return None
    return groups


def chained(tree: Tree, groups: list[list[int]], reverse: bool = False) -> Tree:
    """A tree over ranks from ``tree`` over nodes: each node's ranks form a chain whose
    head (its first rank, its last with ``reverse``) links to the heads of the node's
    parent and children -- NCCL's tree: a chain inside each node, a binary tree across."""
    n = sum(len(g) for g in groups)
    parent = [-1] * n
    chains = [list(reversed(g)) if reverse else list(g) for g in groups]
    for node, chain in enumerate(chains):
        up = tree.parent[node]
        parent[chain[0]] = chains[up][0] if up >= 0 else -1
        for before, rank in zip(chain, chain[1:], strict=False):
            parent[rank] = before
    return Tree.from_parents(parent)


class _Streams:
    """Sends added to a schedule, each piece of an edge continuing that edge's stream."""

    def __init__(self, schedule: Schedule, ranks: list[int]) -> None:
        self.schedule = schedule
        self.ranks = ranks
        """Rank playing each tree position."""
        self.last: dict[tuple[int, int, int], int] = {}

    def send(
        self,
        tree_id: int,
        src: int,
        dst: int,
        nbytes: float,
        after: list[int],
        reduce: bool,
        step: int,
    ) -> int:
        """Add a piece from ``src`` to ``dst`` of tree ``tree_id`` after ``after``; its id."""
        key = (tree_id, src, dst)
        ranks = self.ranks
        i = self.schedule.send(
            ranks[src],
            ranks[dst],
            nbytes,
            after,
            nbytes if reduce else 0.0,
            step,
            self.last.get(key, -1),
        )
        self.last[key] = i
        return i


def _reduce(out: _Streams, tree: Tree, tree_id: int, pieces: int, size: float) -> list[list[int]]:
    """Reduce pieces up ``tree`` (a node forwards piece k once every child's piece k is in);
    return, per piece, the sends into the root."""
    into: list[list[list[int]]] = [[[] for _ in range(pieces)] for _ in tree.parent]
    order = tree.bottom_up()
    for k in range(pieces):
        for q in order:
            parent = tree.parent[q]
            if parent >= 0:
                into[parent][k].append(out.send(tree_id, q, parent, size, into[q][k], True, k))
    return [into[tree.root][k] for k in range(pieces)]


def _broadcast(
    out: _Streams,
    tree: Tree,
    tree_id: int,
    pieces: int,
    size: float,
    ready: list[list[int]],
    holders: frozenset[int] = frozenset(),
) -> None:
    """Broadcast pieces down ``tree``, a node sending piece k to all its children at once
    when it has it; the root has piece k after ``ready[k]``.  ``holders`` already have
    the data: nothing is sent to them and they send without waiting."""
    order = tree.top_down()
    for k in range(pieces):
        got = {tree.root: ready[k]}
        for q in order:
            deps = [] if q in holders else got[q]
            for child in tree.children[q]:
                if child in holders:
                    got[child] = []
                else:
                    got[child] = [out.send(tree_id, q, child, size, deps, False, k)]


def _allreduce(out: _Streams, trees: list[Tree], pieces: int, size: float) -> None:
    """Reduce up each tree and broadcast down it, piece by piece: the root sends piece k
    down as soon as it has reduced it, so both pipelines run at once."""
    for tree_id, tree in enumerate(trees):
        at_root = _reduce(out, tree, tree_id, pieces, size)
        _broadcast(out, tree, tree_id, pieces, size, at_root)


class _TreeAlgorithm(Algorithm):
    """Common machinery: the trees and their pieces; build the sends, price them."""

    ops = TREE_OPS

    def trees(self, n: int) -> list[Tree]:
        """The trees over n ranks the data is split over (equal shares)."""
        raise NotImplementedError

    def node_trees(self, nodes: int) -> list[Tree]:
        """The same trees over ``nodes`` nodes (all-reduce across nodes)."""
        return self.trees(nodes)

    def trees_of(self, call: CollectiveCall, topology: Topology) -> list[Tree]:
        """The trees of ``call``: an all-reduce over several nodes runs, as NCCL's does,
        on :meth:`node_trees` over the nodes with a chain through each node's ranks
        (:func:`chained`); anything else on :meth:`trees` over the ranks."""
        key = (self.name, call.op in ("allreduce", "barrier"), call.devices, topology)
        found = _TREES.get(key)
        if found is not None:
            return found
        groups = _spread_groups(call, topology) if key[1] else None
        if groups is None:
            found = self.trees(call.n)
        else:
            found = [
                chained(tree, groups, reverse=bool(t % 2))
                for t, tree in enumerate(self.node_trees(len(groups)))
            ]
        if len(_TREES) >= _SHAPE_CACHE_LIMIT:
            _TREES.clear()
        _TREES[key] = found
        return found

    @staticmethod
    def ranks(call: CollectiveCall) -> list[int]:
        """Rank playing each position: rooted operations count from the root."""
        root = call.root if OPERATIONS[call.op].rooted else 0
        return [(q + root) % call.n for q in range(call.n)]

    def pieces(self, call: CollectiveCall, topology: Topology) -> tuple[list[Tree], int, float]:
        """(trees, c, p): the trees used and each tree's share cut into c pieces of p bytes."""
        trees = self.trees_of(call, topology)
        if call.op == "barrier":
            return trees[:1], 1, 0.0
        pieces, size = pieces_of(call.size_bytes / len(trees), call.chunk_bytes)
        return trees, pieces, size

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The sends of ``call``: every tree edge a stream of pieces (see the module docstring)."""
        sched = Schedule(call.n)
        if call.n < 2:
            return sched
        out = _Streams(sched, self.ranks(call))
        trees, pieces, size = self.pieces(call, topology)
        if call.op in ("allreduce", "barrier"):
            _allreduce(out, trees, pieces, size)
        elif call.op == "broadcast":
            self._broadcast(out, trees, pieces, size)
        else:
            self._reduce(out, trees, pieces, size)
        return sched

    @staticmethod
    def _broadcast(out: _Streams, trees: list[Tree], pieces: int, size: float) -> None:
        """Broadcast from position 0 down every tree; position 0 feeds a tree rooted elsewhere."""
        for tree_id, tree in enumerate(trees):
            if tree.root == 0:
                _broadcast(out, tree, tree_id, pieces, size, [[] for _ in range(pieces)])
                continue
            feed = [[out.send(tree_id, 0, tree.root, size, [], False, k)] for k in range(pieces)]
            _broadcast(out, tree, tree_id, pieces, size, feed, frozenset({0}))

    @staticmethod
    def _reduce(out: _Streams, trees: list[Tree], pieces: int, size: float) -> None:
        """Reduce up every tree to position 0; a tree rooted elsewhere hands its result to 0."""
        for tree_id, tree in enumerate(trees):
            at_root = _reduce(out, tree, tree_id, pieces, size)
            if tree.root != 0:
                for k in range(pieces):
                    out.send(tree_id, tree.root, 0, size, at_root[k], False, k)

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The schedule's sends, counted: every stream carries every piece."""
        if call.n < 2:
            return 0.0
        _trees, pieces, _size = self.pieces(call, topology)
        return float(len(self.streams(call, topology))) * pieces

    def streams(self, call: CollectiveCall, topology: Topology) -> list[tuple[int, str, int, int]]:
        """Every stream of ``call`` as (tree, phase, sender, receiver) positions: each tree's
        edges in the directions the operation uses, phase ``up`` (reduce) or ``down``
        (broadcast), and the feed between position 0 and a tree rooted elsewhere."""
        trees, _pieces, _size = self.pieces(call, topology)
        out: list[tuple[int, str, int, int]] = []
        for t, tree in enumerate(trees):
            up = [(q, p) for q, p in enumerate(tree.parent) if p >= 0]
            if call.op in ("allreduce", "barrier"):
                out += [(t, "up", q, p) for q, p in up] + [(t, "down", p, q) for q, p in up]
            elif call.op == "broadcast":
                if tree.root != 0:
                    out.append((t, "down", 0, tree.root))
                out += [(t, "down", p, q) for q, p in up if q != 0]
            else:
                out += [(t, "up", q, p) for q, p in up]
                if tree.root != 0:
                    out.append((t, "up", tree.root, 0))
        return out

    def link_flows(self, call: CollectiveCall, topology: Topology) -> dict[int, float]:
        """Link index -> streams crossing it: every stream of :meth:`streams` is one flow,
        counting its route's wire where ``topology`` prices links below their line rate
        (:func:`.fluid.pair_flows`' ``wired``: the weights a fluid phase is played with on
        the line-rate links, as the flow-level model plays the streams)."""
        if call.n < 2:
            return {}
        ranks = self.ranks(call)
        flows: dict[int, float] = {}
        for _t, _phase, src, dst in self.streams(call, topology):
            a, b = call.devices[ranks[src]], call.devices[ranks[dst]]
            pair_flows(topology, a, b, flows, 1.0, call.connections, wired=True)
        return flows

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: A + (F + L (c - 1)) p + R (see the module docstring)."""
        if call.n < 2:
            return 0.0
        _trees, pieces, size = self.pieces(call, topology)
        latency, fill, steady, fan, depth = self.shape(call, topology)
        reduction = 0.0
        if call.op in ("reduce", "allreduce"):
            reduction = depth * self.reduce_time(call, topology, fan * size)
        return latency + (fill + steady * (pieces - 1)) * size + reduction

    def shape(self, call: CollectiveCall, topology: Topology) -> tuple[float, ...]:
        """(A s, F s/B, L s/B, fan, depth) of ``call``'s trees on ``topology``: what
        :meth:`cost` needs besides the pieces, the same for every size (cached per
        operation, group, root and topology)."""
        key = (self.name, call.op, call.devices, call.root, topology)
        return kept(_SHAPES, key, lambda: self._shape(call, topology), _SHAPE_CACHE_LIMIT)

    def _shape(self, call: CollectiveCall, topology: Topology) -> tuple[float, ...]:
        """:meth:`shape`: the latency of the trees' longest path on ``topology``, the rest
        from :meth:`_bandwidth_shape` on the topology with its bandwidths
        (:attr:`~clustersim.topology.TopologyView.same_bandwidths`: a protocol's views
        differ in latencies alone, so the rest is found once for all of them)."""
        shared = getattr(topology, "same_bandwidths", topology)
        key = (self.name, call.op, call.devices, call.root, shared)
        fill, steady, fan, depth = kept(
            _BANDWIDTH_SHAPES, key, lambda: self._bandwidth_shape(call, shared), _SHAPE_CACHE_LIMIT
        )
        trees, _pieces, _size = self.pieces(call, topology)
        ranks = self.ranks(call)
        uniform = getattr(topology, "uniform_latency_s", None)
        latency_s = route_latency(topology)
        alpha: dict[tuple[int, int, int], float] = {}
        for t, _phase, src, dst in self.streams(call, topology):
            if uniform is not None:
                alpha[t, src, dst] = uniform
                continue
            alpha[t, src, dst] = latency_s(call.devices[ranks[src]], call.devices[ranks[dst]])
        latency = 0.0
        for t, tree in enumerate(trees):
            latency = max(latency, _critical_path(tree, t, call.op, alpha))
        return latency, fill, steady, fan, depth

    def _bandwidth_shape(self, call: CollectiveCall, topology: Topology) -> tuple[float, ...]:
        """(F s/B, L s/B, fan, depth) of :meth:`shape`: what depends on the bandwidths of
        ``topology``'s links alone."""
        trees, _pieces, _size = self.pieces(call, topology)
        ranks = self.ranks(call)
        streams = self.streams(call, topology)
        links = topology.links
        routes: dict[tuple[int, int], dict[int, float]] = {}
        phase_load: dict[str, dict[int, float]] = {}
        load: dict[int, float] = {}
        for _t, phase, src, dst in streams:
            a, b = call.devices[ranks[src]], call.devices[ranks[dst]]
            route = routes[src, dst] = {}
            pair_flows(topology, a, b, route, 1.0)
            mine = phase_load.setdefault(phase, {})
            for link, share in route.items():
                mine[link] = mine.get(link, 0.0) + share
                load[link] = load.get(link, 0.0) + share
        steady = max(k / links[link].bandwidth_Bps for link, k in load.items())
        per_byte: dict[tuple[int, int, int], float] = {}
        for t, phase, src, dst in streams:
            mine = phase_load[phase]
            share = max(mine[link] / links[link].bandwidth_Bps for link in routes[src, dst])
            per_byte[t, src, dst] = share
        fill = 0.0
        for t, tree in enumerate(trees):
            fill = max(fill, _critical_path(tree, t, call.op, per_byte))
        fan = max(len(k) for tree in trees for k in tree.children)
        depth = max(tree.depth() for tree in trees)
        return fill, steady, float(fan), float(depth)


_SHAPE_CACHE_LIMIT = 1024
_SHAPES: dict[tuple[object, ...], tuple[float, ...]] = registered({})
_BANDWIDTH_SHAPES: dict[tuple[object, ...], tuple[float, ...]] = registered({})
""":meth:`_TreeAlgorithm._bandwidth_shape` by (algorithm, operation, group, root, the
topology with its bandwidths)."""
_TREES: dict[tuple[object, ...], list[Tree]] = registered({})


def _critical_path(tree: Tree, t: int, op: str, hop: dict[tuple[int, int, int], float]) -> float:
    """The largest sum of ``hop`` along a root-leaf path of tree ``t``: with
    ``hop[t, src, dst]`` the latency of each hop (seconds), the latency of its longest
    path; with each hop's seconds per byte at its share of the links it crosses with the
    streams of its own tree and phase, the seconds per byte of a piece along its slowest
    path.  Counted up and down for an all-reduce, once (with the feed from or to
    position 0) for a broadcast or reduce."""
    n = len(tree.parent)
    total = [0.0] * n
    up = op in ("allreduce", "barrier", "reduce")
    down = op in ("allreduce", "barrier", "broadcast")
    for q in tree.top_down():
        for child in tree.children[q]:
            total[child] = total[q]
            for used, key in ((up, (t, child, q)), (down, (t, q, child))):
                if used and key in hop:
                    total[child] += hop[key]
    feed = (t, 0, tree.root) if op == "broadcast" else (t, tree.root, 0)
    fed = tree.root != 0 and op in ("broadcast", "reduce")
    extra = hop.get(feed, 0.0) if fed else 0.0
    return max(total) + extra


class BinaryTree(_TreeAlgorithm):
    """Pipelined complete binary tree (see the module docstring)."""

    name = "tree"
    description = "pipelined binary tree: reduce up, broadcast down, children at once"

    def trees(self, n: int) -> list[Tree]:
        """The complete binary tree."""
        return [binary_tree(n)]


class DoubleBinaryTree(_TreeAlgorithm):
    """Two complementary pipelined binary trees, half the data each (see the module docstring)."""

    name = "double_tree"
    description = "NCCL's double binary tree: two complementary trees, half the data each"

    def trees(self, n: int) -> list[Tree]:
        """The two complementary in-order trees."""
        return list(double_trees(n))

    def nccl_candidate(self, call: CollectiveCall, topology: Topology) -> bool:
        """NCCL's trees span nodes: inside one node its tree is a chain through the GPUs,
        which its tuner never prefers to the ring there (more latency, 0.92 of the
        bandwidth); groups without nodes (flat clusters) keep the tree."""
        nodes = {topology.device(d).node for d in call.devices}
        return len(nodes) > 1 or None in nodes
