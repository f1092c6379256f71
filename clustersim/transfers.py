"""Point-to-point transfers: bytes from one device to another over the simulated network.

:class:`Transfers` is the part of :class:`~clustersim.engine.Simulation` that sends: a
transfer with an event and a record (:meth:`Transfers.transfer`), with a callback instead
of an event (:meth:`Transfers.transfer_then`), one tensor over parallel lanes with one
callback (:meth:`Transfers.transfer_lanes`), the bare send of the collectives' schedules
(:meth:`Transfers.send`) and its cancellation.  Each picks the route (one, ECMP by hash, or
split evenly over every equal-cost route) and hands the flow to the
:class:`~clustersim.network.Network`; the records are booked by the engine's recorders
(only :mod:`clustersim.engine` adds to a run's records).  Units: bytes, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from .errors import SimulationError
from .network.cancel import cancel_flow
from .network.flow import size_problem_message
from .network.split import SplitSend

if TYPE_CHECKING:
    from .network import Network
    from .topology import Topology

_INF = math.inf


class Transfers:
    """The point-to-point transfers of a :class:`~clustersim.engine.Simulation` (a part of
    the simulation class: see the module docstring)."""

    env: simpy.Environment
    topology: Topology
    network: Network
    _flow_seq: int
    _transfer_recorder: Callable[..., Callable[[int], None]]

    def transfer(
        self,
        src: str,
        dst: str,
        size_bytes: float,
        *,
        label: str = "transfer",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
        record: bool = True,
    ) -> simpy.Event:
        """Send ``size_bytes`` bytes from device ``src`` to device ``dst``.

        The event fires when the last byte has arrived.  With several
        equal-cost routes the flow takes one by hash (ECMP), or is split evenly
        over all of them when the cluster's ``spine_routing`` is ``split``.
        ``record=False`` leaves the transfer out of the records (collectives
        with millions of sends record one row per rank instead).
        """
        if not 0.0 <= size_bytes < _INF:
            raise SimulationError(size_problem_message(src, dst, size_bytes, label))
        routes = self.topology.routes(src, dst)
        if len(routes) == 1:
            done = self.network.transfer(routes[0], size_bytes)
        elif self.topology.spine_routing == "split":
            share = size_bytes / len(routes)
            done = self.env.all_of([self.network.transfer(r, share) for r in routes])
        else:
            self._flow_seq += 1
            done = self.network.transfer(self.topology.route(src, dst, self._flow_seq), size_bytes)
        if not record:
            return done
        record = self._transfer_recorder(
            ((src, dst),), size_bytes, label, iteration, microbatch, stage, op
        )
        done.callbacks.append(lambda _event: record(0))
        return done

    def transfer_then(
        self,
        src: str,
        dst: str,
        size_bytes: float,
        then: Callable[[], None],
        *,
        label: str = "transfer",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
    ) -> Any:
        """:meth:`transfer` for callers that only need a callback: ``then()`` is called at
        the instant the last byte arrives, after the transfer's record is appended.  No
        SimPy event per transfer (what strategies sending many tensors at once use); returns
        what :meth:`cancel_send` takes."""
        return self.transfer_lanes(
            ((src, dst),),
            size_bytes,
            then,
            label=label,
            iteration=iteration,
            microbatch=microbatch,
            stage=stage,
            op=op,
        )[0]

    def transfer_lanes(
        self,
        pairs: Sequence[tuple[str, str]],
        size_bytes: float,
        then: Callable[[], None],
        *,
        label: str = "transfer",
        iteration: int = -1,
        microbatch: int = -1,
        stage: int = -1,
        op: str = "",
    ) -> list[Any]:
        """One tensor sent over parallel lanes: :meth:`transfer_then` from ``src`` to ``dst``
        for every ``(src, dst)`` of ``pairs``, in order, each of ``size_bytes``; ``then()`` is
        called once, at the instant the last lane's last byte arrives (after its record).
        Each lane books its own ``transfer`` record, as :meth:`transfer_then` does; the whole
        send has one callback and one count, not a call and an event per lane (a pipeline's
        point-to-point sends, one lane per tensor rank, are a third of the shipped scenarios'
        transfers).  Returns what :meth:`cancel_send` takes, one per lane."""
        if not pairs:
            return []
        if not 0.0 <= size_bytes < _INF:
            raise SimulationError(size_problem_message(*pairs[0], size_bytes, label))
        record = self._transfer_recorder(pairs, size_bytes, label, iteration, microbatch, stage, op)
        left = [len(pairs)]

        def arrived(flow: Any) -> None:
            record(flow.tag)
            left[0] -= 1
            if not left[0]:
                then()

        send = self.send
        return [send(src, dst, size_bytes, arrived, lane) for lane, (src, dst) in enumerate(pairs)]

    def send(
        self, src: str, dst: str, size_bytes: float, notify: Callable[[Any], None], tag: Any = None
    ) -> Any:
        """Low-level transfer for high-volume callers (collective schedules).

        Like :meth:`transfer` but with no event and no record: ``notify(flow)``
        is called when the last byte has arrived, with ``flow.tag == tag`` and
        ``flow.start_s`` the time of this call.  Same routing (ECMP or split).  Returns
        what :meth:`cancel_send` takes.
        """
        routes = self.topology.routes(src, dst)
        if len(routes) == 1:
            return self.network.transfer(routes[0], size_bytes, notify, tag)
        if self.topology.spine_routing == "split":
            return SplitSend(self.network, routes, size_bytes, notify, tag)
        self._flow_seq += 1
        route = self.topology.route(src, dst, self._flow_seq)
        return self.network.transfer(route, size_bytes, notify, tag)

    def cancel_send(self, sent: Any) -> float:
        """Stop a :meth:`send` or :meth:`transfer_then` (``sent``: what it returned; or a
        lane of :meth:`transfer_lanes`) now: its
        flows leave the network (:func:`~clustersim.network.cancel.cancel_flow`); no one is
        notified, nothing is recorded.  The bytes they had moved."""
        return sum(cancel_flow(self.network, f) for f in getattr(sent, "flows", (sent,)))
