"""Public API: load a scenario, simulate it, write its outputs.

```python
import clustersim
result = clustersim.simulate("scenarios/validation/d1_one_gpu_aggregates.yaml")
result.summary["makespan_s"]        # 0.06
result.typed_summary.makespan_s     # the same, typed (clustersim.metrics.Summary)
result.timeline()                   # pandas DataFrame of the records
result.write("reports/d1")          # summary.json, timeline.csv, links.csv
```
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from .budget import MemoryEstimate, WorkEstimate, either, is_long, long_work_notice
from .devices import stragglers_of
from .engine import Simulation
from .errors import ScenarioError, SimulationError, join_path
from .host import gc_paused
from .metrics import (
    AutoChoice,
    DeviceTimes,
    EngineCounters,
    GoodputSummary,
    LinkFailureCounters,
    LinkLoad,
    MemoryBlock,
    RunHeader,
    StrategySummary,
    Summary,
    TrainingSummary,
    UntypedSummary,
    UsageSummary,
    canonical_json,
    device_breakdown,
    usage_summary,
)
from .metrics.link_table import build_link_table
from .metrics.transport import tcp_summary
from .network.flow_level import link_columns, release_link_state
from .outputs.atomic import atomic_file, write_atomic  # noqa: F401  (re-exported, cli uses them)
from .outputs.links import LINK_COLUMNS  # noqa: F401  (re-exported)
from .outputs.modes import OutputModes
from .outputs.run_folder import write_run_folder
from .outputs.trace import nodes_of
from .records import Record, timeline_frame
from .resilience import job_length, outlook
from .scenario import Scenario, load_scenario
from .scenario.node_groups import mean_gpu_hour_price
from .scenario.plugins import check_plugins
from .strategies import Strategy, strategy_for_scenario
from .strategies.jobs.summary import JobsSummary
from .topology import Topology, attach_storage, build_topology
from .topology.failures import (
    ResolvedFailures,
    play_link_failures,
    played_device_failures,
    played_link_failures,
    resolve_failures,
)
from .version import __version__

BUSIEST_LINKS = 10
"""How many links summary.json lists under ``busiest_links``."""


@dataclass
class Prepared:
    """A scenario checked against its topology, ready to run."""

    scenario: Scenario
    topology: Topology
    strategy: Strategy
    failures: ResolvedFailures | None = None
    """The ``failures:`` and ``recovery:`` sections resolved against the topology."""

    @property
    def work(self) -> WorkEstimate | None:
        """The run's estimated work (None if its strategy cannot say); within the limits."""
        return self.strategy.enforce_work_limit()

    @property
    def memory(self) -> MemoryEstimate:
        """The simulator's estimated peak memory for the run (the run folder included when
        the scenario :attr:`~clustersim.scenario.Scenario.writes_outputs`); within the limit."""
        self.work  # noqa: B018  (refuses over either limit)
        return self.strategy.estimate_memory(self.scenario.writes_outputs)


