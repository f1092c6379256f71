"""Pipelined tree algorithms: a binary tree and NCCL's double binary tree.

Model and schedule
------------------
The message is cut into c = ceil(m / chunk) equal pieces of p = m / c bytes
(m = the bytes a tree carries; ``call.chunk_bytes``, default
:data:`TREE_CHUNK_BYTES` = 1 MiB; a zero-byte message is one piece).  Data
moves piece by piece along tree edges:

* broadcast: a node forwards piece k to each child once it has piece k;
* reduce: a node sends piece k to its parent once it has received piece k
  from every child and summed it (the receiver sums every piece it gets);
* allreduce: reduce to the root, then broadcast; the root sends piece k down as
  soon as it has reduced it, so both pipelines run at once;
* barrier: allreduce of one zero-byte piece (up to the root and back).

Ranks are *single-ported, full duplex* -- the model of Sanders, Speck & Träff
(2009), in which the two-tree algorithm was designed: a rank sends one piece
at a time and receives one piece at a time (a node serves its two children
one after the other; a child's piece and the parent's piece are received one
after the other).  The order in which a port serves competing pieces is set
by list scheduling in priority order: sends are taken by increasing slot of a
periodic plan (below), each starting as soon as its data is there and its
sender's send port and receiver's receive port are free.  The schedule makes
each send wait for its data and for the previous send on the two ports it
uses, so in the flow-level run a rank never has two messages at once on its
uplink or on its downlink.  Plans (slots of piece k, a slot = one piece time):

* broadcast: piece k enters position q at slot down(q) + 2k, where down(q)
  sums along the root path 1 per first child and 2 per second child (a
  parent serves its first child, then its second);
* reduce: the mirror, a parent takes its second child's piece then its
  first's, then sends up;
* allreduce: period 3 (the receive port of an interior rank takes first
  child, second child, parent; its send port: parent, first child, second
  child); the double tree interleaves its two trees on the same slots.

Trees (positions are ranks relative to ``call.root``; allreduce and barrier
use root 0):

* ``tree``: the complete binary tree, position j has children 2j+1, 2j+2.
* ``double_tree``: two complementary in-order binary trees (NCCL; Sanders et
  al.).  Tree 1: position 0 is the root with one child, the largest power of
  two below n; a position q > 0 whose lowest set bit is b has parent
  (q - b) + 2b, or q - b if that is >= n, so odd positions are leaves.  Tree 2
  is tree 1 shifted by one (node q played by position q + 1 mod n): for even
  n every position is a leaf in one tree and interior in the other; for odd n
  the same holds except position 0, interior in both (tree 1's root and tree
  2's node n - 1).  Each tree carries half the data (c pieces of each half).
  For broadcast and reduce the call's root (position 0) also feeds tree 2's
  root (broadcast; nothing is sent back to position 0, which has the data) or
  receives every reduced piece of tree 2 from it (reduce).

Cost
----
With t = alpha + p beta the time of one piece on a hop (alpha: route latency,
beta: seconds per byte) and gamma p the time of its reduction (0 unless
``call.reduce_cost``), on uniform hops (switch, fully connected):

* ``tree`` broadcast: T = (D + f (c - 1)) t, where f = the root's number of
  children (1 for n = 2, else 2: two children are served one after the other,
  so the pipeline runs at 2t a piece) and D = max over positions of down(q)
  (:func:`tree_broadcast_closed_form`);
* ``tree`` reduce: the mirror, T = (D + f (c - 1)) (t + gamma p);
* ``tree`` allreduce: an interior rank's ports carry three pieces per piece of
  data (two in and one out going up, one in and two out coming down): after
  the first two pieces every further piece adds exactly 3t (reductions free;
  2t for n = 3, 4 and t for n = 2, where no rank has a parent and two
  children), T = T(2) + 3 (c - 2) t, a bandwidth term of 3 S beta;
* ``double_tree``: each tree carries S/2; a rank is interior in one tree and a
  leaf in the other, so it handles 4 pieces (allreduce) per pair of half
  pieces where the single tree handles 6; the plan reaches 5t per pair
  (allreduce, about 2.5 S beta) and 2.5t per pair (broadcast and reduce,
  about 1.25 S beta, against 2 S beta for the single tree).

:meth:`cost` evaluates the list schedule itself, each send taking alpha + p
beta from its route (:class:`HopCost`) plus its reduction: the longest path of
the flow-level schedule, i.e. the formulas above on uniform hops.  It equals
the flow-level time exactly (reductions included) whenever no two concurrent
sends of distinct ranks share a link -- single ports leave only that case --
so on "switch" and "fully_connected" clusters.  Where routes of different
pairs share links (rings, oversubscribed fabrics) it is a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush

from ..topology import Topology
from .algorithm import Algorithm, CollectiveCall, HopCost
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


def tree_broadcast_closed_form(n: int, pieces: int, hop_s: float) -> float:
    """Seconds of the pipelined binary-tree broadcast: (D + f (c - 1)) t (see the module docstring)."""
    if n == 1:
        return 0.0
    offset = [0] * n
    for j in range(1, n):
        offset[j] = offset[(j - 1) // 2] + (1 if j % 2 else 2)
    fan = min(2, n - 1)
    return (max(offset) + fan * (pieces - 1)) * hop_s


def pieces_of(nbytes: float, chunk: float | None) -> tuple[int, float]:
    """(c, p): ``nbytes`` cut into c = ceil(nbytes / chunk) equal pieces of p bytes (c >= 1)."""
    chunk = TREE_CHUNK_BYTES if chunk is None else chunk
    count = max(1, math.ceil(nbytes / chunk)) if chunk > 0 else 1
    return count, nbytes / count


@dataclass
class _Dag:
    """Sends between positions with data dependencies and a priority key each."""

    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    reduce_bytes: list[float] = field(default_factory=list)
    deps: list[list[int]] = field(default_factory=list)
    key: list[tuple[int, int, int]] = field(default_factory=list)

    def add(
        self, src: int, dst: int, nbytes: float, reduce: bool, deps: list[int], key: tuple
    ) -> int:
        """Add a send; ``key`` = (piece, tree, order) ranks competing sends (lowest first)."""
        self.src.append(src)
        self.dst.append(dst)
        self.nbytes.append(nbytes)
        self.reduce_bytes.append(nbytes if reduce else 0.0)
        self.deps.append(deps)
        self.key.append(key)
        return len(self.src) - 1


def path_offsets(tree: Tree, first: int = 1) -> list[int]:
    """Per position, the sum along its root path of ``first`` for a first child, 3 - first for a second."""
    offset = [0] * len(tree.parent)
    for q in tree.top_down():
        for index, child in enumerate(tree.children[q]):
            offset[child] = offset[q] + (first if index == 0 else 3 - first)
    return offset


def _reduce(
    dag: _Dag, tree: Tree, pieces: int, size: float, tree_id: int, period: int, first: int = 1
) -> list[list[int]]:
    """Reduce sends up ``tree``; return, per piece, the sends into the root.

    Priority slot of piece k from position q: g - up(q) + period k, with
    up = :func:`path_offsets` (``first``) and g its maximum.  ``first`` = 1:
    a parent takes its second child's piece first (the mirror of broadcast).
    """
    up = path_offsets(tree, first)
    top = max(up)
    into: list[list[list[int]]] = [[[] for _ in range(pieces)] for _ in tree.parent]
    order = tree.bottom_up()
    for k in range(pieces):
        for q in order:
            parent = tree.parent[q]
            if parent >= 0:
                key = (top - up[q] + period * k, tree_id, q)
                into[parent][k].append(dag.add(q, parent, size, True, into[q][k], key))
    return [into[tree.root][k] for k in range(pieces)]


def _broadcast(
    dag: _Dag,
    tree: Tree,
    pieces: int,
    size: float,
    tree_id: int,
    period: int,
    ready: list[list[int]],
    start: int = 0,
    holders: frozenset[int] = frozenset(),
) -> None:
    """Broadcast sends down ``tree``; the root has piece k after ``ready[k]``.

    Priority slot of piece k into position q: start + down(q) + period k.
    ``holders`` already have the data: nothing is sent to them and they send
    without waiting.
    """
    down = path_offsets(tree)
    order = tree.top_down()
    for k in range(pieces):
        got = {tree.root: ready[k]}
        for q in order:
            for child in tree.children[q]:
                if child in holders:
                    got[child] = []
                    continue
                deps = [] if q in holders else got[q]
                key = (start + down[child] + period * k, tree_id, child)
                got[child] = [dag.add(q, child, size, False, deps, key)]


def _list_schedule(
    dag: _Dag, n: int, duration: list[float]
) -> tuple[list[int], list[float], list[list[int]]]:
    """Single-port list scheduling of ``dag`` in priority order.

    Sends are taken lowest key first among those whose data dependencies are
    scheduled; each starts as soon as its data is there and its sender's send
    port and receiver's receive port are free.  Returns the sends in that
    order, their end times (seconds) and, per send, the previous send on its
    two ports.
    """
    count = len(dag.src)
    waiting = [len(d) for d in dag.deps]
    succ: list[list[int]] = [[] for _ in range(count)]
    for i, deps in enumerate(dag.deps):
        for d in deps:
            succ[d].append(i)
    ready = [0.0] * count
    end = [0.0] * count
    send_free = [0.0] * n
    recv_free = [0.0] * n
    send_last = [-1] * n
    recv_last = [-1] * n
    port_deps: list[list[int]] = [[] for _ in range(count)]
    heap = [(dag.key[i], i) for i in range(count) if waiting[i] == 0]
    heapify(heap)
    order: list[int] = []
    while heap:
        _key, i = heappop(heap)
        src, dst = dag.src[i], dag.dst[i]
        finish = max(ready[i], send_free[src], recv_free[dst]) + duration[i]
        end[i] = finish
        port_deps[i] = [p for p in (send_last[src], recv_last[dst]) if p >= 0]
        send_free[src] = recv_free[dst] = finish
        send_last[src] = recv_last[dst] = i
        order.append(i)
        for s in succ[i]:
            if finish > ready[s]:
                ready[s] = finish
            waiting[s] -= 1
            if waiting[s] == 0:
                heappush(heap, (dag.key[s], s))
    return order, end, port_deps


class _TreeAlgorithm(Algorithm):
    """Common machinery: build the sends, list-schedule them, emit or time them."""

    ops = TREE_OPS

    def dag(self, call: CollectiveCall) -> _Dag:
        """The sends of ``call`` over positions (ranks relative to the root)."""
        raise NotImplementedError

    @staticmethod
    def ranks(call: CollectiveCall) -> list[int]:
        """Rank playing each position: rooted operations count from the root."""
        root = call.root if OPERATIONS[call.op].rooted else 0
        return [(q + root) % call.n for q in range(call.n)]

    def _plan(
        self, call: CollectiveCall, topology: Topology
    ) -> tuple[_Dag, list[int], list[float], list[list[int]]]:
        dag = self.dag(call) if call.n > 1 else _Dag()
        ranks = self.ranks(call)
        hops: dict[tuple[int, int], HopCost] = {}
        duration = []
        for src, dst, nbytes, rbytes in zip(
            dag.src, dag.dst, dag.nbytes, dag.reduce_bytes, strict=True
        ):
            hop = hops.get((src, dst))
            if hop is None:
                a, b = call.devices[ranks[src]], call.devices[ranks[dst]]
                hop = hops[src, dst] = HopCost.between(topology, a, b)
            duration.append(hop.time(nbytes) + self.reduce_time(call, topology, rbytes))
        order, end, port_deps = _list_schedule(dag, call.n, duration)
        return dag, order, end, port_deps

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """The sends of ``call`` in list-schedule order, each after its data and its ports' previous send."""
        dag, order, _end, port_deps = self._plan(call, topology)
        ranks = self.ranks(call)
        sched = Schedule(call.n)
        ids = [-1] * len(dag.src)
        for i in order:
            after = [ids[d] for d in dag.deps[i]]
            after += [ids[p] for p in port_deps[i] if ids[p] not in after]
            ids[i] = sched.send(
                ranks[dag.src[i]],
                ranks[dag.dst[i]],
                dag.nbytes[i],
                after,
                dag.reduce_bytes[i],
                dag.key[i][0],
            )
        return sched

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds: the end of the list schedule (see the module docstring)."""
        _dag, _order, end, _ports = self._plan(call, topology)
        return max(end, default=0.0)


def _allreduce(dag: _Dag, trees: list[Tree], pieces: int, size: float, period: int) -> None:
    """Reduce up each tree then broadcast down it, piece by piece.

    Priorities follow a periodic plan (period 3 on one tree): a parent takes
    its first child's piece, then its second's, then sends up, so that its
    down piece fits the third slot of its receive port.
    """
    for tree_id, tree in enumerate(trees):
        at_root = _reduce(dag, tree, pieces, size, tree_id, period, 2)
        top = max(path_offsets(tree, 2))
        _broadcast(dag, tree, pieces, size, tree_id, period, at_root, top)


class BinaryTree(_TreeAlgorithm):
    """Pipelined complete binary tree (see the module docstring)."""

    name = "tree"
    description = "pipelined binary tree: reduce up, broadcast down"

    def dag(self, call: CollectiveCall) -> _Dag:
        """The sends of ``call`` on the complete binary tree."""
        dag = _Dag()
        tree = binary_tree(call.n)
        if call.op == "barrier":
            _allreduce(dag, [tree], 1, 0.0, 3)
            return dag
        pieces, size = pieces_of(call.size_bytes, call.chunk_bytes)
        if call.op == "broadcast":
            _broadcast(dag, tree, pieces, size, 0, 2, [[] for _ in range(pieces)])
        elif call.op == "reduce":
            _reduce(dag, tree, pieces, size, 0, 2)
        else:
            _allreduce(dag, [tree], pieces, size, 3)
        return dag


class DoubleBinaryTree(_TreeAlgorithm):
    """Two complementary pipelined binary trees, half the data each (see the module docstring)."""

    name = "double_tree"
    description = "NCCL's double binary tree: two complementary trees, half the data each"

    def dag(self, call: CollectiveCall) -> _Dag:
        """The sends of ``call`` on the two trees."""
        dag = _Dag()
        first, second = double_trees(call.n)
        if call.op == "barrier":
            _allreduce(dag, [first], 1, 0.0, 3)
            return dag
        pieces, size = pieces_of(call.size_bytes / 2, call.chunk_bytes)
        if call.op == "allreduce":
            _allreduce(dag, [first, second], pieces, size, 3)
        elif call.op == "broadcast":
            self._broadcast(dag, first, second, pieces, size, 2)
        else:
            self._reduce(dag, first, second, pieces, size, 2)
        return dag

    @staticmethod
    def _broadcast(
        dag: _Dag, first: Tree, second: Tree, pieces: int, size: float, period: int
    ) -> None:
        none: list[list[int]] = [[] for _ in range(pieces)]
        _broadcast(dag, first, pieces, size, 0, period, none)
        if second.root == 0:
            _broadcast(dag, second, pieces, size, 1, period, none)
            return
        feed = [
            [dag.add(0, second.root, size, False, [], (period * k, 1, -1))] for k in range(pieces)
        ]
        _broadcast(dag, second, pieces, size, 1, period, feed, 1, frozenset({0}))

    @staticmethod
    def _reduce(
        dag: _Dag, first: Tree, second: Tree, pieces: int, size: float, period: int
    ) -> None:
        _reduce(dag, first, pieces, size, 0, period)
        at_root = _reduce(dag, second, pieces, size, 1, period)
        top = max(path_offsets(second))
        if second.root != 0:
            for k in range(pieces):
                key = (top + 1 + period * k, 1, -1)
                dag.add(second.root, 0, size, False, at_root[k], key)
