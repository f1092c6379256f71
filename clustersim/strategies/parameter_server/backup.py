"""Backup workers as published: the workers left out of a round are cancelled.

K-sync SGD (Chen et al. 2016, "Revisiting distributed synchronous SGD"; Dutta et
al., AISTATS 2018) waits for the first ``k`` of ``n`` workers' gradients; the
others stop their work and start the next round with the new parameters, so a
round lasts the ``k``-th order statistic ``X_{k:n}`` of the workers' times.
This is ``data_parallel.ps.mode: backup`` with ``backup_cancel: true`` (the
default; see :mod:`.strategy`):

* **Who takes part.**  Rounds close per key (the first ``k`` pushes made on the
  current version).  The *first* key of round ``r`` to close fixes the round's
  participants: the workers whose pushes it accepted.  At that instant every
  other worker still in round ``r`` (computing it, or with pushes of it still
  on the wire, or computing an older, stale round) is cancelled.  The
  participants are never cancelled in round ``r``, so every key gets its ``k``
  pushes and closes.  (A key may still close with an earlier push of a
  cancelled worker: pushes that reached a server before the cancel count.)
* **What stops.**  The cancel reaches the workers *at once* (no notification
  message: a server's message of a few bytes costs one latency, small against a
  round; modelled as zero).  The compute running is cut at that instant (its
  record ends there, op ``cancelled``; queued work is not started), the pushes
  on the wire leave the network with the bytes they moved
  (:func:`clustersim.network.cancel.cancel_flow`; booked as ``transfer``
  records of op ``cancelled``), queued ones are dropped.
* **What follows.**  The cancelled worker pulls every key whose push did not
  reach its server when that key's round closes (one pull per key, as a
  participant), then starts its next iteration on the new parameters.

Cancelled work: ``cancelled_compute_s`` is the compute time of the rounds
workers were cancelled in (every compute record of such a round, the cut one up
to the cancel, all marked op ``cancelled``), summed over workers;
``cancelled_push_bytes`` the bytes their cancelled pushes had moved.
Units: seconds, bytes.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from .layout import Key
from .pipeline import Message

if TYPE_CHECKING:
    from .server import KeyState
    from .strategy import ParameterServer


class BackupCancel:
    """The workers' loop and the cancels of backup mode (see the module docstring)."""

    def __init__(self, ps: ParameterServer) -> None:
        n = len(ps.workers)
        self.ps = ps
        self.processes: list[simpy.Process | None] = [None] * n
        self.round_of = [-1] * n
        """Version each worker computes its iteration on; -1 between iterations."""
        self.computing: list[int | None] = [None] * n
        """Index in the records of the compute a worker waits for, if it computes."""
        self.round_records: list[list[int]] = [[] for _ in range(n)]
        """Indices of the compute records of each worker's current iteration."""
        self.in_flight: list[dict[int, Message]] = [{} for _ in range(n)]
        """Per worker: key index -> its push of this iteration still on the wire."""
        self.arrived: list[set[int]] = [set() for _ in range(n)]
        """Per worker: keys whose push of this iteration reached the server."""
        self.decided = -1
        """The last round whose participants are fixed."""
        self.cancelled_compute_s = 0.0
        self.cancelled_push_bytes = 0.0
        self.cancels = 0

    def start(self) -> None:
        """Start every worker's process."""
        for w in range(len(self.ps.workers)):
            self.processes[w] = self.ps.sim.process(self.worker(w))

    def worker(self, w: int) -> Generator[Any, Any, None]:
        """Compute, push per layer, wait for every pull; cut short by a cancel."""
        ps = self.ps
        it = 0
        while min(ps.pulled[w]) < ps.train.iterations:
            ps.clock.start(ps.workers[w], it, ps.sim.now)
            pending = ps._expect_pulls(w)
            self.round_of[w] = min(ps.pulled[w])
            self.round_records[w] = []
            self.arrived[w] = set()
            try:
                if not (yield from self._passes(w, it)):
                    return
            except simpy.Interrupt:
                pass
            yield pending.event
            self.round_of[w] = -1
            ps._finish(w, it)
            it += 1

    def _passes(self, w: int, it: int) -> Generator[Any, Any, bool]:
        """Forward, then backward pushing each layer's keys; False once training ended."""
        ps = self.ps
        sim, device, samples, layers = ps.sim, ps.workers[w], ps.samples[w], ps.model.layers
        order = [(i, True) for i in range(len(layers))]
        order += [(i, False) for i in reversed(range(len(layers)))]
        times = ps.layer_times.passes(ps.topology.devices[device], samples)
        for index, forward in order:
            layer = layers[index]
            flops = (layer.forward_flops if forward else layer.backward_flops) * samples
            event = sim.compute(
                device,
                flops=flops,
                seconds=(times.forward if forward else times.backward)[index],
                label=f"{'fwd' if forward else 'bwd'} {layer.name}",
                iteration=it,
                phase="forward" if forward else "backward",
            )
            self.computing[w] = len(sim.records) - 1  # compute() books exactly one record
            self.round_records[w].append(len(sim.records) - 1)
            yield event
            self.computing[w] = None
            if ps._done:
                return False
            if not forward:
                for key in ps.layer_keys.get(index, ()):
                    ps._push(w, key, it)
        return True

    # -- pushes and cancels --------------------------------------------------

    def push(self, w: int, key: Key, it: int) -> None:
        """Send worker ``w``'s push of ``key``; remember it until it reaches the server."""
        ps = self.ps

        def arrive() -> None:
            self.in_flight[w].pop(key.index, None)
            self.arrived[w].add(key.index)
            ps._arrive_round(w, key, it)

        if ps.workers[w] == key.server:
            arrive()
            return
        message = ps.links.send(
            ps.workers[w],
            key.server,
            key.nbytes,
            arrive,
            label=f"push {key.name}",
            iteration=it,
            op="push",
        )
        if message is not None:
            self.in_flight[w][key.index] = message

    def closed(self, st: KeyState) -> None:
        """A key's round has its ``k`` pushes: the first of its round fixes the
        participants and cancels every other worker still in the round."""
        round_ = st.version
        if round_ <= self.decided:
            return
        self.decided = round_
        participants = set(st.accepted)
        for w, of in enumerate(self.round_of):
            if w not in participants and 0 <= of <= round_:
                self.cancel(w)

    def cancel(self, w: int) -> None:
        """Stop worker ``w``'s compute and pushes now; it pulls what it did not push."""
        ps, sim = self.ps, self.ps.sim
        self.cancels += 1
        for index in self.round_records[w]:
            self.cancelled_compute_s += sim.cancel_compute(index)
        self.round_records[w] = []
        if self.computing[w] is not None:
            self.computing[w] = None
            process = self.processes[w]
            if process is not None and process.is_alive:
                process.interrupt("cancelled")
        for message in self.in_flight[w].values():
            self.cancelled_push_bytes += ps.links.cancel(message)
        self.in_flight[w] = {}
        for key in ps.keys:
            if key.index not in self.arrived[w]:
                self.arrived[w].add(key.index)
                ps.state[key.index].waiting.append(w)
