"""The search space of ``clustersim plan``: the parallel configurations of a training scenario.

Given a training scenario and a number of GPUs ``N``, the planner lists every
configuration ``(dp, tp, pp, micro_batch, zero, chunks)`` worth trying (here), simulates
each one and ranks them by throughput (samples per second; :mod:`.runs`, :mod:`.tables`):

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

Enumeration simulates nothing and is deterministic (:func:`enumerate_points`); the
candidates and their checks are in :mod:`.candidates`.  Units: none (counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import Problem, ScenarioError
from ...parallel import rules
from ...parallel.rules import SHARDED_STAGE
from .options import DEFAULT_CHUNKS, DEFAULT_SCHEDULE, INTERLEAVED, PlanOptions

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...topology import Topology


# --------------------------------------------------------------------------- the space


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
        chunks=_written_chunks(pipe),
    )


def _written_chunks(pipe: Any) -> int:
    """The scenario's own interleaving depth, searched beside the default ones: its written
    ``pipeline.chunks`` with the interleaved schedule, else 1 (``auto`` is the searched
    depths' to give)."""
    if pipe is None or pipe.schedule != INTERLEAVED or not isinstance(pipe.chunks, int):
        return 1
    return pipe.chunks


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
    arrangement: str = ""
    """On a mixed cluster, where the GPU types go (:mod:`.mixed`: even, replicas, stages);
    "" on a cluster of one type."""

    def label(self) -> str:
        """``dp=8 tp=2 pp=1 micro_batch=2 zero=1`` (`` chunks=2`` with interleaving,
        `` placement=stages`` on a mixed cluster)."""
        mb = "-" if self.micro_batch is None else str(self.micro_batch)
        chunks = f" chunks={self.chunks}" if self.chunks > 1 else ""
        chunks += f" placement={self.arrangement}" if self.arrangement else ""
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


def dash(value: int | None) -> str:
    """A count as a table cell: "-" when it does not apply."""
    return "-" if value is None else str(value)


def point_label(point: Point) -> str:
    """``dp/tp/pp/micro-batch/zero`` of a point (``/v2`` after it with two chunks, `` by
    stages`` on a mixed cluster)."""
    chunks = f"/v{point.chunks}" if point.chunks > 1 else ""
    chunks += f" {point.arrangement}" if point.arrangement else ""
    return f"{point.dp}/{point.tp}/{point.pp}/{dash(point.micro_batch)}/{point.zero}{chunks}"
