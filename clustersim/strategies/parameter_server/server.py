"""The servers' side of a parameter-server run (:mod:`.strategy`): pushes arrive, rounds
close, updates run, pulls go back.

A key's server holds its version (:class:`KeyState`).  In ``sync`` and ``backup`` a push
made on the current version joins the key's round (aggregated on the server's compute
stream, as it arrives); the ``k``-th closes it: one optimizer update, then every
accepted worker pulls the new version (a late push is dropped, its sender pulls the
newest).  In ``async``, ``ssp`` and ``geo`` each push is applied at once (an update
each) and its sender pulls the result.  Updates are memory-bound on the server's
compute stream; with ``replicas`` > 1 a pull waits for the update's chain replication
(:mod:`.replication`).  Backup cancelling (:mod:`.backup`) and a hierarchy
(:mod:`.hierarchy`) take a worker's pushes over when they are on.  Units: seconds, bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from .. import training
from .layout import Key

if TYPE_CHECKING:
    from ...engine import Simulation
    from ...scenario import ParameterServerSpec, TrainingSpec
    from .backup import BackupCancel
    from .hierarchy import Hierarchy
    from .pipeline import Connections
    from .replication import Replication


@dataclass
class KeyState:
    """A key on its server: version, the round being gathered (sync/backup)."""

    version: int = 0
    accepted: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    closing: bool = False


@dataclass
class Pending:
    """Pulls a worker still waits for in its current iteration."""

    left: int
    event: simpy.Event


class KeyServer:
    """The servers' side of :class:`~.strategy.ParameterServer` (module docstring): push,
    aggregate or apply, update, pull.  The state is the strategy's, set up by its
    ``check`` and ``start``."""

    sim: Simulation
    ps: ParameterServerSpec
    train: TrainingSpec
    workers: tuple[str, ...]
    samples: list[float]
    keys: list[Key]
    k: int
    """Pushes a round waits for (sync: every worker; backup: ``backup_k``)."""
    links: Connections
    backup: BackupCancel | None
    hierarchy: Hierarchy | None
    replication: Replication | None
    state: list[KeyState]
    pulled: list[list[int]]
    """Per worker and key: the version it last pulled."""
    pending: list[Pending | None]
    applied: list[int]
    histogram: dict[int, int]
    pushes: list[int]
    dropped: int
    round_end: dict[int, float]
    round_samples: list[float]

    @property
    def _done(self) -> bool:
        """Sync/backup: every key has had ``training.iterations`` rounds."""
        return min(st.version for st in self.state) >= self.train.iterations

    def _push(self, w: int, key: Key, it: int) -> None:
        """Send worker ``w``'s gradient (or delta) of ``key`` to its server."""
        self.pushes[w] += 1
        if self.backup is not None:
            self.backup.push(w, key, it)
            return
        if self.hierarchy is not None:
            self.hierarchy.push(w, key, it)
            return
        device = self.workers[w]
        arrive = self._arrive_round if self.ps.mode in ("sync", "backup") else self._apply_now
        if device == key.server:
            arrive(w, key, it)
            return
        self.links.send(
            device,
            key.server,
            key.nbytes,
            lambda: arrive(w, key, it),
            label=f"push {key.name}",
            iteration=it,
            op="push",
        )

    def _apply_now(self, w: int, key: Key, it: int) -> None:
        """Async, ssp, geo: apply the push at once; the worker pulls the result."""
        st = self.state[key.index]
        self._count_staleness(st.version - self.pulled[w][key.index])
        st.version += 1
        version = st.version
        self.applied[w] += 1
        self._after_update(key, self._update(key, it), lambda: self._pull(w, key, version, it), it)

    def _arrive_round(self, w: int, key: Key, it: int) -> None:
        """Sync, backup: aggregate a push made on the current version, or drop it."""
        st = self.state[key.index]
        if self.pulled[w][key.index] == st.version and not st.closing and not self._key_done(st):
            self._accept(w, key)
            if len(st.accepted) == self.k:
                st.closing = True
                event = self._update(key, st.version)
                self._after_update(key, event, lambda: self._close_round(key), st.version)
                if self.backup is not None:
                    self.backup.closed(st)
            return
        self.dropped += 1
        if st.closing:
            st.waiting.append(w)
        else:
            self._pull(w, key, st.version, it)

    def _accept(self, sender: int, key: Key) -> None:
        """Take ``sender``'s push (a worker's, or a node's under a hierarchy) into the
        key's current round: the server aggregates it on its compute stream."""
        st = self.state[key.index]
        st.accepted.append(sender)
        self._count_staleness(0)
        self.sim.compute(
            key.server,
            bytes=key.nbytes,
            label=f"aggregate {key.name}",
            iteration=st.version,
            op="ps_aggregate",
        )

    def _key_done(self, st: KeyState) -> bool:
        return st.version >= self.train.iterations

    def _close_round(self, key: Key) -> None:
        st = self.state[key.index]
        round_ = st.version
        st.version += 1
        accepted, waiting = st.accepted, st.waiting
        st.accepted, st.waiting, st.closing = [], [], False
        if key.index == 0:
            self.round_samples.append(sum(self.samples[w] for w in accepted))
        for w in accepted:
            self.applied[w] += 1
            self._pull(w, key, st.version, round_, round_=round_)
        for w in waiting:
            self._pull(w, key, st.version, round_)

    def _update(self, key: Key, it: int) -> simpy.Event:
        """The server's optimizer update of ``key`` (memory-bound, on its compute stream)."""
        per_param = training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer]
        return self.sim.compute(
            key.server,
            bytes=key.updated_params * per_param,
            label=f"update {key.name}",
            phase="optimizer",
            iteration=it,
            op="ps_update",
        )

    def _after_update(self, key: Key, ev: simpy.Event, then: Callable[[], None], it: int) -> None:
        """``then()`` after the update ``ev`` (and its chain replication, ``replicas`` > 1)."""
        if self.replication is None:
            ev.callbacks.append(lambda _e: then())
        else:
            self.replication.after_update(key, ev, then, it)

    def _pull(self, w: int, key: Key, version: int, it: int, round_: int | None = None) -> None:
        """Send ``key`` at ``version`` to worker ``w``."""
        device = self.workers[w]

        def arrived() -> None:
            self._arrived(w, key, version, round_)

        if device == key.server:
            arrived()
            return
        self.links.send(
            key.server,
            device,
            key.nbytes,
            arrived,
            label=f"pull {key.name}",
            iteration=it,
            op="pull",
        )

    def _arrived(self, w: int, key: Key, version: int, round_: int | None) -> None:
        """``key`` at ``version`` is in at worker ``w`` (the last byte of its pull)."""
        self.pulled[w][key.index] = version
        if round_ is not None:
            self.round_end[round_] = max(self.round_end.get(round_, 0.0), self.sim.now)
        pending = self.pending[w]
        if pending is not None:
            pending.left -= 1
            if pending.left == 0:
                pending.event.succeed()

    def _count_staleness(self, staleness: int) -> None:
        self.histogram[staleness] = self.histogram.get(staleness, 0) + 1
