"""One job's window on the shared :class:`~clustersim.engine.Simulation`.

A :class:`JobSimulation` is what a job's strategy is given instead of the simulation:
everything it asks for is the shared one's (the SimPy environment, the compute streams,
the network, the records), except

* ``topology`` -- the view holding the job's devices only
  (:meth:`~clustersim.topology.Topology.restricted`), where its strategy places its ranks;
* ``now`` -- the time since the job started, so its iteration clock reads as in a run
  of the job alone (:meth:`book_collective` turns such times back into the run's);
* ``communicators`` and :meth:`barrier` -- its own, so two jobs naming a process group or
  a barrier alike never share one;
* ``records`` -- the job's records (those of its devices), times measured from its start.

Jobs own disjoint devices, so every record belongs to the job that owns its resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...barrier import Barrier
from ...engine import Simulation
from ...errors import SimulationError
from ...records import Record
from ...topology import Topology


class JobSimulation:
    """The shared simulation as one job sees it (see the module docstring)."""

    def __init__(self, sim: Simulation, topology: Topology, start_s: float) -> None:
        self.shared = sim
        self.topology = topology
        self.start_s = start_s
        """When the job started, seconds of the shared run."""
        self.communicators: dict[Any, Any] = {}
        self._barriers: dict[str, Barrier] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)

    @property
    def now(self) -> float:
        """Seconds since the job started."""
        return self.shared.env._now - self.start_s

    def book_collective(
        self,
        devices: Sequence[str],
        label: str,
        start_s: float,
        end_s: float,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """:meth:`Simulation.book_collective` of times read from :attr:`now`."""
        shift = self.start_s
        self.shared.book_collective(devices, label, start_s + shift, end_s + shift, *args, **kwargs)

    def barrier(self, name: str, parties: int) -> Barrier:
        """The job's own barrier called ``name`` (see :meth:`Simulation.barrier`)."""
        found = self._barriers.get(name)
        if found is None:
            found = self._barriers[name] = Barrier(self.shared.env, name, parties)
        elif found.parties != parties:
            raise SimulationError(
                f"barrier '{name}' was created for {found.parties} parties, now asked for {parties}"
            )
        return found

    @property
    def records(self) -> list[Record]:
        """The job's records, times from its start."""
        mine = self.topology.devices
        shift = self.start_s
        found = [r for r in self.shared.records if r.resource in mine]
        if shift:
            found = [r._replace(start_s=r.start_s - shift, end_s=r.end_s - shift) for r in found]
        return found

    def job_time_s(self) -> float:
        """From the job's start to the end of its last record, seconds (0 without records)."""
        return max((r.end_s for r in self.records), default=0.0)
