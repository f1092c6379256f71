"""Chain replication of parameter-server keys, and failover when a server fails.

``data_parallel.ps.replicas: r`` (see :mod:`.strategy`) is
the chain replication of Li et al., OSDI 2014, section 4.3 (ps-lite): the keys of server
``i`` (of ``S``, in the order of ``servers``) are also held by the next ``r - 1`` servers
in ring order, ``i+1, ..., i+r-1 mod S`` -- the key range's *chain*, its head the master.

* **Replication after aggregation.**  Once the master has updated a key (sync and backup:
  once per round, after aggregating the round's pushes; async, ssp, geo: every applied
  push), it forwards the updated key (``key bytes``, op ``replicate``) to replica 1, which
  applies it at the cost of an update on its device (``OPTIMIZER_BYTES_PER_PARAM x key
  params`` over its memory bandwidth, op ``ps_replica_update``) and forwards it to replica
  2, and so on: each hop a real transfer that contends like any flow.
* **Strong consistency.**  The master acknowledges the update -- the round closes and its
  pulls start, or (async) the worker's pull starts -- only when the chain's tail has
  applied it (the tail's acknowledgement back to the master, a few bytes, is taken as
  free, as the backup cancel's message is).  So a sync round on an uncongested chain
  grows by ``(r - 1) x (key bytes / bandwidth + latency + update)`` per key on the
  critical path.
* ``replication_bytes``: the bytes of every hop that arrived, ``(r - 1) x model bytes x
  rounds`` in a sync run without failures.

**Failover** (``mode: sync``; a scheduled device failure of ``failures:`` that takes a
server down, e.g. ``{devices: rack0/node3/cpu, at: 5ms}``).  With ``replicas`` of 2 or
more a server failure does not stop the job (each key still has a live copy) and the
simulation plays it; a failure that leaves some key range with no live copy (one server
with ``replicas: 1``, or a whole chain in one entry) stops the job and goes to the goodput
model as a worker's failure does (:meth:`FailureHooks.loses_state`).

* **At the failure** the server's transfers in flight or queued (pushes to it, pulls and
  forwards from it, forwards to it) leave the network (:meth:`Connections.cancel`, op
  ``cancelled``), its running and queued compute is cut (op ``cancelled``), and for the
  keys it was master of, the round in progress is lost: the pushes it had aggregated and
  a round not yet acknowledged by the chain's tail (replication after aggregation: the
  replicas only hold acknowledged rounds).  Messages sent to it afterwards are not
  delivered.
* **Detection.**  The workers and the other servers notice the failure
  ``failover_timeout`` after it (measured from the failure, as a heartbeat detector does:
  the time every node stops hearing from it; default 1 s, a chosen value -- set it to
  your detector's timeout).
* **Failover.**  Then the next live server of each chain the failed server was master of
  becomes master of its keys (the chain loses the failed server: one replica fewer); the
  workers re-send to it the pushes of the current round that the failed master had taken,
  was receiving or was sent during detection, and re-pull from it the pulls the failed
  master owed them.  Forwards that went through the failed server resume from the last
  live server that holds the update to the next live one.  A repaired server stays out (it
  does not rejoin its chains).  Each entry's failure is judged alone: a later failure that
  leaves a key with no live copy is an error naming the entry.
* ``failover_lost_s``: the sum over failovers of the time from the failure until every
  request the failed master owed (the re-sent pushes, arrived at the new master; the
  re-sent pulls, arrived at their workers) was answered; 0 for a failover that owed
  nothing (every worker was computing, and pushed to the new master after detection).
  One run measures it (no failure-free rerun); it bounds from above how much the failure
  stretches its round, since part of the wait may overlap work the round did anyway.
  ``failovers`` counts the server failures played during training.

Units: seconds, bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import Problem, ScenarioError
from .. import training
from .layout import PS_KEY
from .pipeline import Connections, Message
from .summary import ReplicationSummary

if TYPE_CHECKING:
    import simpy

    from ...engine import Simulation
    from ...scenario import ParameterServerSpec
    from .hierarchy import Group
    from .strategy import ParameterServer


def chains(servers: Sequence[str], replicas: int) -> dict[str, list[str]]:
    """Server -> the chain of its keys: itself, then the next ``replicas - 1`` in ring order."""
    n = len(servers)
    return {s: [servers[(i + j) % n] for j in range(replicas)] for i, s in enumerate(servers)}


def check_replicas(ps: ParameterServer, groups: list[Group] | None) -> None:
    """``replicas`` at most the servers; no replication under a hierarchy."""
    replicas, n = ps.ps.replicas, len(ps.servers)
    if replicas > n:
        raise ScenarioError(
            Problem(f"{PS_KEY}.replicas", f"{replicas} replicas but {n} server(s)", f"1 .. {n}")
        )
    if replicas > 1 and groups is not None:
        raise ScenarioError(
            Problem(
                f"{PS_KEY}.replicas",
                "chain replication is not modelled with multi-level aggregation",
                f"replicas: 1, or leave {PS_KEY}.hierarchy out",
            )
        )


class FailureHooks:
    """The parameter server's answers to :meth:`Strategy.loses_state` and
    :meth:`Strategy.take_failures` (a base of :class:`ParameterServer`)."""

    servers: tuple[str, ...]
    ps: ParameterServerSpec
    scenario: Any
    server_failures: list[Any]

    def loses_state(self, devices: Sequence[str]) -> bool:
        """Whether losing ``devices`` at once leaves some key range without a live copy."""
        down = set(devices).intersection(self.servers)
        if not down:
            return False
        return any(down.issuperset(c) for c in chains(self.servers, self.ps.replicas).values())

    def take_failures(self, failures: Sequence[Any]) -> None:
        """Keep the played device failures that take a server down; refused outside sync."""
        mine = [f for f in failures if set(f.devices).intersection(self.servers)]
        if mine and self.ps.mode != "sync":
            raise ScenarioError(
                Problem(
                    f"{mine[0].path}.devices",
                    f"a server fails; failover is modelled for {PS_KEY}.mode sync only, "
                    f"not {self.ps.mode}",
                    f"{PS_KEY}.mode: sync, or a failure of no server",
                ),
                getattr(self.scenario, "source", ""),
            )
        self.server_failures = mine


def replication_for(ps: ParameterServer) -> Replication | None:
    """The run's replication (it takes over ``ps.links``), or None for ``replicas: 1``."""
    if ps.ps.replicas <= 1:
        return None
    return Replication(ps)


