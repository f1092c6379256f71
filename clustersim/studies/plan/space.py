"""Search the parallel configurations of a training scenario: ``clustersim plan``.

Given a training scenario and a number of GPUs ``N``, the planner lists every
configuration ``(dp, tp, pp, micro_batch, zero, chunks)`` worth trying, simulates each
one and ranks them by throughput (samples per second):

* **tp** (tensor-parallel degree): powers of two dividing ``N``, at most the
  GPUs of a node (unless ``parallelism.allow_cross_node_tp``) and dividing the
  attention heads; only 1 for models that are not transformers.
* **pp** (pipeline stages): divisors of ``N / tp`` that divide the
  transformer blocks (other models: at most their number of layers).
* **dp** = ``N / (tp pp)`` data-parallel replicas.
* **micro_batch** (samples per micro-batch): ``global_batch`` must be divisible
  by ``dp x micro_batch`` and give ``m = global_batch / (dp micro_batch) >= pp``
  micro-batches (with ``pp = 1`` they are gradient-accumulation steps).
* **zero**: stages 0 and 1 run on the 3D-hybrid strategy (a ``pipeline:``
  section is added); stages 2 and 3 only with ``tp = pp = 1``, on the ZeRO
  strategy, one pass per iteration (no micro-batches: one candidate per stage).
* **chunks** (model chunks per device): 1 runs the scenario's schedule; more runs
  Megatron-LM's interleaved 1F1B where pp > 1, pp x chunks divides the blocks and the
  micro-batches are a multiple of pp (default 1 and 2, and the scenario's own count).

These are the rules of :mod:`clustersim.parallel.rules`, the ones placement and
the hybrid strategy enforce; the search adds its own restrictions: powers of two
for tp, and at least one micro-batch per stage whatever the schedule.

Every candidate document is checked as :func:`clustersim.api.prepare` checks
it (its strategy built against the topology); those rejected are skipped and
counted by reason.  Enumeration simulates nothing and is deterministic.
Simulations run in a process pool; results come back in enumeration order,
and the ranking breaks ties by that order.

```python
from clustersim.studies import plan
options = plan.PlanOptions(devices=16)
found = plan.enumerate_candidates(plan.load_training_document("s.yaml"), "s.yaml", options)
ranked = plan.rank(plan.run_candidates(found.candidates, workers=2))
```

Nothing here prints; ``clustersim plan`` shows progress and the table.
Units: seconds, bytes, samples per second, FLOP/s.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...budget import WorkLimitError, over_limit_reason, with_limit
from ...errors import ClustersimError, Problem, ScenarioError
from ...parallel import rules
from ...parallel.rules import SHARDED_STAGE
from .options import (
    DEFAULT_CHUNKS,
    DEFAULT_SCHEDULE,
    INTERLEAVED,
    NETWORK_MODELS,
    REASON_CHARS,
    ZERO_STAGES,
    PlanOptions,
    check_count,
)

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...scenario.overrides import Setting
    from ...topology import Topology


# --------------------------------------------------------------------------- the scenario


def load_training_document(
    path: str | os.PathLike[str], settings: Sequence[Setting] = ()
) -> dict[str, Any]:
    """The validated YAML document of a training scenario (a workload scenario is an error),
    with ``settings`` (``--set``) applied: errors name the file and the overrides."""
    from ...scenario.overrides import load_with_settings

    doc, _ = load_with_settings(path, settings)
    if doc.get("workload") is not None:
        raise ScenarioError(
            Problem(
                "workload",
                "clustersim plan searches training configurations; this scenario runs a workload",
                "a training scenario: model: {...} and training: {...}",
            ),
            str(path),
        )
    return doc


def resize_cluster(doc: dict[str, Any], devices: int, source: str = "") -> dict[str, Any]:
    """A copy of ``doc`` whose cluster has ``devices`` GPUs.

    Two-tier clusters keep the node and ``nodes_per_rack`` and set ``racks`` =
    devices / (GPUs per node x nodes_per_rack); fewer devices than one rack
    make one rack of devices / GPUs-per-node nodes.  Flat clusters set their
    device count.  Custom clusters cannot be resized.  Errors name ``--devices``.
    """
    from ...scenario import parse_scenario

    check_count(devices, "--devices")
    cluster = parse_scenario(doc, source).cluster
    out = copy.deepcopy(doc)
    section = out.setdefault("cluster", {})
    if cluster.kind == "custom":
        raise ScenarioError(
            Problem(
                "--devices",
                "a custom cluster lists its devices one by one and cannot be resized",
                "leave --devices out, or describe the cluster as two_tier or flat",
            ),
            source,
        )
    units = {
        "three_tier": ("pods", "pod", lambda c: c.nodes_per_rack * c.racks_per_pod),
        "rail_optimized": ("groups", "rail group", lambda c: c.nodes_per_group),
    }
    if cluster.kind in units:
        key, what, nodes = units[cluster.kind]
        unit = cluster.node.gpus * nodes(cluster)
        if devices % unit:
            raise ScenarioError(
                Problem(
                    "--devices",
                    f"{devices} GPUs do not fill whole {what}s of {unit} GPUs",
                    f"a multiple of {unit}",
                ),
                source,
            )
        section[key] = devices // unit
        return out
    if cluster.kind != "two_tier":
        section["devices"] = devices
        return out
    gpus, per_rack = cluster.node.gpus, cluster.nodes_per_rack
    rack = gpus * per_rack
    if devices % rack == 0:
        section["racks"] = devices // rack
    elif devices < rack and devices % gpus == 0:
        section["racks"], section["nodes_per_rack"] = 1, devices // gpus
    else:
        raise ScenarioError(
            Problem(
                "--devices",
                f"{devices} GPUs do not fill whole racks of {per_rack} node(s) x {gpus} GPUs "
                f"= {rack}",
                f"a multiple of {rack}, or a multiple of {gpus} below {rack}",
            ),
            source,
        )
    return out


@dataclass(frozen=True)
class SearchSpace:
    """What the enumeration needs to know of a scenario."""

    devices: int
    """N: the workers (``data_parallel.workers``, default every GPU)."""
    gpus_per_node: int | None
    """Most workers on one node (None: the cluster has no nodes)."""
    heads: int | None
    """Attention heads (None: the model is not a transformer)."""
    blocks: int
    """Transformer blocks, or the layers of any other model."""
    global_batch: int
    allow_cross_node_tp: bool = False
    chunks: int = 1
    """Model chunks per device of the scenario's interleaved schedule (1 for any other)."""

    @property
    def is_transformer(self) -> bool:
        return self.heads is not None


