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

from typing import TYPE_CHECKING

from .solver import _fill_weighted

if TYPE_CHECKING:
    from .flow import Flow
    from .flow_level import Network


def leave_weighted(net: Network, flow: Flow, now: float) -> bool:
    """Departure bookkeeping of a weighted flow (see :meth:`Network._on_wake`): remove it from
    its links, count ``size x weight`` bytes on each; True if a link keeps flows."""
    freed = False
    fid = flow.id
    size = flow.size_bytes
    for link, w in zip(flow.links, flow.weights or (), strict=True):
        lf = net._link_flows[link]
        del lf[fid]
        net._bytes[link] += size * w
        if lf:
            net._dirty[link] = None
            freed = True
        else:
            net._busy[link] += now - net._since[link]
    net._weighted -= 1
    return freed


def recompute_weighted(net: Network) -> None:
    """The batched recomputation while weighted flows are active.

    Like :meth:`Network._recompute`, but every link of a component goes to the
    solver (a lone weighted flow's rate is ``min(capacity / weight)``,
    not ``min(capacity)``), and components holding a weighted flow are
    solved by :func:`_fill_weighted`.  Few flows are weighted (one per
    collective phase), so this path is not tuned for size.
    """
    dirty, now, epoch = net._take_dirty()
    lmark = net._lmark
    link_flows = net._link_flows
    rerated = changed = 0
    for start in dirty:
        if not link_flows[start] or lmark[start] == epoch:
            continue
        lmark[start] = epoch
        comp_links = [start]
        comp_flows: list[Flow] = []
        weighted = False
        for link in comp_links:
            for flow in link_flows[link].values():
                if flow._mark == epoch:
                    continue
                flow._mark = epoch
                comp_flows.append(flow)
                weighted = weighted or flow.weights is not None
                for l2 in flow.links:
                    if lmark[l2] != epoch:
                        lmark[l2] = epoch
                        comp_links.append(l2)
        net.solver_calls += 1
        if weighted:
            _fill_weighted(comp_links, comp_flows, link_flows, net._cap)
        else:
            net._solver.fill(comp_links, comp_flows, link_flows, net._cap)
        rerated += len(comp_flows)
        changed += net._apply_rates(comp_flows, now)
    net._end_recompute(rerated, changed)
