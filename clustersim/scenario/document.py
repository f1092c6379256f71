"""The whole scenario: :class:`Scenario`, its sections, and :func:`parse_scenario`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PrivateAttr, model_validator

from clustersim.budget import DEFAULT_MAX_EVENTS
from clustersim.errors import Problem, ScenarioError, join_path

from .checkpoint import CheckpointSpec
from .cluster import ClusterSpec
from .devices import MissingPeak, needs_precision, price_devices
from .failures import FailureSpec, RecoverySpec
from .fields import MAX_SEED, Count, Invalid, MemoryBytes, Seed, _Spec
from .jobs import JOB_SECTIONS, JobSpec, job_names_problems
from .model import ModelSpec
from .network import NetworkSpec
from .plugins import check_plugins
from .presets import scenario_folder
from .stragglers import StragglerSpec
from .training import (
    DataParallelSpec,
    ParallelismSpec,
    PipelineSpec,
    TrainingSpec,
    ZeroSpec,
)
from .validation import _describe, validate_model


class EngineSpec(_Spec):
    """How much work and memory a run may take (:mod:`clustersim.budget`)."""

    max_events: Count = DEFAULT_MAX_EVENTS
    """Most events (transfers + timeline records) the run may take: a run estimated above it
    is refused before it starts, with the estimate (``--max-events N`` overrides it)."""
    max_memory: MemoryBytes | None = None
    """Most bytes of memory the simulator process may need: a run whose peak is estimated
    above it is refused before it starts (``--max-memory SIZE`` overrides it); None, the
    default: 80% of this machine's memory (:func:`clustersim.budget.default_max_memory`)."""


class Scenario(_Spec):
    """A whole scenario: the cluster, its stragglers, and the workload to run on it."""

    name: Annotated[str, Field(min_length=1)]
    """Name of the scenario."""
    seed: Seed = 0
    """Seed of every random choice, 0 .. 2**32 - 1; same seed, same result."""
    description: str = ""
    """What the scenario shows."""
    cluster: ClusterSpec
    """The hardware."""
    stragglers: list[StragglerSpec] = []
    """Slow devices and degraded links."""
    failures: list[FailureSpec] = []
    """Components and links that fail: at set times, or at random with a mean time between
    failures."""
    recovery: RecoverySpec | None = None
    """How a training job recovers from a failure (restart time, elastic)."""
    checkpoint: CheckpointSpec | None = None
    """Periodic checkpoints of the training state, and the storage they go to."""
    network: NetworkSpec = NetworkSpec()
    """How communication is priced (flow-level by default)."""
    model: ModelSpec | None = None
    """The model trained (training scenarios)."""
    training: TrainingSpec | None = None
    """Batch, iterations, precision, optimizer (training scenarios)."""
    data_parallel: DataParallelSpec | None = None
    """Gradient synchronisation (training scenarios; default all-reduce over every GPU)."""
    parallelism: ParallelismSpec | None = None
    """Split of the workers into data-parallel and pipeline groups (training scenarios)."""
    pipeline: PipelineSpec | None = None
    """Pipeline schedule (training scenarios with parallelism.pp > 1)."""
    zero: ZeroSpec | None = None
    """ZeRO stage / FSDP (training scenarios)."""
    workload: dict[str, Any] | None = Field(None, min_length=1)
    """What runs, for scenarios that are not training: checked by the workload plugin named
    by its key (program, collective, trace)."""
    engine: EngineSpec = EngineSpec()
    """Limits of the run (how many events it may take)."""
    jobs: list[JobSpec] | None = Field(None, min_length=1)
    """Several workloads sharing the cluster, each with its own sections, start time and
    devices (:mod:`clustersim.scenario.jobs`); instead of a top-level workload or training."""

    @model_validator(mode="after")
    def _workload_or_training(self) -> Scenario:
        if self.jobs is not None:
            return self._jobs_alone()
        training = {"model": self.model, "training": self.training}
        if self.workload is not None:
            given = [k for k, v in training.items() if v is not None]
            sections = (self.data_parallel, self.pipeline, self.parallelism, self.zero)
            if given or any(x is not None for x in sections):
                raise Invalid(
                    Problem(
                        "workload",
                        "a scenario runs either a workload or training (model, training), not both",
                    )
                )
            for key in ("checkpoint", "recovery"):
                if getattr(self, key) is not None:
                    message = f"{key} is for training scenarios (model, training), not a workload"
                    raise Invalid(Problem(key, message, "remove it, or train a model"))
            return self
        missing = [k for k, v in training.items() if v is None]
        if len(missing) == 2:
            raise Invalid(
                Problem(
                    "",
                    "nothing to run: give workload (program, collective, trace) or model and training",
                    "workload: {...} or model: {...} with training: {...}",
                )
            )
        if missing:
            raise Invalid(Problem(missing[0], "required key missing for a training scenario"))
        return self

    @model_validator(mode="after")
    def _priced_devices(self) -> Scenario:
        """Devices with ``peaks`` and no ``flops`` take the peak (and curve) of the training
        precision: the cluster is replaced by its priced copy (a validator's one change to its
        own model; the scenario is frozen once validated)."""
        precision, path = self._precision()
        try:
            priced = price_devices(self.cluster, precision)
        except MissingPeak as missing:
            raise Invalid(missing.problem(path)) from None
        if priced is not self.cluster:
            self.__dict__["cluster"] = priced
        return self

    def _precision(self) -> tuple[str | None, str]:
        """The precision devices are priced at and the key that chose it: the training's, the
        jobs' one (mixed ones refused when a device is priced by precision), or None."""
        if self.jobs is None:
            if self.training is None:
                return None, ""
            return self.training.precision, "training.precision"
        chosen = [
            (join_path("jobs", i, "training", "precision"), job.training.precision)
            for i, job in enumerate(self.jobs)
            if job.training is not None
        ]
        if len({precision for _, precision in chosen}) > 1:
            device = needs_precision(self.cluster)
            if device:
                (first_path, first), *_ = chosen
                path, other = next((p, x) for p, x in chosen if x != first)
                message = (
                    f"the jobs train at {first} ({first_path}) and {other}: the GPUs at "
                    f"{device} are priced by precision (peaks, no flops), one price per cluster"
                )
                raise Invalid(Problem(path, message, f"{first} in every job, or {device}.flops"))
        return (chosen[0][1], chosen[0][0]) if chosen else (None, "")

    def _jobs_alone(self) -> Scenario:
        """With ``jobs``: no workload or training section at the top level, unique names."""
        assert self.jobs is not None
        given = [key for key in JOB_SECTIONS if getattr(self, key) is not None]
        problems = job_names_problems(self.jobs)
        for key in ("checkpoint", "recovery"):
            if getattr(self, key) is not None:
                message = f"{key} is for a single training job; a scenario with jobs has none yet"
                allowed = (
                    "remove it (failures of links, NICs and switches still apply to every job)"
                )
                problems.append(Problem(key, message, allowed))
        if given:
            problems.insert(
                0,
                Problem(
                    given[0],
                    "a scenario with jobs holds its workloads in its jobs, not at the top level",
                    f"move {given[0]} into a job (jobs[i].{given[0]})",
                ),
            )
        if problems:
            raise Invalid(problems)
        return self

    def job_scenario(self, index: int) -> Scenario:
        """The single-job scenario of ``jobs[index]``: this one with the job's sections at
        the top level and no ``jobs`` (the cluster, stragglers, network, engine and seed
        shared)."""
        assert self.jobs is not None
        update: dict[str, object] = dict(self.jobs[index].sections())
        update["jobs"] = None
        single = self.model_copy(update=update)
        single._source = self._source
        return single

    _source: str = PrivateAttr("")
    _writes_outputs: bool = PrivateAttr(False)

    @property
    def source(self) -> str:
        """The file the scenario came from ("" if none)."""
        return self._source

    @property
    def writes_outputs(self) -> bool:
        """Whether the run will write its run folder (``clustersim run``), whose texts are
        built in memory: the memory estimate counts them (:meth:`with_limits`)."""
        return self._writes_outputs

    def with_max_events(self, max_events: int | None) -> Scenario:
        """This scenario with ``engine.max_events`` set to ``max_events`` (itself if None):
        what ``--max-events N`` does."""
        return self.with_limits(max_events)

    def with_limits(
        self,
        max_events: int | None,
        max_memory: float | None = None,
        writes_outputs: bool | None = None,
    ) -> Scenario:
        """This scenario with ``engine.max_events`` and ``engine.max_memory`` (bytes) set to
        the ones given, and :attr:`writes_outputs` (each kept if None; itself if nothing
        changes): what ``--max-events N`` and ``--max-memory SIZE`` do."""
        given = {"max_events": max_events, "max_memory": max_memory}
        update = {
            key: value
            for key, value in given.items()
            if value is not None and value != getattr(self.engine, key)
        }
        outputs = self._writes_outputs if writes_outputs is None else writes_outputs
        if not update and outputs == self._writes_outputs:
            return self
        engine = self.engine.model_copy(update=update) if update else self.engine
        changed = self.model_copy(update={"engine": engine})
        changed._source = self._source
        changed._writes_outputs = outputs
        return changed


