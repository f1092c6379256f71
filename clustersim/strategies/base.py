"""The strategy registry: workloads that spawn processes on the engine.

A strategy is chosen by the key it owns in the scenario's ``workload:``
mapping (``workload: {program: [...]}`` picks the ``program`` strategy).  A
strategy class registers itself by defining ``name``; third-party strategies
are found through the entry-point group ``clustersim.strategies`` (each entry
point names a module or class; importing it registers the strategy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from ..budget import (
    DEFAULT_MAX_EVENTS,
    MemoryEstimate,
    WorkEstimate,
    default_max_memory,
    enforce,
    enforce_memory,
    estimate_memory,
)
from ..errors import Problem, ScenarioError
from ..metrics import AutoChoice
from ..registry import Registered, Registry
from .written_keys import DATA_PARALLEL_READS, dp_problems, unread_problems

if TYPE_CHECKING:
    from ..engine import Simulation
    from ..metrics import StrategySummary
    from ..metrics.training import CollectivesRan
    from ..scenario import Scenario
    from ..topology import Topology

ENTRY_POINT_GROUP = "clustersim.strategies"
"""The entry-point group of third-party strategies (each names a module or class; importing
it registers the strategy)."""
BUILTIN_STRATEGIES = (
    "collective",
    "data_parallel",
    "hybrid",
    "jobs",
    "parameter_server",
    "program",
    "trace",
    "zero",
)
"""Modules (or packages) of :mod:`clustersim.strategies` holding the built-in strategies."""


def _strategy_line(name: str, cls: type[Strategy]) -> str:
    """``clustersim list strategies``: name and description."""
    return f"{name:<12} {cls.description}"


class Strategy(Registered):
    """Base class of workload strategies (a subclass defining ``name`` registers itself).

    Subclasses set ``name`` (the workload key they own), ``description`` (one
    line for ``clustersim list strategies``) and ``config_model`` (a pydantic
    model of the whole ``workload:`` mapping), and implement :meth:`start` and
    :meth:`summarize`.
    """

    registry: ClassVar[Registry[type[Strategy]]] = Registry(
        "strategies",
        "strategy",
        describe=_strategy_line,
        sort=True,
        builtins=[f"clustersim.strategies.{module}" for module in BUILTIN_STRATEGIES],
        entry_points=ENTRY_POINT_GROUP,
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_model: ClassVar[type[BaseModel]]
    is_training: ClassVar[bool] = False
    """True for strategies that run training scenarios (model, training) instead of
    owning a ``workload:`` key."""
    section: ClassVar[str | None] = None
    """The top-level scenario section whose presence selects this strategy (``jobs``), for
    a strategy that owns neither a workload key nor training; None: none."""

    @classmethod
    def owns_workload_key(cls) -> bool:
        """Whether the strategy is chosen by its name as a ``workload:`` key."""
        return not cls.is_training and cls.section is None

    def __init__(self, config: BaseModel, scenario: Scenario, topology: Topology) -> None:
        self.config = config
        self.scenario = scenario
        self.topology = topology
        self.auto_choices: dict[str, AutoChoice] = {}
        """What the strategy chose for the keys the scenario left to it, by key path
        (:mod:`clustersim.strategies.auto`; summary.json's ``auto_choices``)."""

    def continues_without_workers(self) -> bool:
        """Whether training can go on when workers fail (``recovery.elastic``): False
        unless a strategy says so (data parallel; parameter servers in backup mode)."""
        return False

    def loses_state(self, devices: Sequence[str]) -> bool:
        """Whether losing ``devices`` at once loses state the job cannot rebuild without a
        restart from its checkpoint (its workers always stop it): False unless a strategy
        says so (parameter servers whose keys have no live replica left)."""
        return False

    def take_failures(self, failures: Sequence[Any]) -> None:
        """The scheduled device failures the simulation plays (they do not stop the job:
        :class:`clustersim.resilience.ScheduledComponentFailure`), given before
        :meth:`start`.  A strategy whose state they touch plays them itself (a parameter
        server's failover) and may refuse them (ScenarioError at the entry's path); by
        default they only take their links down."""

    def take_link_failures(self, failures: Sequence[Any]) -> None:
        """The scheduled failures whose links the simulation takes down (links, NICs,
        switches: :func:`clustersim.topology.failures.played_link_failures`), given before
        :meth:`start`; a strategy that cannot play them refuses (ScenarioError at the
        entry's path).  By default the network plays them."""

    @classmethod
    def from_workload(
        cls, workload: dict[str, Any], scenario: Scenario, topology: Topology
    ) -> Strategy:
        """Validate ``workload`` with this strategy's model and check it against ``topology``."""
        from ..scenario import validate_model
        from ..scenario.plugins import check_plugins

        config = validate_model(cls.config_model, workload, "workload", scenario.source)
        check_plugins(config, scenario.source, "workload")
        strategy = cls(config, scenario, topology)
        try:
            strategy.check()
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
        strategy.enforce_work_limit()
        return strategy

    @classmethod
    def from_scenario(cls, scenario: Scenario, topology: Topology) -> Strategy:
        """The strategy for ``scenario`` (workload strategies read ``scenario.workload``)."""
        return cls.from_workload(scenario.workload, scenario, topology)

    def check(self) -> None:
        """Check the workload against the topology (devices exist, ...); raise ScenarioError."""

    def devices_of(self, glob: str | None, path: str) -> tuple[str, ...]:
        """Names of the devices ``glob`` matches, in build order (ScenarioError at ``path``
        if none); without a glob every GPU, or every device of a cluster without GPUs."""
        if glob is not None:
            return tuple(d.name for d in self.topology.select(glob, path))
        devices = [d for d in self.topology.devices.values() if d.kind == "gpu"]
        return tuple(d.name for d in devices or self.topology.devices.values())

    def estimate_work(self) -> WorkEstimate | None:
        """The run's work (transfers, records), estimated from the checked configuration
        without running it and within a small factor (:mod:`clustersim.budget`); None if
        this strategy cannot say (then only the engine's hard stop limits it)."""
        return None

    @property
    def max_events(self) -> int:
        """The run's work limit: the scenario's ``engine.max_events``."""
        engine = getattr(self.scenario, "engine", None)
        return getattr(engine, "max_events", DEFAULT_MAX_EVENTS)

    @property
    def max_memory(self) -> float | None:
        """The run's memory limit, bytes: the scenario's ``engine.max_memory``, else the
        machine's default (:func:`~clustersim.budget.default_max_memory`; None if unknown)."""
        given = getattr(getattr(self.scenario, "engine", None), "max_memory", None)
        return given if given is not None else default_max_memory()

    @property
    def memory_limit_is_default(self) -> bool:
        """Whether :attr:`max_memory` is the machine's default, not the scenario's."""
        return getattr(getattr(self.scenario, "engine", None), "max_memory", None) is None

    def estimate_memory(self, outputs: bool = False) -> MemoryEstimate:
        """The simulator's peak memory for this run (:func:`~clustersim.budget.estimate_memory`
        of :meth:`estimate_work` on this topology); with ``outputs``, writing its run folder
        too."""
        if not hasattr(self, "_work"):
            self._work = self.estimate_work()
        devices, links = len(self.topology.devices), len(self.topology.links)
        return estimate_memory(self._work, devices, links, outputs)

    def enforce_work_limit(self, outputs: bool | None = None) -> WorkEstimate | None:
        """The estimate (:meth:`estimate_work`, made once); a
        :class:`~clustersim.budget.WorkLimitError` if it is over :attr:`max_events`, a
        :class:`~clustersim.budget.MemoryLimitError` if the memory it needs
        (:meth:`estimate_memory`, the run folder too with ``outputs``, by default when the
        scenario :attr:`~clustersim.scenario.Scenario.writes_outputs`) is over
        :attr:`max_memory`.

        ``from_scenario`` calls it after :meth:`check`; a strategy whose check would
        allocate in proportion to its counts calls it in :meth:`check`, before that."""
        if not hasattr(self, "_work"):
            self._work = self.estimate_work()
        if outputs is None:
            outputs = getattr(self.scenario, "writes_outputs", False)
        source = getattr(self.scenario, "source", "")
        enforce(self._work, self.max_events, source)
        enforce_memory(
            self.estimate_memory(outputs),
            self.max_memory,
            source,
            default=self.memory_limit_is_default,
            work=self._work,
        )
        return self._work

    def shorter(self) -> list[str]:
        """What would make this run take less work, each a phrase naming a flag or a
        setting (``--set training.iterations=1``): what the notice of a run estimated long
        offers (:func:`clustersim.budget.long_work_notice`).  Nothing by default."""
        return []

    def start(self, sim: Simulation) -> None:
        """Spawn the workload's processes on ``sim``."""
        raise NotImplementedError

    def summarize(self, sim: Simulation) -> StrategySummary | dict[str, Any]:
        """The workload's part of the summary, after the run: a typed part (see
        :mod:`clustersim.metrics.families`), or a dict of keys for a strategy without one."""
        return {}

    def stand_ins(self) -> dict[str, str]:
        """Devices not played -> the played device that stands for each (its place in the
        replica of its class that was played: ``simulate_replicas: one``); the run's
        per-device times give each the figures of the device standing for it.  Empty when
        every device is played."""
        return {}

    def link_stand_ins(self) -> dict[int, int]:
        """Links -> the link whose load each had in a run that plays one replica per class
        for every replica (their places on the played replica); the link table gives each the
        other's bytes, busy time and peak.  Empty unless such a run."""
        return {}

    def describe(self) -> str:
        """One line saying what this workload is, for ``clustersim validate``."""
        return self.name


class TrainingStrategy(Strategy):
    """Base of strategies that run training scenarios (``model``, ``training``,
    ``data_parallel``) rather than owning a ``workload:`` key."""

    is_training = True
    default_sync: ClassVar[str] = "allreduce"
    """``data_parallel.sync`` this strategy stands for (used when the section is absent)."""
    supports_offload: ClassVar[bool] = False
    """Whether ``training.offload`` (CPU offload over PCIe) is modelled."""
    supports_param_gather_overlap: ClassVar[bool] = False
    """Whether ``zero.overlap_param_gather`` (the distributed optimizer's) is modelled."""
    reads: ClassVar[frozenset[str]] = DATA_PARALLEL_READS
    """The keys of the shared training sections (parallelism, pipeline, zero, data_parallel)
    this strategy reads; a key written with another value than its default and not covered
    here is refused (:mod:`clustersim.strategies.written_keys`)."""
    analytical_shortens: ClassVar[bool] = False
    """Whether ``network.model: analytical`` takes much of its work away (its data-parallel
    collectives, played send by send in the flow-level model)."""

    def shorter(self) -> list[str]:
        """One iteration instead of several, and the analytical network model where it
        shortens the run (:attr:`analytical_shortens`)."""
        hints = []
        training = self.scenario.training
        if training is not None and training.iterations > 1:
            hints.append("--set training.iterations=1")
        if self.analytical_shortens and self.scenario.network.model == "flow":
            hints.append("--network analytical")
        return hints

    def written_key_problems(self) -> list[Problem]:
        """The keys written that this strategy would ignore, and ``parallelism.dp`` against
        the workers (the hybrid checks its own layout instead)."""
        problems = unread_problems(self.scenario, self.name, self.reads)
        return problems + dp_problems(self.scenario, len(self.workers))

    @classmethod
    def from_scenario(cls, scenario: Scenario, topology: Topology) -> Strategy:
        """The strategy of a training scenario, checked against ``topology``."""
        from ..scenario import DataParallelSpec

        if scenario.workload is not None or scenario.model is None or scenario.training is None:
            raise ScenarioError(
                Problem(
                    "workload",
                    f"{cls.name} is a training strategy, not a workload",
                    "model: {...}, training: {...} and data_parallel: {...} at the top level",
                ),
                scenario.source,
            )
        spec = scenario.data_parallel or DataParallelSpec(sync=cls.default_sync)
        strategy = cls(spec, scenario, topology)
        try:
            strategy.check()
            problems = strategy.written_key_problems()
            if problems:
                raise ScenarioError(problems)
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
        strategy.enforce_work_limit()
        return strategy

    @property
    def channels(self) -> int | str:
        """Channels of the data-parallel collectives: ``data_parallel.allreduce.channels``,
        else ``network.channels`` (a count or ``auto``)."""
        own = self.scenario.data_parallel and self.scenario.data_parallel.allreduce.channels
        return own or self.scenario.network.channels

    def collectives_ran(
        self, calls: Sequence[Any], channels: int | str | None = None, model: str = "flow"
    ) -> CollectivesRan | None:
        """What ``calls`` (one iteration's collectives of one kind of communicator, run in
        network ``model``) run as: the algorithm and protocol asked for, NCCL's channels,
        the slices played and the ``algorithm/protocol`` each resolves to (counted); None
        without calls."""
        from ..collectives import channel_count, slices
        from ..metrics.training import CollectivesRan

        live = [c for c in calls if c.n > 1]
        if not live:
            return None
        channels = self.channels if channels is None else channels
        chosen: dict[str, int] = {}
        played = counts = 0
        for call in live:
            parts = slices(call, self.topology, channels, model)
            name = "/".join(x for x in (parts[0].algorithm, parts[0].protocol) if x)
            chosen[name] = chosen.get(name, 0) + 1
            counts = max(counts, channel_count(call, self.topology, channels))
            played = max(played, len(parts))
        first = live[0]
        return CollectivesRan(
            algorithm=first.algorithm,
            protocol=first.protocol or "none",
            channels=counts,
            chosen=dict(sorted(chosen.items())),
            channels_played=played if played < counts else None,
        )

    def load_training(self) -> None:
        """Set ``self.train`` (the training section) and ``self.model`` (built from the model section)."""
        from ..model import presets as models

        scenario = self.scenario
        assert scenario.model is not None and scenario.training is not None
        self.train = scenario.training
        self.model = models.build_model(scenario.model, path="model")
        if self.train.offload is not None and not self.supports_offload:
            raise ScenarioError(
                Problem(
                    "training.offload",
                    f"offload to CPU memory is modelled by the pipeline (3D hybrid) strategy, "
                    f"not by {self.name}",
                    "no training.offload, or the hybrid: zero.stage 0 or 1 (any pp, tp, cp)",
                )
            )
        zero = scenario.zero
        if (
            zero is not None
            and zero.overlap_param_gather
            and not self.supports_param_gather_overlap
        ):
            raise ScenarioError(
                Problem(
                    "zero.overlap_param_gather",
                    f"the overlapped parameter all-gather of Megatron-Core's distributed "
                    f"optimizer is modelled by the pipeline (3D hybrid) strategy, not by {self.name}",
                    "leave it out, or a pipeline: section (the hybrid with zero.stage 1)",
                )
            )

    def check_batch_covers(self, workers: int) -> None:
        """ScenarioError at ``training.global_batch`` if it gives a worker no sample."""
        if self.train.global_batch < workers:
            raise ScenarioError(
                Problem(
                    "training.global_batch",
                    f"global batch {self.train.global_batch} is smaller than the {workers} workers",
                    f">= {workers} (one sample per worker at least)",
                )
            )

    def memory_plan(self) -> dict[str, Any] | None:
        """Per device, a :class:`clustersim.model.memory.DeviceMemory` (bytes at the iteration's peak),
        known before the run; None if the strategy does not model memory.  The api puts it
        in summary.json under ``memory`` and ``--strict-memory`` refuses runs that do not fit."""
        return None


def load_plugins() -> None:
    """Import the built-in strategies and every ``clustersim.strategies`` entry point, once
    (the registry does it on its first lookup)."""
    Strategy.registry.load()


def registered_strategies() -> dict[str, type[Strategy]]:
    """Every registered strategy by name, sorted by name."""
    load_plugins()
    return Strategy.registry.entries()


TRAINING_STRATEGIES = {"allreduce": "data_parallel", "ps": "parameter_server"}
"""Training scenarios without pipeline or tensor parallelism and without ZeRO: the
strategy for each ``data_parallel.sync``.  With ``parallelism.pp > 1``, ``parallelism.tp
> 1``, ``parallelism.cp > 1``, ``parallelism.ep > 1`` or a ``pipeline`` section the strategy
is ``pipeline`` (3D hybrid), also with ``training.offload`` unless ZeRO shards gradients
(stage >= 2); otherwise with ``zero.stage`` >= 1 it is ``zero``."""


def training_strategy_name(scenario: Scenario) -> str:
    """The name of the strategy that runs the training ``scenario``."""
    sync = scenario.data_parallel.sync if scenario.data_parallel is not None else "allreduce"
    parallelism = scenario.parallelism
    pp = parallelism.pp if parallelism is not None else 1
    tp = parallelism.tp if parallelism is not None else 1
    cp = parallelism.cp if parallelism is not None else 1
    ep = parallelism.ep if parallelism is not None else 1
    if pp > 1 or tp > 1 or cp > 1 or ep > 1 or scenario.pipeline is not None:
        return "pipeline"
    zero = scenario.zero.level if scenario.zero is not None else 0
    if scenario.training is not None and scenario.training.offload is not None and zero < 2:
        return "pipeline"
    if scenario.zero is not None and scenario.zero.level >= 1:
        return "zero"
    return TRAINING_STRATEGIES[sync]


def strategy_for_scenario(scenario: Scenario) -> type[Strategy]:
    """The strategy that runs ``scenario``: the one whose :attr:`Strategy.section` it has
    (``jobs``), else by its workload key, else by its training sections."""
    for cls in registered_strategies().values():
        if cls.section is not None and getattr(scenario, cls.section, None) is not None:
            return cls
    if scenario.workload is not None:
        return strategy_for(scenario.workload, scenario.source)
    name = training_strategy_name(scenario)
    strategies = registered_strategies()
    if name not in strategies:
        raise ScenarioError(
            Problem("", f"no strategy '{name}' is installed for this training scenario"),
            scenario.source,
        )
    return strategies[name]


def strategy_for(workload: Any, source: str = "") -> type[Strategy]:
    """The strategy that owns the ``workload:`` mapping of a scenario."""
    strategies = {
        name: cls for name, cls in registered_strategies().items() if cls.owns_workload_key()
    }
    allowed = ", ".join(strategies)
    if not isinstance(workload, dict) or not workload:
        raise ScenarioError(
            Problem("workload", "must be a mapping naming one workload kind", allowed), source
        )
    owners = [key for key in workload if key in strategies]
    if len(owners) == 1:
        return strategies[owners[0]]
    if not owners:
        from ..errors import did_you_mean

        keys = ", ".join(map(str, workload))
        hint = "".join(did_you_mean(str(k), strategies) for k in workload)
        raise ScenarioError(
            Problem("workload", f"no known workload kind among its keys ({keys});{hint}", allowed),
            source,
        )
    raise ScenarioError(
        Problem(
            "workload",
            f"names several workload kinds ({', '.join(owners)}); give exactly one",
            allowed,
        ),
        source,
    )
