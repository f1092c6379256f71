"""What writing one checkpoint costs, simulated on the cluster's network.

Every rank writes its weights and optimizer states (its share, with ZeRO; from the
strategy's memory plan, :meth:`Strategy.memory_plan`) to the storage service of
``checkpoint.storage`` (:func:`clustersim.topology.attach_storage`): one flow per rank, all
at once, in one :class:`~clustersim.engine.Simulation`, so they share NICs, uplinks and the
storage's own link max-min fairly.

* **sync**: training waits until the last byte has landed: ``blocking_s`` is the time the
  flows take, ``drain_s`` is 0.
* **async**: training waits only for the device-to-host copy, each rank's bytes over its
  PCIe link (the first link of its route to its node's CPU; the device's memory bandwidth
  on a cluster without nodes), ``blocking_s`` the slowest rank's; then each node's host
  sends its ranks' bytes to storage in the background: ``drain_s`` is the time those flows
  take.
* **no storage**: each rank writes to its own node (sync or async alike): ``blocking_s`` is
  the copy over PCIe, nothing crosses the network, ``drain_s`` is 0.

:func:`drain_slowdown` measures what a background drain costs training: it runs the
scenario's training iterations with the drain flows started at t = 0 in the same simulation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engine import Simulation
from ..errors import Problem, ScenarioError
from ..strategies import strategy_for_scenario
from ..topology import STORAGE, Topology, attach_storage, build_topology


@dataclass(frozen=True)
class CheckpointCost:
    """The cost of writing one checkpoint (seconds, bytes)."""

    bytes_per_rank: Mapping[str, float]
    """Weights + optimizer states each rank writes, bytes."""
    blocking_s: float
    """Seconds training stands still for one checkpoint (sync: the whole write; async: the
    device-to-host copy)."""
    drain_s: float
    """Seconds the background drain to storage takes after the copy (async only, else 0)."""
    is_async: bool
    to_storage: bool
    """Written over the network to the storage service (else to each node, over PCIe)."""

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes_per_rank.values())


def checkpoint_topology(scenario: Any) -> Topology:
    """The scenario's cluster with its checkpoint storage attached (if it has one)."""
    topology = build_topology(scenario.cluster)
    checkpoint = scenario.checkpoint
    if checkpoint is not None and checkpoint.storage is not None:
        topology = attach_storage(topology, checkpoint.storage)
    return topology


def checkpoint_bytes(scenario: Any, topology: Topology) -> dict[str, float]:
    """Bytes each rank writes: its weights and optimizer states from the strategy's memory
    plan (gradients are not saved).  ScenarioError at ``checkpoint`` for a strategy without
    a memory plan (parameter servers, workloads)."""
    strategy = strategy_for_scenario(scenario).from_scenario(scenario, topology)
    plan = rank_state(strategy, scenario.source)
    return {name: float(m.weights + m.optimizer_states) for name, m in plan.items()}


def rank_state(strategy: Any, source: str) -> dict[str, Any]:
    """The strategy's memory plan (what each rank holds), which a checkpoint saves;
    ScenarioError at ``checkpoint`` (naming ``source``) for a strategy without one
    (parameter servers, workloads)."""
    plan_of = getattr(strategy, "memory_plan", None)
    plan = plan_of() if plan_of is not None else None
    if not plan:
        raise ScenarioError(
            Problem(
                "checkpoint",
                f"the {strategy.name} strategy does not say what each rank holds",
                "data_parallel, zero or pipeline training",
            ),
            source,
        )
    return plan


def checkpoint_cost(
    scenario: Any,
    topology: Topology | None = None,
    bytes_per_rank: Mapping[str, float] | None = None,
) -> CheckpointCost:
    """One checkpoint of ``scenario`` (which needs a ``checkpoint`` section), simulated.

    ``topology``: the cluster with the storage attached (default
    :func:`checkpoint_topology`); ``bytes_per_rank``: what each rank writes (default
    :func:`checkpoint_bytes`).
    """
    spec = scenario.checkpoint
    if spec is None:
        raise ScenarioError(Problem("checkpoint", "the scenario has no checkpoint section"))
    topology = topology or checkpoint_topology(scenario)
    sizes = dict(bytes_per_rank or checkpoint_bytes(scenario, topology))
    copy_s = max((size / host_copy_Bps(topology, rank) for rank, size in sizes.items()), default=0)
    if spec.storage is None:
        return CheckpointCost(sizes, copy_s, 0.0, spec.async_, False)
    if not spec.async_:
        return CheckpointCost(sizes, write_time(topology, sizes), 0.0, False, True)
    drain_s = write_time(topology, host_bytes(topology, sizes))
    return CheckpointCost(sizes, copy_s, drain_s, True, True)


