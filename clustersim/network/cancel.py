"""Cancelling a flow: it leaves the network at once, with the bytes it has moved.

A cancelled flow (:func:`cancel_flow`) stops where it is:

* in its *latency phase*, its arrival is taken off the timer queue: it never holds
  bandwidth and has moved nothing;
* in its *bandwidth phase*, it leaves its links as a flow moved by a link failure
  does (:func:`leave_links`): each link is credited with the bytes the flow moved
  while on it, and the links it shared are re-rated in the batched recomputation of
  this instant, so the other flows speed up from now on.

It then counts as completed (``end_s`` is the cancel time; nothing is notified and no
SimPy event fires: whatever waits on it is not told), so a run's started and
completed flows still match.  A flow stalled by a link failure
(:mod:`clustersim.network.failures`) is only silenced: it resumes and completes when
its route is back, notifying no one.  The network's hot path is unchanged: this
module only runs when a caller cancels.  Units: seconds, bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flow import Flow
    from .flow_level import Network


def _ignore(_flow: Any) -> None:
    """The notify of a cancelled flow: nobody is told."""


def leave_links(net: Network, flow: Flow, now: float) -> None:
    """Take ``flow`` (bandwidth phase) off its links, its moved bytes credited to them;
    the links it shared are re-rated in this instant's recomputation."""
    rate = flow.rate_Bps
    if rate > 0.0:
        dt = now - flow._last
        if dt > 0.0:
            rest = flow._remaining - rate * dt
            flow._remaining = rest if rest > 0.0 else 0.0
        net._stale += 1  # its completion entry
    flow._last = now
    flow.rate_Bps = 0.0
    flow._version += 1
    sent = flow.size_bytes - flow._remaining  # a moved flow: the debit of its entry, plus this
    link_flows, dirty = net._link_flows, net._dirty
    net._swaps_only = False
    for link, weight in flow.link_loads():
        lf = link_flows[link]
        del lf[flow.id]
        net._bytes[link] += sent * weight
        if lf:
            dirty[link] = None
        else:
            net._busy[link] += now - net._since[link]
    net._n_active -= 1
    if flow.weights is not None:
        net._weighted -= 1
    if dirty and not net._recompute_pending:
        net._schedule_recompute()


def _unschedule_arrival(net: Network, flow: Flow) -> bool:
    """Remove the latency-end entry of ``flow`` from the timer queue; False if it has none."""
    for bucket in net._buckets.values():
        for k, entry in enumerate(bucket):
            if entry[1] < 0 and entry[2] is flow:
                del bucket[k]
                return True
    return False


def cancel_flow(net: Network, flow: Flow) -> float:
    """Stop ``flow`` now (see the module docstring); the bytes it had moved (its size if it
    had already completed)."""
    if flow.done:
        return flow.size_bytes
    now = net.env._now
    flow.notify = _ignore
    flow.callbacks = []
    latency = flow.arrival_s != flow.arrival_s
    on_links = not latency and flow.links and flow.id in net._link_flows[flow.links[0]]
    if not (on_links or (latency and _unschedule_arrival(net, flow))):
        return flow.size_bytes - flow._remaining  # stalled by a link failure: silenced only
    hook = getattr(net, "on_flow_leaving", None)  # the invariant checker's monitor
    if hook is not None:
        hook(flow, now)
    if on_links:
        leave_links(net, flow, now)
    moved = flow.size_bytes - flow._remaining if on_links else 0.0
    flow.end_s = now
    flow._ok = True
    flow._value = None
    net.flows_completed += 1
    return moved