def with_seed(scenario: Scenario, seed: int, path: str = "--seed") -> Scenario:
    """``scenario`` with its seed replaced by ``seed``; a ScenarioError at ``path`` (the flag
    or key that gave it) unless ``seed`` is a whole number from 0 to :data:`MAX_SEED`."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ScenarioError(
            Problem(path, f"seed {_describe(seed)} is out of range", f"0 .. {MAX_SEED}")
        )
    copy = scenario.model_copy(update={"seed": seed})
    copy._source = scenario.source
    return copy


CANDIDATES_KEY = "clusters"
"""The top-level key of a candidates file of ``clustersim choose`` (beside ``workload:``
naming a file): no scenario has it."""


def is_candidates_document(doc: object) -> bool:
    """Whether a YAML document is a candidates file of ``clustersim choose`` (top-level
    ``clusters:``, and ``workload:`` naming a file), not a scenario."""
    return isinstance(doc, dict) and CANDIDATES_KEY in doc and isinstance(doc.get("workload"), str)


def parse_scenario(doc: object, source: str = "") -> Scenario:
    """Validate a loaded document; raise :class:`ScenarioError` listing every problem."""
    if not isinstance(doc, dict):
        got = "an empty document" if doc is None else _describe(doc)
        raise ScenarioError(
            Problem("", f"a scenario must be a mapping of keys to values, got {got}"), source
        )
    if is_candidates_document(doc):
        raise ScenarioError(
            Problem(
                CANDIDATES_KEY,
                "this is a candidates file of clustersim choose (clusters to compare for a "
                "workload), not a scenario",
                "clustersim choose FILE",
            ),
            source,
        )
    context = {"base_dir": scenario_folder(source)}
    scenario = validate_model(Scenario, doc, source=source, context=context)
    check_plugins(scenario, source)
    scenario._source = source
    return scenario
