"""Max-min fair rates of flows over links: progressive filling.

*Max-min fair rates* are computed by progressive filling (water-filling): every
unfrozen flow grows at the same pace until some link saturates; the flows on
that link are frozen at its fair share and the others keep growing.  It is run
as a heap of links keyed by ``(fair share, link index)``, the fair share of a
link being ``remaining capacity / unfrozen flows on it``.  The top entry, once
up to date, is the next bottleneck: its unfrozen flows are frozen at that
share and the capacity and flow count of every link they cross are reduced.
Freezing never lowers a link's fair share, so heap keys are lower bounds and
an out-of-date top entry is simply pushed back with its current share (lazy
increase-key, one entry per link).  Ties go to the lowest link index, so the
result is deterministic.  Cost ``O((L + F k) log L)`` for ``L`` links and
``F`` flows of ``k`` links each.  Components of at least
:data:`NUMPY_FILL_MIN_FLOWS` flows are solved by :func:`fill_arrays`, the same
steps vectorised with numpy (one step per bottleneck link), giving
bit-identical rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heapify, heappop, heapreplace
from itertools import chain
from typing import Any

import numpy as np

_INF = math.inf

NUMPY_FILL_MIN_FLOWS = 8192
"""Components with at least this many flows are solved by :func:`fill_arrays`
(vectorised); smaller ones by the heap loop of :meth:`_Solver.fill`, which has
no per-call set-up cost.  Both give bit-identical rates.  Measured (2 cores,
numpy 2.4): the heap loop is faster up to a few thousand flows (the arrays are
built from the flows at every call); at 19,000 flows over 1,024 shared links
the vectorised fill takes about 0.7x the loop's time."""


class _SolverFlow:
    """Stand-in for :class:`Flow` inside :func:`max_min_rates`."""

    __slots__ = ("links", "_frz", "_new")

    def __init__(self, links: tuple[int, ...]) -> None:
        self.links = links
        self._frz = -1
        self._new = 0.0


