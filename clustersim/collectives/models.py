"""Network models: how a collective's traffic is carried by the network.

A scenario picks one with ``network.model`` (``clustersim list network-models``):

* ``flow`` -- *flow-level max-min*: every send of a collective's schedule is a
  flow of the :class:`~clustersim.network.Network`, sharing link bandwidth
  max-min fairly with everything else in flight.
* ``analytical`` -- *congestion-aware analytical*: each collective is priced by
  its algorithm's alpha-beta cost, its bandwidth part played as weighted flows
  on the same network (:mod:`clustersim.collectives.fluid`).

A model is a :class:`NetworkModel` subclass that registers itself by defining
``name``; :meth:`NetworkModel.start` starts one collective, described by a
:class:`Launch`.  ``network.model`` is a plain string in the scenario schema, checked
against this registry when a scenario is prepared.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import simpy

from ..host import gc_paused
from ..registry import Registered, Registry
from .execution import execute
from .fluid import run_fluid
from .protocol import PROTOCOLS

if TYPE_CHECKING:
    from ..engine import Simulation


def _model_line(name: str, cls: type[NetworkModel]) -> str:
    return f"{name:<12} {cls.description}"


class NetworkModel(Registered):
    """How a collective's traffic is carried by the network (see the module docstring)."""

    registry: ClassVar[Registry[type[NetworkModel]]] = Registry(
        "network-models",
        "network model",
        describe=_model_line,
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    plays_sends: ClassVar[bool] = False
    """True if every send of an algorithm's schedule is simulated as its own flow."""

    def start(self, launch: Launch) -> simpy.Event:
        """Start the collective described by ``launch`` now; the event fires when it ends."""
        raise NotImplementedError


@dataclass(frozen=True)
class Launch:
    """A collective about to start under a network model."""

    sim: Simulation
    call: Any
    """The :class:`~clustersim.collectives.CollectiveCall` (protocol bytes applied)."""
    algorithm: Any
    """Its :class:`~clustersim.collectives.Algorithm`."""
    label: str
    iteration: int
    topology: Any
    """What prices and routes it: the simulation's topology, or a protocol's view of it."""
    delay_s: float = 0.0
    """Seconds that pass before the first byte (the protocol's base latency)."""
    record_transfers: bool | None = None
    channel: int = 0
    """The connection its sends use."""
    op: str = ""
    """The ``op`` of its ``collective`` records."""


def network_model(name: str, path: str = "network.model") -> NetworkModel:
    """An instance of the network model called ``name``; ScenarioError at ``path`` if none."""
    return NetworkModel.registry.lookup(name, path)()


class FlowLevel(NetworkModel):
    """Every send of the algorithm's schedule is a flow (flow-level max-min)."""

    name = "flow"
    description = "flow-level network: transfers share links max-min fairly"
    plays_sends = True

    def start(self, launch: Launch) -> simpy.Event:
        sim, call = launch.sim, launch.call
        with gc_paused():
            schedule = launch.algorithm.schedule(call, launch.topology)
        protocol = PROTOCOLS.get(call.protocol) if call.protocol else None
        share = protocol.share(call, sim.topology) if protocol is not None else 1.0
        if share != 1.0:  # the schedule is of the wire bytes; reductions sum the data
            schedule.reduce_bytes = [b * share for b in schedule.reduce_bytes]

        def play() -> simpy.Event:
            return execute(
                sim,
                call.devices,
                schedule,
                label=launch.label,
                reduce_cost=call.reduce_cost,
                record_transfers=launch.record_transfers,
                iteration=launch.iteration,
                connection=launch.channel,
                topology=launch.topology,
                op=launch.op,
            )

        if launch.delay_s <= 0.0:
            return play()
        return sim.process(_after(sim, launch.delay_s, play))


class Analytical(NetworkModel):
    """The algorithm's alpha-beta cost, its bandwidth part as weighted flows."""

    name = "analytical"
    description = (
        "congestion-aware: each collective's alpha-beta cost, its bandwidth part "
        "shared max-min fairly with every transfer in flight"
    )

    def start(self, launch: Launch) -> simpy.Event:
        return run_fluid(
            launch.sim,
            launch.call,
            launch.algorithm,
            launch.label,
            launch.iteration,
            launch.topology,
            launch.delay_s,
            launch.op,
        )


def _after(sim: Simulation, delay_s: float, then: Any) -> Generator[Any, Any, None]:
    """Wait ``delay_s`` seconds, then run ``then()`` and wait for its event."""
    yield sim.timeout(delay_s)
    yield then()
