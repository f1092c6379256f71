"""Communicators: collectives on one process group run in issue order, one at a time.

NCCL runs the collectives of one communicator on one CUDA stream: a second
all-reduce issued while the first is in flight waits for it, whatever the
network could carry.  Each process group (by default the tuple of its devices)
has a :class:`Communicator`; :func:`clustersim.collectives.run_collective`
submits every call to the communicator of its group.  Collectives on different
groups (the data-parallel rings of the tensor ranks of a node, say) still run
at the same time and share links.

A collective can be split into ``channels`` slices of equal size that run at
once on the same ranks (NCCL's channels); it ends when its last slice does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import simpy

if TYPE_CHECKING:
    from ..engine import Simulation

__all__ = ["Communicator", "communicator"]


class Communicator:
    """The FIFO of collectives of one process group (see the module docstring)."""

    __slots__ = ("env", "busy", "waiting", "started")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.busy = False
        """A collective of this group is in flight."""
        self.waiting: deque[tuple[Callable[[], simpy.Event], simpy.Event]] = deque()
        """Submitted collectives not started yet, in issue order, with the events returned
        to their callers."""
        self.started = 0
        """Collectives started so far."""

    def submit(self, start: Callable[[], simpy.Event]) -> simpy.Event:
        """Run ``start()`` (which starts a collective and returns its end event) now if the
        group is idle, else after every collective submitted before it; return the event
        that fires when this collective ends."""
        if not self.busy:
            self.busy = True
            return self._run(start)
        done = self.env.event()
        self.waiting.append((start, done))
        return done

    def _run(self, start: Callable[[], simpy.Event]) -> simpy.Event:
        self.started += 1
        event = start()
        event.callbacks.append(self._finished)
        return event

    def _finished(self, _event: simpy.Event) -> None:
        """The collective in flight ended: start the next one at this instant."""
        if not self.waiting:
            self.busy = False
            return
        start, done = self.waiting.popleft()
        event = self._run(start)
        event.callbacks.append(lambda _e: done.succeed())


def communicator(sim: Simulation, key: Hashable) -> Communicator:
    """The communicator of ``sim`` called ``key`` (created on first use)."""
    found = sim.communicators.get(key)
    if found is None:
        found = sim.communicators[key] = Communicator(sim.env)
    return found