class _Solver:
    """Progressive filling over a set of links, reusing scratch arrays.

    ``users[l]`` maps flow id -> flow object (anything with ``links``,
    ``_frz`` and ``_new``) for every flow crossing link ``l``; a flow's links
    must be distinct.  ``cap[l]`` is the capacity of link ``l`` in bytes/s.
    """

    __slots__ = ("rem", "cnt", "epoch", "g2l")

    def __init__(self, n_links: int) -> None:
        self.rem = [0.0] * n_links  # remaining capacity, bytes/s
        self.cnt = [0] * n_links  # unfrozen flows
        self.epoch = 0  # marks the flows frozen by the current fill
        self.g2l: np.ndarray | None = None  # link index -> local index (numpy fill), else -1

    def fill(
        self,
        comp_links: Sequence[int],
        comp_flows: Sequence[Any],
        users: Sequence[dict[int, Any]],
        cap: Sequence[float],
        private: Sequence[int] = (),
    ) -> None:
        """Set ``flow._new`` to the max-min fair rate of every flow in ``comp_flows``.

        ``users[l]`` holds the flows on link ``l``, all of them in
        ``comp_flows`` (a union of connected components).  Every link crossed
        by a flow of ``comp_flows`` must be in ``comp_links``, except links
        with a single flow: of those, it suffices to give in ``private`` the
        one with the smallest ``(capacity, index)`` of each flow (the others
        could only come out of the heap after it, when their flow is already
        frozen), which keeps the heap small.

        Progressive filling with a heap of ``(fair share, link)``.  Freezing
        flows at the current level ``s`` never lowers another link's fair
        share (``(rem - k s) / (n - k) >= rem / n`` when ``s <= rem / n``),
        so a heap key is a lower bound of the link's current share: the heap
        holds one entry per link, and an entry found out of date when it
        reaches the top is pushed back with the current share (lazy
        increase-key).  An up-to-date top entry is the bottleneck; ties go to
        the lowest link index.
        """
        if len(comp_flows) >= NUMPY_FILL_MIN_FLOWS:
            self._fill_numpy(comp_links, comp_flows, cap, private)
            return
        rem = self.rem
        cnt = self.cnt
        self.epoch += 1
        epoch = self.epoch
        heap = []
        for link in comp_links:
            n = len(users[link])
            cnt[link] = n
            c = cap[link]
            rem[link] = c
            heap.append((c / n if c > 0.0 else 0.0, link))
        for link in private:
            cnt[link] = 1
            c = cap[link]
            rem[link] = c
            heap.append((c if c > 0.0 else 0.0, link))
        heapify(heap)
        left = len(comp_flows)
        while heap:
            key, link = heap[0]
            n = cnt[link]
            if not n:
                heappop(heap)
                continue
            r = rem[link]
            share = r / n if r > 0.0 else 0.0
            if share > key:
                heapreplace(heap, (share, link))  # out of date: back in at its share
                continue
            heappop(heap)
            if share == _INF:
                break  # only unbounded links are left
            # `link` is the bottleneck: freeze its unfrozen flows at `share`.
            for flow in users[link].values():
                if flow._frz != epoch:
                    flow._frz = epoch
                    flow._new = share
                    left -= 1
                    for l2 in flow.links:
                        rem[l2] -= share
                        cnt[l2] -= 1
            if not left:
                break
        if left:
            for flow in comp_flows:
                if flow._frz != epoch:
                    flow._frz = epoch
                    flow._new = _INF

    def _fill_numpy(
        self,
        comp_links: Sequence[int],
        comp_flows: Sequence[Any],
        cap: Sequence[float],
        private: Sequence[int],
    ) -> None:
        """:meth:`fill` by :func:`fill_arrays`: same arguments (``users`` is not needed)."""
        local = sorted(chain(comp_links, private))  # by link index: ties go to the lowest
        g2l = self.g2l
        if g2l is None or len(g2l) < len(cap):
            g2l = self.g2l = np.full(len(cap), -1, dtype=np.intp)
        where = np.array(local, dtype=np.intp)
        g2l[where] = np.arange(len(local), dtype=np.intp)
        lengths = np.fromiter(
            (len(flow.links) for flow in comp_flows), dtype=np.intp, count=len(comp_flows)
        )
        links = np.fromiter(
            chain.from_iterable(flow.links for flow in comp_flows),
            dtype=np.intp,
            count=int(lengths.sum()),
        )
        entry_link = g2l[links]
        g2l[where] = -1  # leave the scratch array clean
        entry_flow = np.repeat(np.arange(len(comp_flows), dtype=np.intp), lengths)
        keep = entry_link >= 0  # links with a single flow that is not its tightest
        capacity = np.array([cap[link] for link in local], dtype=np.float64)
        rates = fill_arrays(entry_link[keep], entry_flow[keep], len(comp_flows), capacity)
        for flow, rate in zip(comp_flows, rates.tolist()):
            flow._new = rate