def search_space(scenario: Scenario, topology: Topology | None = None) -> SearchSpace:
    """The devices, node size, model shape and batch of a training ``scenario`` (on
    ``topology``, its cluster, built here when not given)."""
    assert scenario.model is not None and scenario.training is not None
    topology = topology or build_cluster(scenario)
    workers = _workers(scenario, topology)
    per_node: dict[str, int] = {}
    for device in workers:
        if device.node is not None:
            per_node[device.node] = per_node.get(device.node, 0) + 1
    heads, blocks = _model_shape(scenario)
    parallelism, pipe = scenario.parallelism, scenario.pipeline
    return SearchSpace(
        devices=len(workers),
        gpus_per_node=max(per_node.values()) if per_node else None,
        heads=heads,
        blocks=blocks,
        global_batch=scenario.training.global_batch,
        allow_cross_node_tp=bool(parallelism and parallelism.allow_cross_node_tp),
        chunks=pipe.chunks if pipe is not None and pipe.schedule == INTERLEAVED else 1,
    )


def build_cluster(scenario: Scenario) -> Topology:
    """The topology of the scenario's cluster (errors name the scenario's file)."""
    from ...topology import build_topology

    try:
        return build_topology(scenario.cluster)
    except ScenarioError as exc:
        raise exc.with_source(scenario.source) from None


