"""Weighted flows in the flow-level network: their departures and rate recomputations.

A route with a ``weights`` attribute (one positive float per link, or None)
makes a flow that uses ``weights[i] x rate`` bytes/s of link ``i`` -- a
stand-in for several flows moving in step, such as a whole collective in the
congestion-aware analytical model (:mod:`clustersim.collectives.fluid`).  Its
``size_bytes`` and rate are per unit of weight.  Rates are then *weighted*
max-min fair: every flow's rate rises at the same pace until a link is full,
a weight-2 flow using twice the capacity of a weight-1 flow on a link.  With
all weights 1 this is plain max-min fairness.

These two functions are the parts of :class:`~clustersim.network.Network`
that only weighted flows need; they work on the network's own state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from .flow import NO_FLOWS

if TYPE_CHECKING:
    from .flow import Flow
    from .flow_level import Network

_INF = math.inf


FREE_DICTS_ABOVE_LINKS = 1024
"""A weighted flow of more links than this frees the per-link dicts it leaves empty (a phase
across a cluster of 131,072 GPUs crosses 1.4 M links, once: their dicts would stay for
nothing); a smaller one leaves them for the next flow, as a plain flow does (a ZeRO-3 run's
gathers cross the same few hundred links every layer: a new dict per link each time cost
7% of such a run, measured)."""


def leave_weighted(net: Network, flow: Flow, now: float) -> bool:
    """Departure bookkeeping of a weighted flow (see :meth:`Network._on_wake`): remove it from
    its links, count ``size x weight`` bytes on each; True if a link keeps flows."""
    freed = False
    fid = flow.id
    size = flow.size_bytes
    link_flows, nbytes, dirty, busy, since = (
        net._link_flows,
        net._bytes,
        net._dirty,
        net._busy,
        net._since,
    )
    free = len(flow.links) > FREE_DICTS_ABOVE_LINKS
    for link, w in zip(flow.links, flow.weights or (), strict=True):
        lf = link_flows[link]
        del lf[fid]
        nbytes[link] += size * w
        if lf:
            dirty[link] = None
            freed = True
        else:
            busy[link] += now - since[link]
            if free:
                link_flows[link] = NO_FLOWS  # frees the dict (FREE_DICTS_ABOVE_LINKS)
    net._weighted -= 1
    if net._wstate is not None:  # its arrays (each transfer has its own weights)
        net._wstate.arrays.pop(id(flow.weights), None)
    return freed


def recompute_weighted(net: Network) -> None:
    """The batched recomputation while weighted flows are active.

    Like :meth:`Network._recompute`: each dirty link's component (flows joined by the
    links they share) is found and solved, but every flow of it goes to the solver (a
    lone weighted flow's rate is ``min(capacity / weight)``, not ``min(capacity)``), by
    :func:`fill_weighted_arrays`.  A weighted flow stands for a whole collective phase
    and crosses thousands of links, most of them its own: the search only follows links
    that carry more than one flow, and the solver works on arrays (per flow, its links
    and weights as numpy arrays, kept on the network by route).
    """
    dirty, now, epoch = net._take_dirty()
    link_flows = net._link_flows
    state = net._wstate
    if state is None:
        state = net._wstate = WeightedState(len(link_flows))
    mark = state.mark
    rerated = changed = 0
    for start in dirty:
        on_start = link_flows[start]
        if not on_start or mark[start] == epoch:
            continue
        if len(on_start) == 1:
            (flow,) = on_start.values()
            if _lone(flow, link_flows):
                for link in flow.links:
                    mark[link] = epoch
                flow._mark = epoch
                net.solver_calls += 1
                _rate_alone(net, flow)
                rerated += 1
                changed += net._apply_rates((flow,), now)
                continue
        mark[start] = epoch
        shared = [start]
        comp_flows: list[Flow] = []
        weighted = False
        for link in shared:  # grows while walked
            for flow in link_flows[link].values():
                if flow._mark == epoch:
                    continue
                flow._mark = epoch
                comp_flows.append(flow)
                weighted = weighted or flow.weights is not None
                links = _flow_arrays(state, flow)[0]
                new = links[mark[links] != epoch]
                mark[new] = epoch
                shared += _shared_links(new, link_flows)
        net.solver_calls += 1
        if weighted and len(comp_flows) == 1:  # alone: its narrowest link, or its cap
            _rate_alone(net, comp_flows[0])
        elif weighted:
            if sum(len(flow.links) for flow in comp_flows) <= _SMALL_ENTRIES:
                rates = fill_weighted_lists(comp_flows, net._cap)
            else:
                rates = fill_weighted_arrays(*_entries(state, comp_flows), net._cap).tolist()
            for flow, rate in zip(comp_flows, rates):
                flow._new = rate
        else:
            comp_links = list(dict.fromkeys(link for f in comp_flows for link in f.links))
            net._solver.fill(comp_links, comp_flows, link_flows, net._cap)
        rerated += len(comp_flows)
        changed += net._apply_rates(comp_flows, now)
    net._end_recompute(rerated, changed)


LONE_CHECK_LINKS = 64
"""A flow of at most this many links that is the only one on the dirty link a search starts
from is checked link by link for being alone on all of them (in Python, without the
search's arrays: a collective's pieces, most of them alone); longer ones (a whole phase of
thousands of links) go to the search."""


def _lone(flow: Flow, link_flows: Sequence[dict[int, Any]]) -> bool:
    """Whether ``flow`` (of at most :data:`LONE_CHECK_LINKS` links) is the only flow on
    each of its links."""
    links = flow.links
    if len(links) > LONE_CHECK_LINKS:
        return False
    for link in links:
        if len(link_flows[link]) != 1:
            return False
    return True


def _rate_alone(net: Network, flow: Flow) -> None:
    """The rate of a flow alone on its links: a weighted one's narrowest ``capacity /
    weight``, or its cap; a plain one's narrowest capacity, as the solver gives it alone."""
    cap = net._cap
    if flow.weights is None:
        links = list(flow.links)
        net._solver.fill(links, (flow,), net._link_flows, cap)
        return
    alone = min(cap[link] / w for link, w in zip(flow.links, flow.weights, strict=True))
    flow._new = min(alone, flow.rate_cap)


def _shared_links(links: np.ndarray, link_flows: Sequence[dict[int, Any]]) -> list[int]:
    """The links of ``links`` that carry more than one flow (their flow counts gathered in C:
    a phase crosses thousands of links)."""
    if len(links) == 0:
        return []
    if len(links) == 1:
        return links.tolist() if len(link_flows[int(links[0])]) > 1 else []
    held = itemgetter(*links.tolist())(link_flows)
    counts = np.fromiter(map(len, held), dtype=np.intp, count=len(links))
    return links[counts > 1].tolist()  # type: ignore[no-any-return]


class WeightedState:
    """What the weighted recomputation keeps on a network between instants."""

    def __init__(self, n_links: int) -> None:
        self.mark = np.zeros(n_links, dtype=np.int64)
        """Link -> the search epoch that last reached it."""
        self.arrays: dict[int, tuple[Any, np.ndarray, np.ndarray]] = {}
        """id(weights) -> (weights, links array, weights array) of a weighted route; for a
        plain flow id(links) -> (links, links array, ones)."""


def _entries(
    state: WeightedState, flows: Sequence[Flow]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(link index, weight) per entry, grouped by flow in order; each flow's entry count and
    rate cap."""
    arrays = [_flow_arrays(state, flow) for flow in flows]
    links = np.concatenate([a[0] for a in arrays])
    weights = np.concatenate([a[1] for a in arrays])
    counts = np.fromiter((len(a[0]) for a in arrays), dtype=np.intp, count=len(arrays))
    caps = np.fromiter((flow.rate_cap for flow in flows), dtype=np.float64, count=len(flows))
    return links, weights, counts, caps


def _flow_arrays(state: WeightedState, flow: Flow) -> tuple[np.ndarray, np.ndarray]:
    """``flow``'s links and weights (1 for an unweighted flow) as arrays, made once per
    route (by its weights, or a plain flow's links)."""
    plain = flow.weights is None
    kept = flow.links if plain else flow.weights  # a route's own tuple: one per route
    key = id(kept)
    found = state.arrays.get(key)
    if found is None or found[0] is not kept:
        found = (
            kept,
            np.array(flow.links, dtype=np.intp),
            np.ones(len(flow.links)) if plain else np.array(flow.weights, dtype=np.float64),
        )
        if len(state.arrays) >= _ARRAYS_KEPT:
            state.arrays.clear()
        state.arrays[key] = found
    return found[1], found[2]


_ARRAYS_KEPT = 4096
"""Weighted routes whose arrays a network keeps (cleared when full)."""

_SMALL_ENTRIES = 256
"""Components of at most this many (flow, link) entries are solved by
:func:`fill_weighted_lists` (the same arithmetic in plain Python: numpy's fixed cost per
call is larger there); larger ones by :func:`fill_weighted_arrays`."""


def fill_weighted_lists(flows: Sequence[Flow], capacity: Sequence[float]) -> list[float]:
    """:func:`fill_weighted_arrays` for a small component, step for step and operation for
    operation (so the same rates to the last bit): ``flows``' links and weights (1 for a
    plain flow) and rate caps, ``capacity`` by link index.  Rates in bytes/s per unit of
    weight, in the order of ``flows``."""
    rem: dict[int, float] = {}
    wsum: dict[int, float] = {}
    cnt: dict[int, int] = {}
    on_link: dict[int, list[int]] = {}
    entries = []
    for f, flow in enumerate(flows):
        weights = flow.weights or (1.0,) * len(flow.links)
        entries.append(tuple(zip(flow.links, weights, strict=True)))
        for link, w in entries[-1]:
            if link in cnt:
                wsum[link] += w
                cnt[link] += 1
                on_link[link].append(f)
            else:
                rem[link] = capacity[link]
                wsum[link] = 0.0 + w
                cnt[link] = 1
                on_link[link] = [f]
    level = {link: _level(rem[link], wsum[link], cnt[link]) for link in cnt}
    lowest = [(value, link) for link, value in level.items()]  # ties: the lowest link index
    heapify(lowest)  # entries of levels since changed are dropped when they come up
    n = len(flows)
    rates = [_INF] * n
    frozen = [False] * n
    caps = [flow.rate_cap for flow in flows]
    cap_order = [f for f in sorted(range(n), key=caps.__getitem__) if caps[f] < _INF]
    next_cap = 0
    left = n
    while left:
        while next_cap < len(cap_order) and frozen[cap_order[next_cap]]:
            next_cap += 1
        while lowest and level[lowest[0][1]] != lowest[0][0]:
            heappop(lowest)
        share, link = lowest[0] if lowest else (_INF, -1)
        if next_cap < len(cap_order) and caps[cap_order[next_cap]] <= share:
            chosen = [cap_order[next_cap]]
            share = caps[chosen[0]]
        elif share == _INF:
            break
        else:
            chosen = [f for f in on_link[link] if not frozen[f]]
        for f in chosen:
            frozen[f] = True
            rates[f] = share
        left -= len(chosen)
        for f in chosen:
            for k, w in entries[f]:
                rem[k] -= w * share
                wsum[k] -= w
                cnt[k] -= 1
                level[k] = value = _level(rem[k], wsum[k], cnt[k])
                heappush(lowest, (value, k))
    return rates


def _level(rem: float, wsum: float, cnt: int) -> float:
    """One link's fill level, as :func:`_levels` gives it."""
    if cnt == 0 or not wsum > 0.0:
        return _INF
    return rem / wsum if rem > 0.0 else 0.0


def fill_weighted_arrays(
    entry_link: np.ndarray,
    entry_weight: np.ndarray,
    flow_entries: np.ndarray,
    rate_cap: np.ndarray,
    capacity: Sequence[float],
) -> np.ndarray:
    """Weighted max-min fair rates (bytes/s per unit of weight) by progressive filling.

    Entry ``e`` says a flow puts ``entry_weight[e]`` x its rate on link ``entry_link[e]``
    (global link indices, each link at most once per flow); the entries are grouped by
    flow, ``flow_entries[f]`` of them for flow ``f``; ``rate_cap[f]`` caps its rate (inf:
    none); ``capacity[l]`` is link ``l``'s capacity in bytes/s.  Every unfrozen flow's
    rate rises at the same pace; the link whose ``remaining capacity / unfrozen weight``
    is smallest (ties: the lowest link index) saturates and its unfrozen flows freeze at
    that level, and a flow reaching its cap first freezes at the cap (a cap wins a tie).
    One step per bottleneck, each ``O(links)`` in numpy plus the frozen flows' entries.
    A flow on no finite link gets ``inf``.
    """
    n_flows = len(flow_entries)
    links, local = _local_links(entry_link)
    n_links = len(links)
    rem = _gathered(capacity, links)
    wsum = np.bincount(local, weights=entry_weight, minlength=n_links)
    cnt = np.bincount(local, minlength=n_links)
    by_link = np.argsort(local, kind="stable")
    link_start = np.zeros(n_links + 1, dtype=np.intp)
    np.cumsum(cnt, out=link_start[1:])
    entry_flow = np.repeat(np.arange(n_flows, dtype=np.intp), flow_entries)
    flow_start = np.zeros(n_flows + 1, dtype=np.intp)
    np.cumsum(flow_entries, out=flow_start[1:])
    rates = np.full(n_flows, _INF)
    frozen = np.zeros(n_flows, dtype=bool)
    cap_order = [int(f) for f in np.argsort(rate_cap, kind="stable") if rate_cap[f] < _INF]
    next_cap = 0
    left = n_flows
    with np.errstate(divide="ignore", invalid="ignore"):
        level = _levels(rem, wsum, cnt)
        while left:
            while next_cap < len(cap_order) and frozen[cap_order[next_cap]]:
                next_cap += 1
            link = int(np.argmin(level)) if n_links else -1
            share = float(level[link]) if n_links else _INF
            if next_cap < len(cap_order) and rate_cap[cap_order[next_cap]] <= share:
                flows = np.array([cap_order[next_cap]], dtype=np.intp)
                share = float(rate_cap[flows[0]])
            elif share == _INF:
                break  # only unbounded links (or none) are left
            else:
                flows = entry_flow[by_link[link_start[link] : link_start[link + 1]]]
                flows = flows[~frozen[flows]]
            frozen[flows] = True
            rates[flows] = share
            left -= len(flows)
            for f in flows.tolist():
                at = slice(flow_start[f], flow_start[f + 1])
                touched = local[at]
                rem[touched] -= entry_weight[at] * share
                wsum[touched] -= entry_weight[at]
                cnt[touched] -= 1
                level[touched] = _levels(rem[touched], wsum[touched], cnt[touched])
    return rates


_MARK_SPAN = 16
"""Entries are sorted (np.unique) rather than marked when the largest link index is more
than this many times their number."""


def _local_links(entry_link: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct links of the entries in increasing order (ties go to the lowest index)
    and each entry's position among them: :func:`numpy.unique` with ``return_inverse``,
    by marking an array as long as the largest index instead of sorting the entries where
    that array is not much longer than the entries."""
    if len(entry_link) == 0:
        return entry_link[:0], entry_link[:0]
    top = int(entry_link.max()) + 1
    if top > _MARK_SPAN * len(entry_link):
        links, local = np.unique(entry_link, return_inverse=True)
        return links, local.reshape(-1)
    seen = np.zeros(top, dtype=bool)
    seen[entry_link] = True
    links = np.flatnonzero(seen)
    position = np.zeros(len(seen), dtype=np.intp)
    position[links] = np.arange(len(links), dtype=np.intp)
    return links, position[entry_link]


def _gathered(values: Sequence[float], indices: np.ndarray) -> np.ndarray:
    """``values[i]`` for each index, as floats (gathered in C from a list)."""
    if len(indices) == 0:
        return np.zeros(0)
    if len(indices) == 1:
        return np.array([values[int(indices[0])]], dtype=np.float64)
    return np.array(itemgetter(*indices.tolist())(values), dtype=np.float64)


def _levels(rem: np.ndarray, wsum: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Each link's fill level ``rem / wsum``: 0 where ``rem`` is not positive, ``inf`` where
    no unfrozen flow is left."""
    level = rem / wsum
    level[~(rem > 0.0)] = 0.0
    level[(cnt == 0) | ~(wsum > 0.0)] = _INF
    return level