@gc_paused()
def prepare(
    scenario: Scenario | str | os.PathLike[str],
    topology: Topology | None = None,
    *,
    max_events: int | None = None,
    max_memory: float | None = None,
    outputs: bool = False,
) -> Prepared:
    """Load (if a path), build the topology and validate the workload against it.

    ``topology``: the scenario's cluster already built (callers checking many
    variants of one cluster, like ``clustersim plan``, build it once).
    ``max_events`` overrides the scenario's ``engine.max_events``: a run whose estimated
    work is over the limit is refused here (:class:`clustersim.budget.WorkLimitError`).
    ``max_memory`` (bytes) overrides ``engine.max_memory``: a run whose estimated peak
    memory is over it is refused here too (:class:`clustersim.budget.MemoryLimitError`),
    counting the run folder built in memory when ``outputs`` (``clustersim run``).
    The garbage collector is paused meanwhile, as in :func:`simulate` (the estimates
    allocate routes and schedules by the hundred thousand).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)  # its plugin keys checked as it is parsed
    else:  # built or changed in code: check its plugin keys here
        check_plugins(scenario, scenario.source)
    scenario = scenario.with_limits(max_events, max_memory, outputs or None)
    if topology is None:
        try:
            topology = scenario_topology(scenario)
        except Exception as exc:
            if isinstance(exc, ScenarioError):
                raise exc.with_source(scenario.source) from None
            raise
    strategy = strategy_for_scenario(scenario).from_scenario(scenario, topology)
    if scenario.stragglers:
        stragglers_of(scenario, topology)  # every glob matches (errors name the file)
    failures = None
    if scenario.failures or scenario.recovery is not None:
        workers = getattr(strategy, "workers", None)
        # errors name the file
        failures = resolve_failures(scenario, topology, workers, strategy.loses_state)
        strategy.take_failures(played_device_failures(failures))
        try:
            strategy.take_link_failures(played_link_failures(failures))
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
    if scenario.training is not None and scenario.training.tokens is not None:
        job_length(scenario)  # tokens need a sequence length
    outlook.check(scenario, strategy, failures)
    return Prepared(scenario, topology, strategy, failures)


def scenario_topology(scenario: Scenario) -> Topology:
    """The scenario's cluster, with the checkpoint storage attached when ``checkpoint.storage``
    is given (:func:`clustersim.topology.attach_storage`); ScenarioError at the key path."""
    topology = build_topology(scenario.cluster)
    checkpoint = scenario.checkpoint
    if checkpoint is not None and checkpoint.storage is not None:
        topology = attach_storage(topology, checkpoint.storage)
    return topology


@dataclass
class Result:
    """Everything one run produced."""

    scenario: Scenario
    topology: Topology
    records: list[Record]
    links: Sequence[dict[str, Any]]
    """Every link that carried traffic, busiest first (see :func:`metrics.link_table`): a
    :class:`~clustersim.metrics.link_table.LinkTable`, read like a list of rows."""
    typed_summary: Summary
    """The summary as typed parts (:class:`clustersim.metrics.Summary`)."""

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The summary as summary.json's keys (a dict, built once from ``typed_summary``)."""
        return self.typed_summary.as_dict()

    @property
    def makespan_s(self) -> float:
        """Simulated time (s) when the last operation ended."""
        return self.typed_summary.header.makespan_s

    def timeline(self):  # -> pandas.DataFrame
        """The records as a DataFrame with the timeline.csv columns."""
        return timeline_frame(self.records)

    def summary_json(self) -> str:
        """The text of summary.json."""
        return canonical_json(self.summary)

    @gc_paused()
    def write(
        self,
        out_dir: str | os.PathLike[str],
        flag: str = "output folder",
        resolved_scenario: str | None = None,
        modes: OutputModes | None = None,
    ) -> list[Path]:
        """Replace the folder ``out_dir`` by one holding summary.json, timeline.csv, links.csv
        and trace.json, and gantt.png and gantt.svg for a training workload; return their
        paths (:func:`clustersim.outputs.run_folder.write_run_folder`: the folder is
        replaced as a unit, and one holding other files than clustersim's is refused;
        ``flag`` names ``out_dir`` in that error).  ``resolved_scenario``: the text of
        scenario.resolved.yaml (the scenario as run), written too when given.

        ``modes`` (:class:`clustersim.outputs.modes.OutputModes`): the trace's and the
        timeline's rows, the timeline's format, summary.json's per-device entries; by
        default a cluster of 4,096 devices or more is written folded (one replica's
        records, the per-device entries' extremes plus ``devices.csv``).  The garbage
        collector is paused while the files are made, as in :func:`simulate`."""
        return write_run_folder(
            out_dir,
            self.summary,
            self.records,
            self.links,
            self.processes(),
            flag,
            resolved_scenario,
            modes,
            len(self.topology.devices),
        )

    def processes(self) -> dict[str, str | None]:
        """Device -> its process in trace.json: its node, or ``job NAME`` in a multi-job run."""
        part = self.typed_summary.strategy
        if isinstance(part, JobsSummary):
            return {device: f"job {name}" for device, name in part.job_of_device().items()}
        return nodes_of(self.topology)


