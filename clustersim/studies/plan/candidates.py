"""The candidates of a plan: each configuration's scenario document, checked as a run
would check it.

Every candidate document is checked as :func:`clustersim.api.prepare` checks
it (its strategy built against the topology); those rejected are skipped and
counted by reason.  Enumeration simulates nothing and is deterministic.
Simulations run in a process pool (:mod:`.runs`); results come back in enumeration
order, and the ranking breaks ties by that order.

```python
from clustersim.studies import plan
options = plan.PlanOptions(devices=16)
found = plan.enumerate_candidates(plan.load_training_document("s.yaml"), "s.yaml", options)
ranked = plan.rank(plan.run_candidates(found.candidates, workers=2))
```

Nothing here prints; ``clustersim plan`` shows progress and the table.
Units: bytes (memory estimates).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...budget import WorkLimitError, over_limit_reason, with_limit
from ...errors import ClustersimError, Problem, ScenarioError
from ...parallel.rules import SHARDED_STAGE
from ...strategies import registered_strategies
from ...strategies.written_keys import without_unread
from .cluster import keep_topology
from .mixed import arranged, is_mixed
from .options import (
    DEFAULT_SCHEDULE,
    INTERLEAVED,
    ZERO_STAGES,
    PlanOptions,
    check_count,
    network_note,
)
from .scenario import resize_cluster
from .space import Point, SearchSpace, build_cluster, enumerate_points, search_space, unused_values

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...topology import Topology

REASON_CHARS = 110
"""Skip reasons are shortened to this many characters."""


def candidate_document(doc: dict[str, Any], point: Point, options: PlanOptions) -> dict[str, Any]:
    """The scenario document of one configuration.

    ``parallelism`` gets dp, tp, pp (its other keys kept; ``simulate_replicas:
    one`` for the hybrid strategy unless ``all_replicas`` or stragglers), ``training`` the
    micro-batch and iterations, ``zero`` the stage, ``network``
    the model.  Stages 0 and 1 get a ``pipeline`` section (the scenario's
    schedule and options, default 1f1b, without ``micro_batches`` and
    ``stage_layers``; with chunks > 1 the interleaved schedule and its chunks, with 1 chunk
    1f1b in place of an interleaved schedule); stages 2 and 3 none, and no
    ``training.micro_batch``.
    ``max_events`` and ``max_memory`` become ``engine.max_events`` and ``engine.max_memory``.
    The keys the candidate's strategy (the hybrid, or ``zero`` for stages 2 and 3) would not
    read are left out (:func:`~clustersim.strategies.written_keys.without_unread`): the
    scenario's tensor keys mean nothing to a ZeRO-3 candidate, ``zero.prefetch`` nothing to
    the hybrid.  On a ``mixed`` cluster one replica stands for all too where they are alike
    (:func:`enumerate_candidates` falls back to every replica where they differ).
    """
    out = with_limit(copy.deepcopy(doc), options.max_events, options.max_memory)
    out.pop("workload", None)
    parallelism = dict(out.get("parallelism") or {})
    parallelism.update(dp=point.dp, tp=point.tp, pp=point.pp)
    if point.zero < SHARDED_STAGE and not options.all_replicas and not out.get("stragglers"):
        parallelism["simulate_replicas"] = "one"
    out["parallelism"] = parallelism
    training = dict(out["training"])
    training["iterations"] = options.iterations
    training.pop("micro_batch", None)
    if point.micro_batch is not None:
        training["micro_batch"] = point.micro_batch
    out["training"] = training
    out["zero"] = {**(out.get("zero") or {}), "stage": point.zero}
    out["network"] = {**(out.get("network") or {}), "model": options.network}
    if point.zero < SHARDED_STAGE:
        pipeline = dict(out.get("pipeline") or {})
        for key in ("micro_batches", "stage_layers"):
            pipeline.pop(key, None)
        if point.chunks > 1:
            pipeline.update(schedule=INTERLEAVED, chunks=point.chunks)
        elif pipeline.get("schedule") == INTERLEAVED:
            pipeline["schedule"] = DEFAULT_SCHEDULE
            pipeline.pop("chunks", None)
        pipeline.setdefault("schedule", DEFAULT_SCHEDULE)
        out["pipeline"] = pipeline
    else:
        out.pop("pipeline", None)
    strategy = "zero" if point.zero >= SHARDED_STAGE else "pipeline"
    return without_unread(out, registered_strategies()[strategy].reads)


@dataclass(frozen=True)
class Candidate:
    """A configuration whose strategy accepted it (:func:`prepare_on`), ready to simulate."""

    index: int
    """Position in enumeration order (ties in the ranking go to the lower index)."""
    point: Point
    doc: dict[str, Any] = field(repr=False, compare=False)
    source: str = ""
    memory: tuple[float, float | None] = (0.0, None)
    """Its run's estimated peak memory and memory limit, bytes (:mod:`clustersim.budget`)."""