def _workers(scenario: Scenario, topology: Topology) -> list[Any]:
    """The training devices: ``data_parallel.workers`` if given, else every GPU (else all)."""
    spec = scenario.data_parallel
    if spec is not None and "workers" in spec.model_fields_set:
        try:
            return topology.select(spec.workers, "data_parallel.workers")
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
    devices = list(topology.devices.values())
    return [d for d in devices if d.kind == "gpu"] or devices


def _model_shape(scenario: Scenario) -> tuple[int | None, int]:
    """(attention heads or None, transformer blocks or layers) of the scenario's model."""
    from ...model import presets as models

    assert scenario.model is not None
    spec = scenario.model.transformer
    if spec is not None:
        return spec.heads, spec.layers
    try:
        model = models.build_model(scenario.model, path="model")
    except ScenarioError as exc:
        raise exc.with_source(scenario.source) from None
    shape = getattr(model, "transformer", None)
    if shape is not None:
        return shape.heads, shape.layers
    return None, len(model.layers)


# --------------------------------------------------------------------------- enumeration


@dataclass(frozen=True)
class Point:
    """One configuration: its degrees, samples per micro-batch and ZeRO stage."""

    dp: int
    tp: int
    pp: int
    micro_batch: int | None
    """Samples per micro-batch (None: ZeRO 2/3, one pass per iteration)."""
    micro_batches: int | None
    """Micro-batches per iteration m = global_batch / (dp micro_batch)."""
    zero: int
    chunks: int = 1
    """Model chunks per device: 1 runs the scenario's schedule (1f1b by default), more the
    interleaved schedule."""

    def label(self) -> str:
        """``dp=8 tp=2 pp=1 micro_batch=2 zero=1`` (`` chunks=2`` with interleaving)."""
        mb = "-" if self.micro_batch is None else str(self.micro_batch)
        chunks = f" chunks={self.chunks}" if self.chunks > 1 else ""
        return f"dp={self.dp} tp={self.tp} pp={self.pp} micro_batch={mb} zero={self.zero}{chunks}"


def tp_values(space: SearchSpace, wanted: Iterable[int] | None = None) -> list[int]:
    """Tensor-parallel degrees: powers of two dividing N, within a node, dividing the heads."""
    n = space.devices
    values = wanted if wanted is not None else _powers_of_two(n)
    return [t for t in sorted(set(values)) if _tp_allowed(space, t)]


def _powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length())]


def _tp_allowed(space: SearchSpace, tp: int) -> bool:
    """A power of two (the search's own restriction) that the rules allow: tp divides the
    workers, splits the heads and fits a node."""
    if tp & (tp - 1):
        return False
    return _allowed(
        rules.grid_split_problem(space.devices, tp, 1),
        rules.tensor_parallel_problem(tp, space.heads),
        rules.tensor_group_node_problem(tp, space.gpus_per_node, space.allow_cross_node_tp),
    )


def _allowed(*problems: Problem | None) -> bool:
    """Whether no rule forbids the configuration."""
    return all(problem is None for problem in problems)


def pp_values(space: SearchSpace, tp: int, wanted: Iterable[int] | None = None) -> list[int]:
    """Pipeline stages: divisors of N / tp that divide the blocks (other models: <= layers)."""
    rest = space.devices // tp
    values = wanted if wanted is not None else range(1, rest + 1)
    return [p for p in sorted(set(values)) if _pp_allowed(space, tp, p)]


def _pp_allowed(space: SearchSpace, tp: int, pp: int) -> bool:
    """tp x pp divides the workers, and the model splits into pp stages (one chunk each)."""
    return _allowed(
        rules.grid_split_problem(space.devices, tp, pp),
        rules.stage_split_problem(space.blocks, pp, 1, space.is_transformer),
    )


def _micro_batches(space: SearchSpace, dp: int, pp: int, micro_batch: int) -> int | None:
    """m for samples per micro-batch ``micro_batch``, if the rules allow it: whole
    micro-batches per replica, and at least one per stage.  The search applies 1F1B's rule
    of one micro-batch per stage to every schedule (fewer leave stages idle)."""
    batch = space.global_batch
    if rules.micro_batch_problem(batch, dp, micro_batch) is not None:
        return None
    m = batch // (dp * micro_batch)
    fill = rules.micro_batch_per_stage_problem(DEFAULT_SCHEDULE, pp, m)
    return m if fill is None else None


