"""The built-in network models as the collective library carries them out.

See :mod:`clustersim.network.models` for the interface.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from ..engine import gc_paused
from ..network.models import Launch, NetworkModel
from .fluid import run_fluid
from .protocol import PROTOCOLS
from .schedule import execute

if TYPE_CHECKING:
    from ..engine import Simulation


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
        )


def _after(sim: Simulation, delay_s: float, then: Any) -> Generator[Any, Any, None]:
    """Wait ``delay_s`` seconds, then run ``then()`` and wait for its event."""
    yield sim.timeout(delay_s)
    yield then()