@dataclass
class Enumeration:
    """The candidates of a plan and what was left out."""

    space: SearchSpace
    candidates: list[Candidate]
    skipped: dict[str, int]
    """Reason (shortened message of the strategy's check) -> configurations it rejected."""
    notes: list[str]
    """Flag values no configuration uses, with the rule they break."""
    doc: dict[str, Any] = field(repr=False)
    """The (resized) scenario document the candidates derive from."""
    gpu_types: dict[str, int] = field(default_factory=dict)
    """GPUs per type of a mixed cluster (empty: one type); its candidates are arranged
    (:mod:`.mixed`) and simulate every replica where the replicas differ."""

    @property
    def skipped_count(self) -> int:
        return sum(self.skipped.values())


def enumerate_candidates(
    doc: dict[str, Any],
    source: str,
    options: PlanOptions,
    progress: Callable[[int, int], None] | None = None,
) -> Enumeration:
    """Resize the cluster, list the configurations and keep those :func:`prepare_on` accepts.

    Nothing is simulated, but each configuration is checked as a run would check it (a
    third of a second each on 16,384 GPUs): ``progress(checked, total)`` is called before
    the first and after each.  A ScenarioError if the flags are bad or the cluster cannot
    be resized.
    """
    from ...scenario import parse_scenario

    _check_options(options)
    if options.devices is not None:
        doc = resize_cluster(doc, options.devices, source)
    scenario = parse_scenario(doc, source)
    topology = build_cluster(scenario)
    if scenario.checkpoint is None or scenario.checkpoint.storage is None:
        keep_topology(scenario, topology)  # the candidates' runs in this process, or forked
    space = search_space(scenario, topology)
    points = enumerate_points(space, options)
    mixed = is_mixed(topology)
    candidates: list[Candidate] = []
    skipped: dict[str, int] = {}
    over: list[WorkLimitError] = []
    if progress is not None:
        progress(0, len(points))
    for checked, point in enumerate(points, start=1):
        base = candidate_document(doc, point, options)
        for arrangement, changed in arranged(base, point) if mixed else [("", base)]:
            here = replace(point, arrangement=arrangement)
            try:
                changed, memory = _prepared(changed, source, topology)
            except WorkLimitError as exc:
                over.append(exc)
                continue
            except ClustersimError as exc:
                reason = shorten(error_message(exc))
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            candidates.append(Candidate(len(candidates), here, changed, source, memory))
        if progress is not None:
            progress(checked, len(points))
    if over:
        skipped[over_limit_reason(over)] = len(over)
    notes = unused_values(space, options, points)
    if not points and not notes:
        notes.append(
            f"no configuration: global_batch {space.global_batch} cannot be split into "
            f"micro-batches of {', '.join(map(str, options.micro_batch))} sample(s) over "
            f"dp = {space.devices} / (tp x pp) replicas with at least pp micro-batches"
        )
    types = topology.gpu_types() if mixed else {}
    return Enumeration(space, candidates, skipped, notes, doc, types)


def _prepared(
    doc: dict[str, Any], source: str, topology: Topology
) -> tuple[dict[str, Any], tuple[float, float | None]]:
    """``doc`` and :func:`prepare_on`'s memory estimate; a document whose replicas differ (a
    mixed cluster's, placed so) where one would stand for all is given every replica."""
    from ...scenario import parse_scenario

    try:
        return doc, prepare_on(parse_scenario(doc, source), topology)
    except ScenarioError as exc:
        if not any(p.path == ONE_REPLICA_KEY for p in exc.problems):
            raise
    doc = copy.deepcopy(doc)
    doc["parallelism"]["simulate_replicas"] = "all"
    return doc, prepare_on(parse_scenario(doc, source), topology)


ONE_REPLICA_KEY = "parallelism.simulate_replicas"
"""Where a run refuses one replica standing for replicas that differ."""


def prepare_on(scenario: Scenario, topology: Topology) -> tuple[float, float | None]:
    """:func:`clustersim.api.prepare` on a topology built once: every candidate has the same
    cluster, and building a 1024-GPU topology per candidate would cost more than the checks.
    Returns the run's estimated peak memory and its memory limit (bytes)."""
    from ...api import prepare

    prepared = prepare(scenario, topology)
    return prepared.memory.total, prepared.strategy.max_memory


def _check_options(options: PlanOptions) -> None:
    check_count(options.iterations, "--iterations")
    network_note(options.network)  # a ScenarioError at --network unless registered
    bad = [z for z in options.zero if z not in ZERO_STAGES]
    if bad:
        raise ScenarioError(Problem("--zero", f"no ZeRO stage {bad[0]}", "0, 1, 2, 3"))


def error_message(exc: ClustersimError) -> str:
    """The message of ``exc`` without the file name (the same for every candidate)."""
    if isinstance(exc, ScenarioError):
        return "; ".join(p.render() for p in exc.problems)
    return str(exc)


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."