def enumerate_points(space: SearchSpace, options: PlanOptions) -> list[Point]:
    """Every configuration of ``options`` valid for ``space``, in a fixed order.

    Order: tp, then pp, then the ZeRO stage, then samples per micro-batch, then chunks,
    each ascending.  ZeRO stages >= 2 give one point each when tp = pp = 1.
    """
    points: list[Point] = []
    for tp in tp_values(space, options.tp):
        for pp in pp_values(space, tp, options.pp):
            dp = space.devices // (tp * pp)
            for zero in sorted(set(options.zero)):
                if zero >= SHARDED_STAGE:
                    # plan searches ZeRO-2/3 on data parallelism alone (the zero strategy)
                    if tp == pp == 1:
                        points.append(Point(dp, tp, pp, None, None, zero))
                    continue
                for mb in sorted(set(options.micro_batch)):
                    m = _micro_batches(space, dp, pp, mb)
                    if m is None:
                        continue
                    points += [
                        Point(dp, tp, pp, mb, m, zero, v)
                        for v in chunk_values(space, options)
                        if v == 1 or _interleaved_allowed(space, pp, v, m)
                    ]
    return points


def chunk_values(space: SearchSpace, options: PlanOptions) -> list[int]:
    """Model chunks per device to try: ``--chunks``, else 1, 2 and the scenario's own."""
    given = options.chunks if options.chunks is not None else (*DEFAULT_CHUNKS, space.chunks)
    return sorted(set(given))


def _interleaved_allowed(space: SearchSpace, pp: int, chunks: int, micro_batches: int) -> bool:
    """Megatron-LM's interleaved schedule: more than one stage, the blocks split into pp x
    chunks virtual stages, the micro-batches in whole groups of pp."""
    return pp > 1 and _allowed(
        rules.stage_split_problem(space.blocks, pp, chunks, space.is_transformer),
        rules.micro_batches_multiple_problem(INTERLEAVED, pp, micro_batches),
    )


def unused_values(space: SearchSpace, options: PlanOptions, points: Sequence[Point]) -> list[str]:
    """A note for each value given by flag that no configuration uses, with the rule it breaks."""
    n, blocks = space.devices, space.blocks
    node = space.gpus_per_node
    within = (
        f", at most the {node} GPUs of a node (unless parallelism.allow_cross_node_tp)"
        if node is not None and not space.allow_cross_node_tp
        else ""
    )
    heads = (
        f" and dividing the {space.heads} attention heads"
        if space.is_transformer
        else "; only 1 for a model that is not a transformer"
    )
    pp_rule = (
        f"the {blocks} transformer blocks" if space.is_transformer else f"at most {blocks} layers"
    )
    rules = {
        "--tp": (options.tp, "tp", f"a power of two dividing {n}{within}{heads}"),
        "--pp": (options.pp, "pp", f"pp must divide {n} / tp and {pp_rule}"),
        "--micro-batch": (
            options.micro_batch,
            "micro_batch",
            f"global_batch {space.global_batch} must be divisible by dp x micro_batch "
            "with at least pp micro-batches",
        ),
        "--zero": (options.zero, "zero", "stages 2 and 3 need tp = pp = 1"),
        "--chunks": (
            options.chunks,
            "chunks",
            f"more than 1 runs the interleaved schedule: pp > 1, pp x chunks dividing {pp_rule}"
            ", micro-batches a multiple of pp",
        ),
    }
    notes = []
    for flag, (given, attribute, rule) in rules.items():
        used = {getattr(p, attribute) for p in points}
        notes += [
            f"{flag} {value}: no configuration ({rule})"
            for value in sorted(set(given or ()))
            if value not in used
        ]
        if not used:  # the flags after this one were never reached
            break
    return notes