def fill_arrays(
    entry_link: np.ndarray, entry_flow: np.ndarray, n_flows: int, capacity: np.ndarray
) -> np.ndarray:
    """Max-min fair rates by progressive filling, vectorised over flows and links.

    The flow-link incidence is given as entries: entry ``e`` says flow
    ``entry_flow[e]`` crosses link ``entry_link[e]`` (local indices, each pair
    at most once, entries grouped by flow in increasing flow order);
    ``capacity[l]`` is link ``l``'s capacity in bytes/s.  Returns the rate of
    each of the ``n_flows`` flows (``inf`` for a flow on no finite link).

    The same algorithm, step for step, as the heap loop of
    :meth:`_Solver.fill`, so the rates are bit-identical: each step takes the
    link of smallest ``(fair share, local index)`` among links with unfrozen
    flows (local indices must therefore follow link indices), freezes its
    unfrozen flows at that share and subtracts the share from every link
    they cross, one subtraction per flow in sequence (``np.subtract.at``),
    as the loop does.  One step per bottleneck link, each ``O(links)`` plus
    the frozen flows' entries.  (A weighted variant would take a weight per
    entry: shares ``rem / sum of unfrozen weights``, subtracting
    ``weight x share``.)
    """
    n_links = len(capacity)
    rem = np.array(capacity, dtype=np.float64)
    cnt = np.bincount(entry_link, minlength=n_links)
    by_link = np.argsort(entry_link, kind="stable")
    link_start = np.zeros(n_links + 1, dtype=np.intp)
    np.cumsum(cnt, out=link_start[1:])
    flow_len = np.bincount(entry_flow, minlength=n_flows)
    flow_start = np.zeros(n_flows + 1, dtype=np.intp)
    np.cumsum(flow_len, out=flow_start[1:])
    rates = np.full(n_flows, _INF)
    frozen = np.zeros(n_flows, dtype=bool)
    left = n_flows
    with np.errstate(divide="ignore", invalid="ignore"):
        share = _shares(rem, cnt)
        while left:
            link = int(np.argmin(share))
            level = float(share[link])
            if level == _INF:
                break  # only unbounded links (or none) are left
            flows = entry_flow[by_link[link_start[link] : link_start[link + 1]]]
            flows = flows[~frozen[flows]]
            frozen[flows] = True
            rates[flows] = level
            left -= len(flows)
            # The entries of the frozen flows: ranges flow_start[f] .. flow_start[f + 1].
            lens = flow_len[flows]
            offsets = np.repeat(flow_start[flows] - np.cumsum(lens) + lens, lens)
            touched = entry_link[offsets + np.arange(len(offsets), dtype=np.intp)]
            np.subtract.at(rem, touched, level)
            np.subtract.at(cnt, touched, 1)
            touched = np.unique(touched)
            share[touched] = _shares(rem[touched], cnt[touched])
    return rates


def _shares(rem: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Fair shares ``rem / cnt`` as :meth:`_Solver.fill` computes them: 0 where
    ``rem`` is not positive, ``inf`` where no unfrozen flow is left."""
    share = rem / cnt
    share[~(rem > 0.0)] = 0.0
    share[cnt == 0] = _INF
    return share


def max_min_rates(
    flow_links: Sequence[Sequence[int]], capacity_Bps: Sequence[float]
) -> list[float]:
    """Max-min fair rate (bytes/s) of each flow, by progressive filling.

    ``flow_links[i]`` lists the link indices flow ``i`` crosses (a link listed
    twice counts once); ``capacity_Bps[l]`` is the capacity of link ``l`` in
    bytes/s (>= 0, may be ``inf``).  A flow with no links, or only links of
    infinite capacity, gets ``inf``.  Pure function; see the module docstring
    for the algorithm.
    """
    cap = [float(c) for c in capacity_Bps]
    for c in cap:
        if not c >= 0.0:
            raise ValueError(f"link capacity must be >= 0, got {c!r}")
    n_links = len(cap)
    users: list[dict[int, _SolverFlow]] = [{} for _ in range(n_links)]
    flows = [_SolverFlow(tuple(links)) for links in flow_links]
    for i, flow in enumerate(flows):
        for link in flow.links:
            if link < 0 or link >= n_links:
                raise IndexError(f"flow {i}: link index {link} out of range 0..{n_links - 1}")
            lf = users[link]
            if i in lf:  # a link listed twice: keep one of each
                flow.links = tuple(dict.fromkeys(flow.links))
                for link2 in flow.links:
                    if link2 < 0 or link2 >= n_links:
                        raise IndexError(
                            f"flow {i}: link index {link2} out of range 0..{n_links - 1}"
                        )
                    users[link2][i] = flow
                break
            lf[i] = flow
    active = [f for f in flows if f.links]
    if active:
        comp_links = [link for link in range(n_links) if users[link]]
        _Solver(n_links).fill(comp_links, active, users, cap)
    return [flow._new if flow.links else _INF for flow in flows]