class Tracked(Connections):
    """Connections that remember their live messages (to cancel a failed server's) and
    hold the messages sent to a failed server (to re-send them after detection)."""

    def __init__(
        self, sim: Simulation, ordered: bool, replication: Replication, credit: int | None
    ) -> None:
        super().__init__(sim, ordered, cancellable=True, credit=credit)
        self.replication = replication
        self.live: dict[int, Message] = {}
        self._tokens = 0

    def send(
        self, src: str, dst: str, nbytes: float, then: Callable[[], None], **named: Any
    ) -> Message | None:
        """:meth:`Connections.send` (``named``: its label, iteration and op), remembered
        until it arrives; held (not sent) when an end has failed."""
        rep = self.replication
        if src in rep.dead or dst in rep.dead:
            held = Message(src, dst, nbytes, then, **named, state="held")
            rep.held.append(held)
            return held
        token = self._tokens
        self._tokens += 1

        def arrived() -> None:
            self.live.pop(token, None)
            then()

        message = super().send(src, dst, nbytes, arrived, **named)
        assert message is not None
        if message.state in ("queued", "sent"):
            self.live[token] = message
        return message


@dataclass
class _Forward:
    """One update going down its chain: who has applied it, who is still to."""

    key: int
    epoch: int
    iteration: int
    holders: list[str]
    rest: list[str]
    then: Callable[[], None]
    hop: int = 0
    busy: str | None = None
    """The server the current hop goes to (on the wire, or applying it)."""


@dataclass
class _Failover:
    """One server failure: its time, the requests re-sent, how many are still out."""

    at_s: float
    pushes: dict[tuple[int, int], int] = field(default_factory=dict)
    """(worker, key) -> iteration of the push to re-send."""
    pulls: dict[tuple[int, int], int] = field(default_factory=dict)
    """(worker, key) -> round of the pull to re-send."""
    out: int = 0