def candidate_document(doc: dict[str, Any], point: Point, options: PlanOptions) -> dict[str, Any]:
    """The scenario document of one configuration.

    ``parallelism`` gets dp, tp, pp (its other keys kept; ``simulate_replicas:
    one`` for the hybrid strategy unless ``all_replicas`` or stragglers), ``training`` the
    micro-batch and iterations, ``zero`` the stage (prefetch kept), ``network``
    the model.  Stages 0 and 1 get a ``pipeline`` section (the scenario's
    schedule and options, default 1f1b, without ``micro_batches`` and
    ``stage_layers``; with chunks > 1 the interleaved schedule and its chunks, with 1 chunk
    1f1b in place of an interleaved schedule); stages 2 and 3 none, and no
    ``training.micro_batch``.
    ``max_events`` and ``max_memory`` become ``engine.max_events`` and ``engine.max_memory``.
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
    return out


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

    @property
    def skipped_count(self) -> int:
        return sum(self.skipped.values())


def enumerate_candidates(doc: dict[str, Any], source: str, options: PlanOptions) -> Enumeration:
    """Resize the cluster, list the configurations and keep those :func:`prepare_on` accepts.

    Cheap: nothing is simulated.  A ScenarioError if the flags are bad or the
    cluster cannot be resized.
    """
    from ...scenario import parse_scenario

    _check_options(options)
    if options.devices is not None:
        doc = resize_cluster(doc, options.devices, source)
    scenario = parse_scenario(doc, source)
    topology = build_cluster(scenario)
    space = search_space(scenario, topology)
    points = enumerate_points(space, options)
    candidates: list[Candidate] = []
    skipped: dict[str, int] = {}
    over: list[WorkLimitError] = []
    for point in points:
        changed = candidate_document(doc, point, options)
        try:
            memory = prepare_on(parse_scenario(changed, source), topology)
        except WorkLimitError as exc:
            over.append(exc)
            continue
        except ClustersimError as exc:
            reason = shorten(_reason(exc))
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        candidates.append(Candidate(len(candidates), point, changed, source, memory))
    if over:
        skipped[over_limit_reason(over)] = len(over)
    notes = unused_values(space, options, points)
    if not points and not notes:
        notes.append(
            f"no configuration: global_batch {space.global_batch} cannot be split into "
            f"micro-batches of {', '.join(map(str, options.micro_batch))} sample(s) over "
            f"dp = {space.devices} / (tp x pp) replicas with at least pp micro-batches"
        )
    return Enumeration(space, candidates, skipped, notes, doc)


def prepare_on(scenario: Scenario, topology: Topology) -> tuple[float, float | None]:
    """:func:`clustersim.api.prepare` on a topology built once: every candidate has the same
    cluster, and building a 1024-GPU topology per candidate would cost more than the checks.
    Returns the run's estimated peak memory and its memory limit (bytes)."""
    from ...api import prepare

    prepared = prepare(scenario, topology)
    return prepared.memory.total, prepared.strategy.max_memory


def _check_options(options: PlanOptions) -> None:
    check_count(options.iterations, "--iterations")
    if options.network not in NETWORK_MODELS:
        raise ScenarioError(
            Problem("--network", f"unknown model {options.network!r}", ", ".join(NETWORK_MODELS))
        )
    bad = [z for z in options.zero if z not in ZERO_STAGES]
    if bad:
        raise ScenarioError(Problem("--zero", f"no ZeRO stage {bad[0]}", "0, 1, 2, 3"))


def _reason(exc: ClustersimError) -> str:
    """The message of ``exc`` without the file name (the same for every candidate)."""
    if isinstance(exc, ScenarioError):
        return "; ".join(p.render() for p in exc.problems)
    return str(exc)


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def dash(value: int | None) -> str:
    """A count as a table cell: "-" when it does not apply."""
    return "-" if value is None else str(value)


def point_label(point: Point) -> str:
    """``dp/tp/pp/micro-batch/zero`` of a point (``/v2`` after it with two chunks)."""
    chunks = f"/v{point.chunks}" if point.chunks > 1 else ""
    return f"{point.dp}/{point.tp}/{point.pp}/{dash(point.micro_batch)}/{point.zero}{chunks}"
