"""A cyclic barrier for strategy processes (:meth:`~clustersim.engine.Simulation.barrier`)."""

from __future__ import annotations

import simpy

from .errors import SimulationError


class Barrier:
    """A cyclic barrier: the ``parties``-th call of :meth:`wait` releases all waiters."""

    def __init__(self, env: simpy.Environment, name: str, parties: int) -> None:
        if parties < 1:
            raise SimulationError(f"barrier '{name}' needs at least 1 party, got {parties}")
        self.env = env
        self.name = name
        self.parties = parties
        self.generation = 0
        """How many times the barrier has released its waiters."""
        self._arrived = 0
        self._release = env.event()

    def wait(self) -> simpy.Event:
        """An event that succeeds when all ``parties`` have arrived in this generation."""
        release = self._release
        self._arrived += 1
        if self._arrived == self.parties:
            self._arrived = 0
            self.generation += 1
            self._release = self.env.event()
            release.succeed(self.generation)
        return release

    @property
    def waiting(self) -> int:
        """Parties arrived in the current generation and still waiting."""
        return self._arrived