def write_time(topology: Topology, sizes: Mapping[str, float]) -> float:
    """Seconds until the last of the flows ``device -> storage`` (``sizes`` bytes each, all
    started at 0) has arrived, in one simulation of ``topology``."""
    sim = Simulation(topology)
    for device, size in sizes.items():
        if size > 0:
            sim.transfer(device, STORAGE, size, label="checkpoint", record=False)
    return sim.run()


def host_bytes(topology: Topology, sizes: Mapping[str, float]) -> dict[str, float]:
    """``sizes`` summed per host: the node's CPU for a device of a node, else the device."""
    hosts: dict[str, float] = {}
    for device, size in sizes.items():
        host = _host(topology, device) or device
        hosts[host] = hosts.get(host, 0.0) + size
    return hosts


def host_copy_Bps(topology: Topology, device: str) -> float:
    """Bandwidth of ``device``'s copy to host memory: the first link of its route to its
    node's CPU (its PCIe link), else its memory bandwidth."""
    host = _host(topology, device)
    if host is not None and host != device:
        route = topology.route(device, host)
        if route.links:
            return route.links[0].bandwidth_Bps
    bandwidth = topology.device(device).memory_bandwidth_Bps
    if bandwidth > 0:
        return bandwidth
    raise ScenarioError(
        Problem("checkpoint", f"{device} has no host and no memory bandwidth to copy its state")
    )


def _host(topology: Topology, device: str) -> str | None:
    node = topology.device(device).node
    if node is None:
        return None
    cpu = f"{node}/cpu"
    return cpu if cpu in topology.devices else None


@dataclass(frozen=True)
class DrainSlowdown:
    """Training iterations with and without a background drain running from t = 0."""

    iteration_s: float
    """Mean iteration time without the drain, seconds."""
    iteration_with_drain_s: float
    """Mean iteration time of the same iterations with the drain flows running, seconds."""
    drain_s: float
    """When the last drain flow arrived in the run with training, seconds."""

    @property
    def slowdown(self) -> float:
        """``iteration_with_drain_s / iteration_s`` (1.0: no effect)."""
        return self.iteration_with_drain_s / self.iteration_s


def drain_slowdown(scenario: Any, topology: Topology | None = None) -> DrainSlowdown:
    """Run ``scenario``'s training twice, alone and with the async drain of one checkpoint
    (each host's bytes to storage, started at t = 0), and compare the iteration times.  The
    scenario needs ``checkpoint.storage``."""
    spec = scenario.checkpoint
    if spec is None or spec.storage is None:
        raise ScenarioError(Problem("checkpoint.storage", "a drain needs a storage service"))
    topology = topology or checkpoint_topology(scenario)
    sizes = host_bytes(topology, checkpoint_bytes(scenario, topology))
    alone, _ = _train(scenario, topology, {})
    together, drained = _train(scenario, topology, sizes)
    return DrainSlowdown(alone, together, drained)


def training_with_drain(scenario: Any, topology: Topology) -> tuple[float, float]:
    """(mean iteration time, when the last drain flow arrived) of ``scenario``'s training
    run with the async drain of one checkpoint (each host's bytes to storage) started at
    t = 0 beside it: the drain and the training share NICs, uplinks and spines.  The
    scenario needs ``checkpoint.storage``."""
    sizes = host_bytes(topology, checkpoint_bytes(scenario, topology))
    return _train(scenario, topology, sizes)


def _train(scenario: Any, topology: Topology, drain: Mapping[str, float]) -> tuple[float, float]:
    """(mean iteration time, when the last drain flow arrived) of one training run."""
    strategy = strategy_for_scenario(scenario).from_scenario(scenario, topology)
    sim = Simulation.from_scenario(scenario, topology)
    arrived = [0.0]

    def landed(_event: Any) -> None:
        arrived[0] = max(arrived[0], sim.now)

    for host, size in drain.items():
        if size > 0:
            done = sim.transfer(host, STORAGE, size, label="checkpoint drain", record=False)
            done.callbacks.append(landed)
    strategy.start(sim)
    sim.run()
    summary = strategy.summarize(sim)
    keys = summary.as_dict() if hasattr(summary, "as_dict") else summary
    times = keys.get("iteration_times_s") if isinstance(keys, Mapping) else None
    if not times:
        times = [sim.now / scenario.training.iterations]
    return sum(times) / len(times), arrived[0]
