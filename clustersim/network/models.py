"""Network models: the one interface through which collectives meet the network.

A scenario picks one with ``network.model``:

* ``flow`` -- *flow-level max-min*: every send of a collective's schedule is a
  flow of the :class:`~clustersim.network.Network`, sharing link bandwidth
  max-min fairly with everything else in flight.
* ``analytical`` -- *congestion-aware analytical*: each collective is priced by
  its algorithm's alpha-beta cost, its bandwidth part played as weighted flows
  on the same network (:mod:`clustersim.collectives.fluid`).

A model is a :class:`NetworkModel` subclass that registers itself by defining
``name``.  The built-in ones are implemented by the collective library
(:mod:`clustersim.collectives.models`), which the registry imports on first
use: the network layer does not import the layers above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import Registered, Registry

if TYPE_CHECKING:
    import simpy

    from ..engine import Simulation


def _load_builtin_models() -> None:
    import clustersim.collectives.models  # noqa: F401  (registers flow and analytical)


def _model_line(name: str, cls: type[NetworkModel]) -> str:
    return f"{name:<12} {cls.description}"


class NetworkModel(Registered):
    """How a collective's traffic is carried by the network (see the module docstring)."""

    registry: ClassVar[Registry[type[NetworkModel]]] = Registry(
        "network-models",
        "network model",
        describe=_model_line,
        loader=_load_builtin_models,
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


def network_model(name: str, path: str = "network.model") -> NetworkModel:
    """An instance of the network model called ``name``; ScenarioError at ``path`` if none."""
    return NetworkModel.registry.lookup(name, path)()