@gc_paused()
def simulate(
    scenario: Scenario | str | os.PathLike[str],
    *,
    progress: Callable[[float], None] | None = None,
    check: bool = False,
    strict_memory: bool = False,
    max_events: int | None = None,
    goodput_progress: Callable[[int, int], None] | None = None,
    max_memory: float | None = None,
    outputs: bool = False,
    announce: Callable[[str], None] | None = None,
    topology: Topology | None = None,
) -> Result:
    """Run ``scenario`` (a Scenario or a path to its YAML) and return its Result.

    ``topology``: the scenario's cluster already built (:func:`scenario_topology`; callers
    running many variants of one cluster, like ``clustersim plan``, build it once).

    Its work is estimated first and refused over the limit, ``max_events`` or else the
    scenario's ``engine.max_events`` (:class:`clustersim.budget.WorkLimitError`, before
    anything runs; see :mod:`clustersim.budget`); so is its peak memory, over
    ``max_memory`` (bytes) or else ``engine.max_memory`` (default: 80% of this machine's),
    counting the run folder too when ``outputs`` says it will be written
    (:class:`clustersim.budget.MemoryLimitError`).  A run within the limits but estimated
    longer than :data:`~clustersim.budget.NOTICE_AFTER_S` of wall time is announced before
    it starts: ``announce(text)`` with :func:`long_notice`'s text.

    Training strategies that model memory put a ``memory`` block in the
    summary (per device: weights, gradients, optimizer states, activations,
    buffers, peak, capacity, ``fits``).  ``strict_memory=True`` refuses a run
    that does not fit, before simulating (ScenarioError).

    A run that ends with work still waiting (a deadlock) raises SimulationError
    naming what waits on what.  ``check=True`` (or the environment variable
    ``CLUSTERSIM_CHECK=1``) also verifies the invariants of
    :mod:`clustersim.invariants` and raises SimulationError listing violations.

    Python's cyclic garbage collector is paused from the start to the summary
    (:func:`clustersim.host.gc_paused`): a run's records (tuples of a class, which the
    collector never stops tracking) number in the millions, and each collection while the
    summary is built scanned them all again (a fifth of the time of a large run).
    """
    from .invariants import Checker, Watch, checking_requested

    prepared = prepare(
        scenario, topology, max_events=max_events, max_memory=max_memory, outputs=outputs
    )
    if announce is not None and is_long(prepared.work):
        announce(long_notice(prepared))
    memory = memory_block(prepared)
    if strict_memory and memory is not None and not memory.fits:
        from .errors import Problem, ScenarioError
        from .model.memory import over_capacity_message

        raise ScenarioError(
            Problem(
                "",
                over_capacity_message(memory) + " (--strict-memory)",
                "more tensor/pipeline parallelism, a higher zero stage, recomputation, "
                "smaller micro-batches or devices with more memory",
            ),
            prepared.scenario.source,
        )
    sim = Simulation.from_scenario(prepared.scenario, prepared.topology)
    watch = Checker(sim) if check or checking_requested() else Watch(sim)
    try:
        prepared.strategy.start(sim)
        play_link_failures(sim, prepared.failures)
        sim.run(progress=progress)
        watch.raise_if_deadlocked(prepared.strategy)
        if isinstance(watch, Checker):
            watch.raise_if_violated(prepared.strategy)
    finally:
        watch.release()  # no cycle through the wrappers: the run is freed with its Result
    return _result(prepared, sim, memory, goodput_progress)


def long_notice(prepared: Prepared) -> str:
    """What to say before a run estimated longer than
    :data:`~clustersim.budget.NOTICE_AFTER_S` starts: its time, its events and what would
    shorten it (:meth:`Strategy.shorter <clustersim.strategies.Strategy.shorter>`); empty
    for a shorter run (:func:`clustersim.budget.long_work_notice`; the strategy is asked
    only for a long one)."""
    if not is_long(prepared.work):
        return ""
    return long_work_notice(prepared.work, either(prepared.strategy.shorter()))


def auto_choices(prepared: Prepared) -> dict[str, AutoChoice] | None:
    """The summary's ``auto_choices`` block of a prepared run: what its strategy chose for
    the keys the scenario left to it, by key path (None: nothing chosen;
    :mod:`clustersim.strategies.auto`)."""
    chosen = getattr(prepared.strategy, "auto_choices", None)
    return dict(chosen) if chosen else None


def memory_block(prepared: Prepared) -> MemoryBlock | None:
    """The summary's ``memory`` block of a prepared run (None if its strategy models no
    memory)."""
    from .model.memory import memory_summary, with_settings

    plan = prepared.strategy.memory_plan() if hasattr(prepared.strategy, "memory_plan") else None
    if not plan:
        return None
    training = getattr(prepared.scenario, "training", None)
    if training is not None:
        plan = with_settings(plan, training.memory)
    return memory_summary(plan)