class Replication:
    """The chains, forwards and failovers of one run (see the module docstring)."""

    def __init__(self, ps: ParameterServer) -> None:
        self.ps = ps
        self.sim = ps.sim
        self.chain = chains(ps.servers, ps.ps.replicas)
        self.range_of = [key.server for key in ps.keys]
        """The chain (by its first server) that holds each key."""
        self.epoch = [0] * len(ps.keys)
        """Per key: bumped when its master fails, so its lost round's callbacks do nothing."""
        self.dead: set[str] = set()
        self.detected: set[str] = set()
        self.held: list[Message] = []
        self.forwards: list[_Forward] = []
        self.paused: list[_Forward] = []
        self.replication_bytes = 0.0
        self.failovers = 0
        self.lost_s = 0.0
        self.worker_of = {d: w for w, d in enumerate(ps.workers)}
        self.key_of = {key.name: key.index for key in ps.keys}
        self.links = Tracked(self.sim, ps.links.ordered, self, ps.links.credit)
        ps.links = self.links
        for failure in getattr(ps, "server_failures", ()):
            servers = [d for d in failure.devices if d in ps.servers]
            timer = self.sim.env.timeout(failure.at_s - self.sim.now)
            timer.callbacks.append(lambda _e, s=servers, p=failure.path: self._fail(s, p))

    def summary(self) -> ReplicationSummary:
        return ReplicationSummary(
            self.ps.ps.replicas, self.replication_bytes, self.failovers, self.lost_s
        )

    # -- replication ---------------------------------------------------------

    def after_update(
        self, key: Any, event: simpy.Event, then: Callable[[], None], iteration: int
    ) -> None:
        """When the master's update ``event`` is done, forward it down the chain; ``then()``
        once the tail has applied it (nothing if the master failed meanwhile)."""
        k, epoch = key.index, self.epoch[key.index]

        def replicate(_e: Any) -> None:
            if self.epoch[k] != epoch:
                return
            chain = self.chain[self.range_of[k]]
            op = _Forward(k, epoch, iteration, [chain[0]], list(chain[1:]), then)
            self.forwards.append(op)
            self._step(op)

        event.callbacks.append(replicate)

    def _step(self, op: _Forward) -> None:
        """Send ``op``'s update to the next server of its chain, or acknowledge it."""
        if self.epoch[op.key] != op.epoch:
            return
        op.rest = [s for s in op.rest if s not in self.detected]
        if not op.rest:
            self.forwards.remove(op)
            op.then()
            return
        src, dst = op.holders[-1], op.rest[0]
        if src in self.dead or dst in self.dead:  # not noticed yet: wait for the failover
            self.paused.append(op)
            return
        key = self.ps.keys[op.key]
        op.hop += 1
        op.busy = dst
        hop = op.hop
        self.links.send(
            src,
            dst,
            key.nbytes,
            lambda: self._apply(op, dst, hop),
            label=f"replicate {key.name}",
            iteration=op.iteration,
            op="replicate",
        )

    def _apply(self, op: _Forward, dst: str, hop: int) -> None:
        """The update is at replica ``dst``: it applies it, then forwards it."""
        ps = self.ps
        key = ps.keys[op.key]
        self.replication_bytes += key.nbytes
        per_param = training.OPTIMIZER_BYTES_PER_PARAM[ps.train.optimizer]
        event = self.sim.compute(
            dst,
            bytes=key.touched_params * per_param,
            label=f"replica update {key.name}",
            phase="optimizer",
            iteration=op.iteration,
            op="ps_replica_update",
        )

        def applied(_e: Any) -> None:
            if op.hop != hop or dst in self.dead or self.epoch[op.key] != op.epoch:
                return
            op.busy = None
            op.holders.append(dst)
            op.rest.remove(dst)
            self._step(op)

        event.callbacks.append(applied)

    # -- failover ------------------------------------------------------------

    def _fail(self, servers: list[str], path: str) -> None:
        """``servers`` fail now (see the module docstring): their work and messages are
        lost; the failover follows ``failover_timeout`` later."""
        ps, sim = self.ps, self.sim
        if ps._done:
            return  # training is over
        new = set(servers) - self.dead
        if not new:
            return
        self.dead |= new
        self.failovers += 1
        lost = _Failover(sim.now)
        self._cut_compute(new)
        for message in list(self.links.live.values()):
            if message.state in ("queued", "sent") and {message.src, message.dst} & new:
                self.links.cancel(message)
                self._owe(lost, message)
        for k, key in enumerate(ps.keys):
            if key.server in new:
                self._lose_round(lost, k)
        for op in list(self.forwards):
            if self.epoch[op.key] != op.epoch:
                self.forwards.remove(op)
            elif op not in self.paused and (op.busy in new or op.holders[-1] in new):
                op.hop += 1  # the hop in flight is lost
                op.busy = None
                self.paused.append(op)
        timer = sim.env.timeout(ps.ps.failover_timeout_s)
        timer.callbacks.append(lambda _e: self._failover(new, lost, path))

    def _cut_compute(self, servers: set[str]) -> None:
        """Cut the running and queued compute of ``servers`` (op ``cancelled``)."""
        sim, now = self.sim, self.sim.now
        records = sim.records
        for i in range(len(records) - 1, -1, -1):
            r = records[i]
            if r.resource in servers and r.kind == "compute" and r.end_s > now:
                if r.op != "cancelled":
                    sim.cancel_compute(i)

    def _owe(self, lost: _Failover, message: Message) -> None:
        """A push to, or a pull from, a failed server: the worker re-sends it."""
        name = message.label.partition(" ")[2].removesuffix(" (re-sent)")
        if message.op == "push" and name in self.key_of:
            lost.pushes[self.worker_of[message.src], self.key_of[name]] = message.iteration
        elif message.op == "pull" and name in self.key_of:
            lost.pulls[self.worker_of[message.dst], self.key_of[name]] = message.iteration

    def _lose_round(self, lost: _Failover, k: int) -> None:
        """Key ``k``'s master failed: its round not acknowledged by the tail is lost."""
        self.epoch[k] += 1
        st = self.ps.state[k]
        for w in st.accepted:
            lost.pushes[w, k] = st.version
        st.accepted, st.closing = [], False

    def _failover(self, servers: set[str], lost: _Failover, path: str) -> None:
        """The failure is noticed: new masters, chains without ``servers``, re-sends."""
        ps = self.ps
        self.detected |= servers
        for first, chain in self.chain.items():
            chain[:] = [s for s in chain if s not in self.dead]
            if not chain:
                raise ScenarioError(
                    Problem(
                        f"{path}.devices",
                        f"every replica of server {first}'s keys has failed",
                        f"more {PS_KEY}.replicas, or these failures in one entry "
                        "(the job then stops and restarts)",
                    ),
                    getattr(ps.scenario, "source", ""),
                )
        self._remaster(servers)
        held, self.held = self.held, []
        for message in held:
            self._owe(lost, message)
        paused, self.paused = self.paused, []
        for op in paused:
            op.holders = [s for s in op.holders if s not in self.dead]
            if op.holders and self.epoch[op.key] == op.epoch:
                self._step(op)
        self._resend(lost)

    def _remaster(self, servers: set[str]) -> None:
        """Every key of a failed master moves to the head of its chain."""
        ps = self.ps
        for k, key in enumerate(ps.keys):
            if key.server in servers:
                moved = dataclasses.replace(key, server=self.chain[self.range_of[k]][0])
                ps.keys[k] = moved
                layer = ps.layer_keys[key.layer]
                layer[layer.index(key)] = moved

    def _resend(self, lost: _Failover) -> None:
        """The workers re-send the pushes and pulls the failed master owed them."""
        ps = self.ps
        lost.out = len(lost.pushes) + len(lost.pulls)
        if not lost.out:
            return
        for (w, k), it in sorted(lost.pushes.items()):
            key = ps.keys[k]
            arrive = lambda w=w, key=key, it=it: ps._arrive_round(w, key, it)  # noqa: E731
            self.links.send(
                ps.workers[w],
                key.server,
                key.nbytes,
                lambda arrive=arrive: self._answered(lost, arrive),
                label=f"push {key.name} (re-sent)",
                iteration=it,
                op="push",
            )
        for (w, k), round_ in sorted(lost.pulls.items()):
            key = ps.keys[k]
            version = ps.state[k].version
            arrive = lambda w=w, key=key, v=version, r=round_: ps._arrived(w, key, v, r)  # noqa: E731
            self.links.send(
                key.server,
                ps.workers[w],
                key.nbytes,
                lambda arrive=arrive: self._answered(lost, arrive),
                label=f"pull {key.name} (re-sent)",
                iteration=round_,
                op="pull",
            )

    def _answered(self, lost: _Failover, then: Callable[[], None]) -> None:
        lost.out -= 1
        if lost.out == 0:
            self.lost_s += self.sim.now - lost.at_s
        then()
