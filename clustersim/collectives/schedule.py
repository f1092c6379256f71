"""Schedules: what a collective algorithm does, as point-to-point sends with dependencies.

An algorithm turns a call into a :class:`Schedule`: sends between ranks, each
starting when the sends it depends on have completed (including any reduction
at their receiver).  A send takes its pair's route, or a route of its own
(:meth:`Schedule.send_on`) that may start or end at a switch, for algorithms whose
switches reduce (``in_network``).  A schedule is data: :mod:`.execution` plays it
on the simulated network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple


class Via(NamedTuple):
    """The route of a send that does not take its pair's (see :meth:`Schedule.send_on`)."""

    route: Any
    """The links it crosses: a :class:`~clustersim.topology.Route` (``Route.of(links)``)."""
    sender: int
    """Rank at the route's start, or -1 where it starts at a switch."""
    receiver: int
    """Rank at the route's end, or -1 where it ends at a switch."""


class Schedule:
    """Sends among ``n_ranks`` ranks and the order they must keep.

    Stored as parallel lists (index = send id) to stay small for millions of
    sends.  ``reduce_bytes[i]`` is the number of bytes the receiver of send i
    sums once it has arrived (0 for plain copies); dependents of send i wait
    for that reduction too.
    """

    __slots__ = (
        "n_ranks",
        "routes",
        "src",
        "dst",
        "nbytes",
        "reduce_bytes",
        "n_deps",
        "children",
        "step",
        "child_rule",
        "stream",
        "ring",
    )

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = n_ranks
        self.routes: dict[int, Via] | None = None
        """Send id -> its own route, for sends added by :meth:`send_on`; None if there are none."""
        self.src: list[int] = []
        self.dst: list[int] = []
        self.nbytes: list[float] = []
        self.reduce_bytes: list[float] = []
        self.n_deps: list[int] = []
        self.children: list[list[int] | None] = []
        self.step: list[int] = []
        """Algorithm step of each send (for labels and tests); -1 if not given."""
        self.child_rule: Callable[[int], Sequence[int]] | None = None
        """For regular schedules built in bulk (:meth:`regular`): the dependents of a
        send computed from its id instead of stored, to save memory on millions of sends."""
        self.stream: list[int] | None = None
        """Per send, the send before it on the same connection (a FIFO byte stream), or -1;
        None when no send continues a stream (see :meth:`send`'s ``stream_after``)."""
        self.ring = False
        """Whether this is one ring of ``n_ranks`` built by the ring algorithm in bulk: send
        ``s * n + p`` is position ``p``'s send of step ``s`` to position ``p + 1``, after
        sends ``(s-1) * n + p - 1`` and ``(s-1) * n + p`` (:mod:`.ring_replay` plays such
        a ring whole where nothing else can touch its links)."""

    @classmethod
    def regular(
        cls,
        n_ranks: int,
        src: list[int],
        dst: list[int],
        nbytes: list[float],
        reduce_bytes: list[float],
        n_deps: list[int],
        step: list[int],
        child_rule: Callable[[int], Sequence[int]],
    ) -> Schedule:
        """A schedule given whole: parallel lists and a rule for each send's dependents (in id order)."""
        out = cls(n_ranks)
        out.src, out.dst, out.nbytes, out.reduce_bytes = src, dst, nbytes, reduce_bytes
        out.n_deps, out.step, out.child_rule = n_deps, step, child_rule
        out.children = [None] * len(src)
        return out

    def kids(self, i: int) -> Sequence[int]:
        """The sends that wait for send ``i``."""
        if self.child_rule is not None:
            return self.child_rule(i)
        return self.children[i] or ()

    def __len__(self) -> int:
        return len(self.src)

    def send(
        self,
        src: int,
        dst: int,
        nbytes: float,
        after: Iterable[int] = (),
        reduce_bytes: float = 0.0,
        step: int = -1,
        stream_after: int = -1,
    ) -> int:
        """Add a send of ``nbytes`` from rank ``src`` to rank ``dst`` after the sends ``after``; return its id.

        ``stream_after`` (a send id of the same pair) makes this send continue that
        send's connection: it also waits for it.  A send's last byte arrives the route
        latency after it left, so the earlier send finished *transmitting* that long
        before it completed: if this send's data was ready by then, its bytes follow
        the earlier bytes down the wire without paying the latency again (a FIFO
        stream pays latency once, not once per piece); otherwise it pays it in full
        (exact when the data arrives as the earlier send completes, at most the
        latency too slow in between).
        """
        if self.child_rule is not None:
            raise ValueError("cannot add sends to a schedule built with Schedule.regular")
        i = len(self.src)
        if stream_after >= 0:
            if self.src[stream_after] != src or self.dst[stream_after] != dst:
                raise ValueError("stream_after must name an earlier send of the same pair")
            if self.stream is None:
                self.stream = [-1] * i
            after = [*after, stream_after]
        if self.stream is not None:
            self.stream.append(stream_after)
        self.src.append(src)
        self.dst.append(dst)
        self.nbytes.append(float(nbytes))
        self.reduce_bytes.append(float(reduce_bytes))
        self.children.append(None)
        self.step.append(step)
        deps = 0
        children = self.children
        for parent in after:
            if parent < 0:
                continue
            kids = children[parent]
            if kids is None:
                children[parent] = [i]
            else:
                kids.append(i)
            deps += 1
        self.n_deps.append(deps)
        return i

    def send_on(
        self,
        route: Any,
        src: int,
        dst: int,
        nbytes: float,
        after: Iterable[int] = (),
        *,
        owner: int = -1,
        step: int = -1,
    ) -> int:
        """Add a send of ``nbytes`` over the links of ``route`` after the sends ``after``; return its id.

        ``route`` may start or end at a switch (in-network reduction): ``src`` and
        ``dst`` are the ranks at its ends, -1 for a switch.  The send counts as
        ``owner``'s (default: ``src``, else ``dst``) at a switch end: its span in the
        records and, for the schedule's structure (:meth:`rank_ends`, :meth:`embed`),
        its rank.  It counts in :meth:`bytes_sent` and :meth:`bytes_received` only at
        rank ends.  On the empty route (``Route()``) a zero-byte send is a meeting point:
        it completes as soon as the sends ``after`` have, and is not recorded.
        """
        if owner < 0:
            owner = src if src >= 0 else dst
        if owner < 0:
            raise ValueError("send_on: a send between two switches needs an owner rank")
        i = self.send(
            src if src >= 0 else owner, dst if dst >= 0 else owner, nbytes, after, 0.0, step
        )
        if self.routes is None:
            self.routes = {}
        self.routes[i] = Via(route, src, dst)
        return i

    def parents(self) -> list[list[int]]:
        """For each send, the sends it waits for."""
        out: list[list[int]] = [[] for _ in self.src]
        for parent in range(len(self.src)):
            for k in self.kids(parent):
                out[k].append(parent)
        return out

    def rank_ends(self) -> dict[int, list[int]]:
        """For each rank, its last sends: those involving it with no later send of it depending on them."""
        out: dict[int, list[int]] = {}
        for i in range(len(self.src)):
            kids = self.kids(i)
            for rank in {self.src[i], self.dst[i]}:
                if not any(rank in (self.src[k], self.dst[k]) for k in kids):
                    out.setdefault(rank, []).append(i)
        return out

    def embed(
        self,
        sub: Schedule,
        ranks: Sequence[int],
        after: dict[int, list[int]] | None = None,
        step_offset: int = 0,
    ) -> list[int]:
        """Append ``sub`` with its rank k played by ``ranks[k]``; return the new ids in order.

        A send of ``sub`` with no dependency waits for ``after[src]`` and
        ``after[dst]`` (send ids of this schedule, by rank of this schedule),
        so phases chain per rank, not by a global barrier.
        """
        if len(ranks) != sub.n_ranks:
            raise ValueError(f"embed: {len(ranks)} ranks given for a schedule of {sub.n_ranks}")
        after = after or {}
        base = len(self.src)
        if sub.routes:  # sends on their own route keep it, their ranks played by ``ranks``
            routes = self.routes = self.routes or {}
            for j, (route, sender, receiver) in sub.routes.items():
                routes[base + j] = Via(
                    route,
                    ranks[sender] if sender >= 0 else -1,
                    ranks[receiver] if receiver >= 0 else -1,
                )
        parents = sub.parents()
        ids = []
        for j in range(len(sub)):
            src, dst = ranks[sub.src[j]], ranks[sub.dst[j]]
            prior = sub.stream[j] if sub.stream is not None else -1
            deps = [base + p for p in parents[j] if p != prior]
            if not deps and prior < 0:
                deps = list(after.get(src, ())) + [
                    d for d in after.get(dst, ()) if d not in after.get(src, ())
                ]
            step = sub.step[j] + step_offset if sub.step[j] >= 0 else -1
            stream_after = base + prior if prior >= 0 else -1
            ids.append(
                self.send(src, dst, sub.nbytes[j], deps, sub.reduce_bytes[j], step, stream_after)
            )
        return ids

    def bytes_sent(self) -> list[float]:
        """Bytes each rank sends in all (a send from a switch counts for no rank)."""
        return self._bytes_by(self.src, "sender")

    def bytes_received(self) -> list[float]:
        """Bytes each rank receives in all (a send to a switch counts for no rank)."""
        return self._bytes_by(self.dst, "receiver")

    def _bytes_by(self, ranks: list[int], end: str) -> list[float]:
        """Bytes per rank of ``ranks`` (src or dst); a send on its own route counts for its
        :class:`Via`'s ``end`` (sender or receiver) instead."""
        out = [0.0] * self.n_ranks
        routes = self.routes or {}
        for i, (r, b) in enumerate(zip(ranks, self.nbytes, strict=True)):
            if i in routes:
                r = getattr(routes[i], end)
            if r >= 0:
                out[r] += b
        return out

    def steps(self) -> int:
        """Number of distinct algorithm steps (0 if steps were not given)."""
        return len({s for s in self.step if s >= 0})