def _result(
    prepared: Prepared,
    sim: Simulation,
    memory: MemoryBlock | None = None,
    goodput_progress: Callable[[int, int], None] | None = None,
) -> Result:
    """The run's :class:`Result`: its link table and its summary, built from the records
    (with the garbage collector paused by :func:`simulate`, its only caller)."""
    scenario, topology = prepared.scenario, prepared.topology
    records = sim.records
    makespan = max((r.end_s for r in records), default=0.0)
    columns = _links_stood_in(link_columns(sim.network), prepared.strategy.link_stand_ins())
    release_link_state(sim.network)  # the link table and the summary are built beside less
    links = build_link_table(*columns, topology.links, makespan)
    part = prepared.strategy.summarize(sim)
    devices = _stood_in(
        device_breakdown(records, makespan, list(topology.devices)),
        prepared.strategy.stand_ins(),
        topology,
    )
    strategy_part = part if isinstance(part, StrategySummary) else UntypedSummary(dict(part))
    summary = Summary(
        RunHeader(scenario.name, scenario.seed, prepared.strategy.name, __version__, makespan),
        strategy_part,
        _usage(prepared, strategy_part),
        _goodput(prepared, strategy_part, goodput_progress),
        auto_choices(prepared),
        memory,
        _device_times(devices, topology),
        [LinkLoad(**row) for row in links[:BUSIEST_LINKS]],
        EngineCounters(
            len(records),
            sim.network.flows_completed,
            sim.network.recomputations,
            LinkFailureCounters.of(getattr(sim.network, "failures", None)),
            *_estimates(prepared),
        ),
        tcp=tcp_summary(topology, columns[0], columns[1], makespan),
        gpu_types=topology.describe().get("gpu_types"),
    )
    plain = summary.as_summary_dict()
    _check_finite(plain)
    result = Result(scenario, topology, records, links, summary)
    result.__dict__["summary"] = plain  # the cached property, built once (2 M values at scale)
    return result


def _links_stood_in(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], stand_ins: dict[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The link columns (indices, bytes, busy seconds, peak flows: ``link_columns``) with each
    link of ``stand_ins`` given the row of the link standing for it (none when that one
    was not used), in order of index."""
    if not stand_ins:
        return columns
    index, nbytes, busy, peak = columns
    rows = dict(zip(index.tolist(), zip(nbytes.tolist(), busy.tolist(), peak.tolist())))
    for link, standing in stand_ins.items():
        row = rows.get(standing)
        if row is None:
            rows.pop(link, None)
        else:
            rows[link] = row
    keys = sorted(rows)
    n = len(keys)
    return (
        np.asarray(keys, dtype=np.int64),
        np.fromiter((rows[k][0] for k in keys), float, n),
        np.fromiter((rows[k][1] for k in keys), float, n),
        np.fromiter((rows[k][2] for k in keys), np.int64, n),
    )


def _stood_in(
    devices: dict[str, dict[str, float]], stand_ins: dict[str, str], topology: Topology
) -> dict[str, dict[str, float]]:
    """``devices`` with each device not played given the times of the device standing for it
    (:meth:`~clustersim.strategies.base.Strategy.stand_ins`; the data-parallel collectives
    it joined are in them too), in the topology's order."""
    if not stand_ins:
        return devices
    out = {}
    for name in topology.devices:
        row = devices.get(stand_ins.get(name, name))
        if row is not None:
            out[name] = row
    return out


def _device_times(
    devices: dict[str, dict[str, float]], topology: Topology
) -> dict[str, DeviceTimes]:
    """Each device's :class:`DeviceTimes`, one object for devices with equal times (the
    replicas a one-replica run stands for: 131,072 rows of a handful of kinds); with its
    type when the cluster's GPUs are of several types."""
    mixed = len(topology.gpu_types()) > 1
    known = topology.devices
    made: dict[tuple[Any, ...], DeviceTimes] = {}
    out = {}
    for name, row in devices.items():
        kind = (known[name].type or None) if mixed and name in known else None
        key = (*row.values(), kind)
        found = made.get(key)
        if found is None:
            found = made[key] = DeviceTimes(**row, type=kind)
        out[name] = found
    return out


def _estimates(prepared: Prepared) -> tuple[float | None, float]:
    """The summary's ``estimated_events`` and ``estimated_memory_bytes`` (without the run
    folder, so the summary does not depend on the command that ran it)."""
    work = prepared.strategy.enforce_work_limit(False)
    memory = float(round(prepared.strategy.estimate_memory(outputs=False).total))
    return (work.events if work is not None else None), memory


def _usage(prepared: Prepared, part: StrategySummary) -> UsageSummary | None:
    """MFU, tokens/s, time to train, GPU-hours and cost of a training run
    (:mod:`clustersim.metrics.usage`); the job's length from :func:`job_length`."""
    scenario = prepared.scenario
    if not isinstance(part, TrainingSummary) or scenario.training is None:
        return None
    from .model.presets import build_model

    shape = build_model(scenario.model).transformer
    length = job_length(scenario)
    workers = getattr(part, "workers", None) or []
    devices = prepared.topology.devices
    peaks = [devices[name].flops_per_s for name in workers if name in devices]
    return usage_summary(
        model_tflops_per_gpu=getattr(part, "model_tflops_per_gpu", None),
        peak_flops_per_gpu=sum(peaks) / len(peaks) if peaks else None,
        samples_per_s=part.times.throughput_samples_per_s,
        seq=shape.seq if shape is not None else None,
        job_iterations=length.iterations if scenario.training.tokens is not None else None,
        duration_s=length.duration_s,
        iteration_time_s=part.times.iteration_time_s,
        gpus=part.job_workers(),
        gpu_hour_price=mean_gpu_hour_price(scenario.cluster),
    )


def _goodput(
    prepared: Prepared, part: StrategySummary, progress: Callable[[int, int], None] | None
) -> GoodputSummary | None:
    """The whole job's goodput keys of a training run that asks for them
    (:mod:`clustersim.resilience.outlook`)."""
    if not isinstance(part, TrainingSummary):
        return None
    scenario = prepared.scenario
    return outlook.goodput_of(
        scenario, prepared.strategy, prepared.topology, prepared.failures, part.times, progress
    )


def _check_finite(value: Any, path: str = "") -> None:
    """A SimulationError naming the summary key whose number overflowed (inf or NaN).

    JSON's encoder refuses NaN and infinities in C, fast; only a summary it refuses is
    walked in Python for the key's path."""
    if not path:
        try:  # piece by piece: a whole summary at scale is a string of a hundred megabytes
            for piece in _pieces(value, 2):
                if not _finite_rows(piece):
                    json.dumps(piece, allow_nan=False, default=str)
        except ValueError:
            pass
        else:
            return
    _find_nonfinite(value, path)


_CHECKED_TOGETHER = 4096
"""The values of a dict larger than this are checked this many at a time (one list each):
a 131,072-GPU summary has per-device dicts of that many entries, and the encoder's cost
per call was most of the check."""


def _pieces(value: Any, depth: int) -> Any:
    """``value``, or the values of a dict (and of theirs, ``depth`` levels down) one by one;
    a dict of more than :data:`_CHECKED_TOGETHER` entries as lists of that many values."""
    if not (depth and isinstance(value, dict)):
        yield value
    elif len(value) > _CHECKED_TOGETHER:
        values = list(value.values())
        for start in range(0, len(values), _CHECKED_TOGETHER):
            yield values[start : start + _CHECKED_TOGETHER]
    else:
        for item in value.values():
            yield from _pieces(item, depth - 1)


def _finite_rows(piece: Any) -> bool:
    """True when ``piece`` is a list or dict of flat dicts of numbers, all finite (the
    per-device rows of a 131,072-GPU summary: 2 M numbers), checked in numpy at a tenth of
    the encoder's cost; False for any other piece or a number not finite (the encoder
    then decides, as for every piece before)."""
    if isinstance(piece, dict):
        piece = piece.values()
    elif not isinstance(piece, list):
        return False
    try:
        numbers = np.fromiter(chain.from_iterable(map(dict.values, piece)), float)
    except (TypeError, ValueError, OverflowError):
        return False
    return bool(np.isfinite(numbers).all())


def _find_nonfinite(value: Any, path: str = "") -> None:
    """:func:`_check_finite` in Python, naming the path."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SimulationError(
                f"summary value {path} overflowed ({value!r}): the inputs are too large or small "
                "for the result to be a number"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _find_nonfinite(item, join_path(path, str(key)))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _find_nonfinite(item, join_path(path, index))


def json_schema() -> dict[str, Any]:
    """JSON Schema of scenario files, with the workload of every registered strategy."""
    from .scenario import scenario_json_schema
    from .scenario.docstrings import described_json_schema
    from .strategies import registered_strategies

    workloads = {
        name: described_json_schema(cls.config_model, by_alias=True)
        for name, cls in registered_strategies().items()
        if cls.owns_workload_key()
    }
    return scenario_json_schema(workloads)
