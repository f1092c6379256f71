"""Search the parallel configurations of a training scenario: ``clustersim plan``.

Given a training scenario and a number of GPUs ``N``, the planner lists every
configuration ``(dp, tp, pp, micro_batch, zero)`` worth trying, simulates each
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

Every candidate document is checked as :func:`clustersim.api.prepare` checks
it (its strategy built against the topology); those rejected are skipped and
counted by reason.  Enumeration simulates nothing and is deterministic.
Simulations run in a process pool; results come back in enumeration order,
and the ranking breaks ties by that order.

```python
from clustersim import plan
options = plan.PlanOptions(devices=16)
found = plan.enumerate_candidates(plan.load_training_document("s.yaml"), "s.yaml", options)
ranked = plan.rank(plan.run_candidates(found.candidates, workers=2))
```

Nothing here prints; ``clustersim plan`` shows progress and the table.
Units: seconds, bytes, samples per second, FLOP/s.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ClustersimError, Problem, ScenarioError
from .outputs import tables
from .outputs.atomic import save_figure, write_atomic
from .studies import run_all

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .scenario import Scenario
    from .topology import Topology

DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
"""Samples per micro-batch tried when ``--micro-batch`` is not given."""
DEFAULT_ZERO_STAGES = (0, 1)
"""ZeRO stages tried when ``--zero`` is not given."""
ZERO_STAGES = (0, 1, 2, 3)
SHARDED_STAGE = 2
"""ZeRO stages from this one on run only with tp = pp = 1 (on the ZeRO strategy)."""
NETWORK_MODELS = ("analytical", "flow")
NETWORK_NOTES = {
    "analytical": "congestion-aware: each collective's alpha-beta cost, its bandwidth part "
    "shared max-min fairly with every transfer in flight",
    "flow": "flow-level network: transfers share links max-min fairly",
}
DEFAULT_SCHEDULE = "1f1b"
REASON_CHARS = 110
"""Skip reasons are shortened to this many characters."""
PLOT_BARS = 60
"""The plot shows at most this many configurations (the best ones)."""
GB = 1e9


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class PlanOptions:
    """What to search and how to simulate each candidate (the ``clustersim plan`` flags)."""

    devices: int | None = None
    """GPUs to plan for (None: the scenario's own)."""
    tp: tuple[int, ...] | None = None
    """Tensor-parallel degrees to try (None: every valid one)."""
    pp: tuple[int, ...] | None = None
    """Pipeline stages to try (None: every valid count)."""
    micro_batch: tuple[int, ...] = DEFAULT_MICRO_BATCHES
    """Samples per micro-batch to try."""
    zero: tuple[int, ...] = DEFAULT_ZERO_STAGES
    """ZeRO stages to try."""
    network: str = "analytical"
    """``network.model`` of every candidate: analytical or flow."""
    iterations: int = 1
    """``training.iterations`` of every candidate."""
    all_replicas: bool = False
    """Simulate every data-parallel replica (default: replica 0 stands for all -- identical
    replicas, data-parallel collectives priced analytically -- unless there are stragglers)."""


def parse_counts(
    text: str, flag: str, minimum: int = 1, maximum: int | None = None, example: str = "1,2,4"
) -> tuple[int, ...]:
    """``"1,2,4"`` as ``(1, 2, 4)`` (sorted, without repeats); a ScenarioError naming ``flag``."""
    values: list[int] = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
            raise ScenarioError(
                Problem(
                    flag, f"expected whole numbers {bound}, got {item.strip()!r}", f"e.g. {example}"
                )
            )
        values.append(value)
    return tuple(sorted(set(values)))


def parse_zero_stages(text: str) -> tuple[int, ...]:
    """``--zero``: stages 0-3 (``fsdp`` is 3), e.g. ``"0,1,fsdp"`` as ``(0, 1, 3)``."""
    items = ["3" if item.strip().lower() == "fsdp" else item for item in text.split(",")]
    return parse_counts(",".join(items), "--zero", 0, 3, example="0,1,2,3 (fsdp = 3)")


def check_count(value: int | None, flag: str) -> None:
    """A ScenarioError naming ``flag`` unless ``value`` is None or at least 1."""
    if value is not None and value < 1:
        raise ScenarioError(Problem(flag, f"expected a whole number >= 1, got {value}"))


# --------------------------------------------------------------------------- the scenario


def load_training_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated YAML document of a training scenario (a workload scenario is an error)."""
    from .sweep import load_document

    doc = load_document(path)
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
    from .scenario import parse_scenario

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
    parallelism = scenario.parallelism
    return SearchSpace(
        devices=len(workers),
        gpus_per_node=max(per_node.values()) if per_node else None,
        heads=heads,
        blocks=blocks,
        global_batch=scenario.training.global_batch,
        allow_cross_node_tp=bool(parallelism and parallelism.allow_cross_node_tp),
    )


def build_cluster(scenario: Scenario) -> Topology:
    """The topology of the scenario's cluster (errors name the scenario's file)."""
    from .topology import build_topology

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
    from . import models

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

    def label(self) -> str:
        """``dp=8 tp=2 pp=1 micro_batch=2 zero=1``."""
        mb = "-" if self.micro_batch is None else str(self.micro_batch)
        return f"dp={self.dp} tp={self.tp} pp={self.pp} micro_batch={mb} zero={self.zero}"


def tp_values(space: SearchSpace, wanted: Iterable[int] | None = None) -> list[int]:
    """Tensor-parallel degrees: powers of two dividing N, within a node, dividing the heads."""
    n = space.devices
    values = wanted if wanted is not None else _powers_of_two(n)
    return [t for t in sorted(set(values)) if _tp_allowed(space, t)]


def _powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length())]


def _tp_allowed(space: SearchSpace, tp: int) -> bool:
    if tp == 1:
        return True
    if tp & (tp - 1) or space.devices % tp or space.heads is None or space.heads % tp:
        return False
    node = space.gpus_per_node
    return space.allow_cross_node_tp or node is None or tp <= node


def pp_values(space: SearchSpace, tp: int, wanted: Iterable[int] | None = None) -> list[int]:
    """Pipeline stages: divisors of N / tp that divide the blocks (other models: <= layers)."""
    rest = space.devices // tp
    values = wanted if wanted is not None else range(1, rest + 1)
    return [p for p in sorted(set(values)) if rest % p == 0 and _pp_allowed(space, p)]


def _pp_allowed(space: SearchSpace, pp: int) -> bool:
    if space.is_transformer:
        return space.blocks % pp == 0
    return pp <= space.blocks


def enumerate_points(space: SearchSpace, options: PlanOptions) -> list[Point]:
    """Every configuration of ``options`` valid for ``space``, in a fixed order.

    Order: tp, then pp, then the ZeRO stage, then samples per micro-batch, each
    ascending.  ZeRO stages >= 2 give one point each when tp = pp = 1.
    """
    points: list[Point] = []
    batch = space.global_batch
    for tp in tp_values(space, options.tp):
        for pp in pp_values(space, tp, options.pp):
            dp = space.devices // (tp * pp)
            for zero in sorted(set(options.zero)):
                if zero >= SHARDED_STAGE:
                    if tp == pp == 1:
                        points.append(Point(dp, tp, pp, None, None, zero))
                    continue
                for mb in sorted(set(options.micro_batch)):
                    if batch % (dp * mb) == 0 and batch // (dp * mb) >= pp:
                        points.append(Point(dp, tp, pp, mb, batch // (dp * mb), zero))
    return points


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
    ``stage_layers``); stages 2 and 3 none, and no ``training.micro_batch``.
    """
    out = copy.deepcopy(doc)
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
    from .scenario import parse_scenario

    _check_options(options)
    if options.devices is not None:
        doc = resize_cluster(doc, options.devices, source)
    scenario = parse_scenario(doc, source)
    topology = build_cluster(scenario)
    space = search_space(scenario, topology)
    points = enumerate_points(space, options)
    candidates: list[Candidate] = []
    skipped: dict[str, int] = {}
    for point in points:
        changed = candidate_document(doc, point, options)
        try:
            prepare_on(parse_scenario(changed, source), topology)
        except ClustersimError as exc:
            reason = shorten(_reason(exc))
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        candidates.append(Candidate(len(candidates), point, changed, source))
    notes = unused_values(space, options, points)
    if not points and not notes:
        notes.append(
            f"no configuration: global_batch {space.global_batch} cannot be split into "
            f"micro-batches of {', '.join(map(str, options.micro_batch))} sample(s) over "
            f"dp = {space.devices} / (tp x pp) replicas with at least pp micro-batches"
        )
    return Enumeration(space, candidates, skipped, notes, doc)


def prepare_on(scenario: Scenario, topology: Topology) -> None:
    """:func:`clustersim.api.prepare` on a topology built once: every candidate has the same
    cluster, and building a 1024-GPU topology per candidate would cost more than the checks."""
    from .api import prepare

    prepare(scenario, topology)


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


# --------------------------------------------------------------------------- simulation


@dataclass
class Outcome:
    """What one candidate's simulation gave (None: not in its summary)."""

    candidate: Candidate
    iteration_time_s: float | None = None
    throughput_samples_per_s: float | None = None
    tflops_per_gpu: float | None = None
    """Hardware FLOP/s per GPU in TFLOP/s (Megatron's metric)."""
    peak_bytes: float | None = None
    """The largest peak memory of any device."""
    capacity_bytes: float | None = None
    """Memory of the device with that peak."""
    fits: bool | None = None
    """Every device within its memory (None: the strategy models no memory)."""
    error: str = ""
    """Why the simulation failed ("" if it ran)."""
    rank: int | None = None
    """1 = highest throughput (None: failed)."""

    @property
    def point(self) -> Point:
        return self.candidate.point

    @property
    def ok(self) -> bool:
        return not self.error and self.throughput_samples_per_s is not None


def simulate_candidate(doc: dict[str, Any], source: str = "") -> dict[str, Any]:
    """Simulate one candidate document; the summary values the plan shows, or ``{"error": ...}``.

    Runs in a worker process: errors come back as text.  Unexpected exceptions
    are reported too (``internal error: ...``), so one bad run cannot stop the plan.
    """
    from .api import simulate
    from .scenario import parse_scenario

    try:
        summary = simulate(parse_scenario(doc, source=source)).summary
    except ClustersimError as exc:
        return {"error": _reason(exc)}
    except Exception as exc:  # noqa: BLE001  (reported in the candidate's row)
        return {"error": f"internal error: {type(exc).__name__}: {exc}"}
    memory = summary.get("memory") or {}
    values = {
        key: summary.get(key)
        for key in ("iteration_time_s", "throughput_samples_per_s", "tflops_per_gpu")
    }
    if memory:
        values.update(
            peak_bytes=memory.get("peak_bytes"),
            capacity_bytes=memory.get("capacity_bytes"),
            fits=memory.get("fits"),
        )
    return values


def run_candidates(
    candidates: Sequence[Candidate],
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Outcome]:
    """Each candidate's :class:`Outcome`, in candidate order; ``workers`` processes
    (default: all cores; one worker or one candidate runs in this process).

    ``progress(done, total)`` is called once before the first run finishes and
    after each run.
    """
    results = run_all(
        simulate_candidate,
        [(c.doc, c.source) for c in candidates],
        workers,
        progress,
        announce=True,
    )
    return [_outcome(c, r or {}) for c, r in zip(candidates, results)]


def _outcome(candidate: Candidate, values: dict[str, Any]) -> Outcome:
    error = values.get("error")
    if error is None and values.get("throughput_samples_per_s") is None:
        error = "the run's summary has no throughput_samples_per_s"
    outcome = Outcome(candidate, error=str(error or ""))
    for key in (
        "iteration_time_s",
        "throughput_samples_per_s",
        "tflops_per_gpu",
        "peak_bytes",
        "capacity_bytes",
        "fits",
    ):
        if values.get(key) is not None:
            setattr(outcome, key, values[key])
    return outcome


# --------------------------------------------------------------------------- verification


def flow_document(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` simulated in full by the flow-level model: ``network.model: flow`` and, for the
    hybrid strategy, every data-parallel replica (``simulate_replicas: all``)."""
    out = copy.deepcopy(doc)
    out["network"] = {**(out.get("network") or {}), "model": "flow"}
    if "parallelism" in out:
        out["parallelism"] = {**out["parallelism"], "simulate_replicas": "all"}
    return out


@dataclass
class Verification:
    """One of the top configurations simulated again by the flow-level model."""

    fast: Outcome
    """The outcome the plan ranked (its network model)."""
    flow: Outcome
    """The same configuration, flow-level, every replica."""
    flow_rank: int | None = None
    """Its rank among the verified configurations by flow-level throughput (None: failed)."""

    @property
    def difference(self) -> float | None:
        """Fast iteration time / flow-level iteration time - 1 (None if either failed)."""
        fast, flow = self.fast.iteration_time_s, self.flow.iteration_time_s
        if not self.flow.ok or not fast or not flow:
            return None
        return fast / flow - 1.0


def verify(
    ranked: Sequence[Outcome],
    k: int,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Verification]:
    """Simulate the first ``k`` configurations of ``ranked`` that ran with the flow-level
    model (:func:`flow_document`) and rank them among themselves by throughput."""
    top = [o for o in ranked if o.ok][:k]
    candidates = [
        Candidate(o.candidate.index, o.point, flow_document(o.candidate.doc), o.candidate.source)
        for o in top
    ]
    flows = run_candidates(candidates, workers, progress=progress)
    out = [Verification(fast, flow) for fast, flow in zip(top, flows, strict=True)]
    ok = sorted(
        (v for v in out if v.flow.ok),
        key=lambda v: (-(v.flow.throughput_samples_per_s or 0.0), v.fast.rank or 0),
    )
    for i, v in enumerate(ok, start=1):
        v.flow_rank = i
    return out


def same_order(verifications: Sequence[Verification]) -> bool:
    """True when the flow-level model ranks the verified configurations as the plan did."""
    return all(v.flow_rank == i for i, v in enumerate(verifications, start=1))


VERIFY_COLUMNS = ("rank", "dp/tp/pp/mb/zero", "iteration", "flow iteration", "diff", "flow rank")


def verification_lines(verifications: Sequence[Verification], network: str) -> list[str]:
    """The verified configurations side by side (plan's time, flow-level time, difference,
    flow-level rank) as aligned text, and a line saying whether the order holds."""
    from .units import format_time

    rows = []
    for v in verifications:
        diff = v.difference
        rows.append(
            [
                str(v.fast.rank),
                _short_label(v.fast.point),
                format_time(v.fast.iteration_time_s or 0.0),
                format_time(v.flow.iteration_time_s) if v.flow.ok else "failed",
                "-" if diff is None else f"{diff:+.1%}",
                _dash(v.flow_rank),
            ]
        )
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(VERIFY_COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(VERIFY_COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for v in verifications:
        if not v.flow.ok:
            lines.append(
                f"flow-level run of {v.fast.point.label()} failed: {shorten(v.flow.error)}"
            )
    if same_order(verifications):
        lines.append(f"the flow-level model ranks these {len(verifications)} as {network} does")
    else:
        order = ", ".join(str(v.fast.rank) for v in sorted(verifications, key=_flow_key))
        lines.append(f"the flow-level model ranks them differently: {order} (plan ranks)")
    return lines


def _flow_key(v: Verification) -> tuple[int, int]:
    return (v.flow_rank if v.flow_rank is not None else 1 << 30, v.fast.rank or 0)


# --------------------------------------------------------------------------- ranking


def rank(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Highest throughput first, ties by enumeration order; failed runs last (no rank)."""
    done = list(outcomes)
    ran = sorted(
        (o for o in done if o.ok),
        key=lambda o: (-(o.throughput_samples_per_s or 0.0), o.candidate.index),
    )
    for i, outcome in enumerate(ran, start=1):
        outcome.rank = i
    failed = sorted((o for o in done if not o.ok), key=lambda o: o.candidate.index)
    return ran + failed


def shown(
    ranked: Sequence[Outcome], fit_only: bool = False, top: int | None = None
) -> list[Outcome]:
    """The rows to print: without those that do not fit (``fit_only``), the first ``top``."""
    rows = [o for o in ranked if not (fit_only and o.fits is False)]
    return rows[:top] if top is not None else rows


def best_fitting(ranked: Sequence[Outcome]) -> Outcome | None:
    """The highest-throughput outcome known to fit in memory (None if none)."""
    return next((o for o in ranked if o.ok and o.fits is True), None)


def verdict(ranked: Sequence[Outcome], options: PlanOptions, recompute: str | None) -> str:
    """One line naming the best configuration that fits, or why none does and what would help."""
    best = best_fitting(ranked)
    ran = [o for o in ranked if o.ok]
    if best is not None:
        return f"best that fits: {best.point.label()}: {_performance(best)}"
    if not ran:
        return "no configuration ran: every simulation failed (see the rows)"
    unknown = [o for o in ran if o.fits is None]
    if unknown:
        top = unknown[0]
        return (
            f"best: {top.point.label()}: {_performance(top)} "
            "(its strategy models no memory: whether it fits is unknown)"
        )
    closest = min(ran, key=lambda o: ((o.peak_bytes or 0) / (o.capacity_bytes or 1), o.rank or 0))
    return (
        f"none fits in device memory: the closest, {closest.point.label()}, needs "
        f"{_size(closest.peak_bytes)} of {_size(closest.capacity_bytes)}; might help: "
        + "; ".join(_help(options, recompute))
    )


def recompute_of(doc: dict[str, Any]) -> str | None:
    """The scenario's activation recomputation: ``training.recompute``, else ``full`` when
    ``pipeline.recompute`` is true, else None."""
    chosen = (doc.get("training") or {}).get("recompute")
    if chosen is None and (doc.get("pipeline") or {}).get("recompute"):
        return "full"
    return chosen


def _performance(outcome: Outcome) -> str:
    from .units import format_time

    text = (
        f"{outcome.throughput_samples_per_s:,.1f} samples/s, iteration "
        f"{format_time(outcome.iteration_time_s or 0.0)}"
    )
    if outcome.peak_bytes is not None:
        text += f", peak {_size(outcome.peak_bytes)} of {_size(outcome.capacity_bytes)}"
    return text


def _help(options: PlanOptions, recompute: str | None) -> list[str]:
    """What was not tried that lowers memory per device."""
    tips = []
    if options.tp is not None or options.pp is not None:
        tips.append("more tensor/pipeline parallelism (leave out --tp/--pp to try every degree)")
    if not any(z >= SHARDED_STAGE for z in options.zero):
        tips.append("ZeRO stage 2 or 3 (--zero 0,1,2,3)")
    if recompute in (None, "none", "selective"):
        tips.append("activation recomputation (training.recompute: full)")
    if 1 not in options.micro_batch:
        tips.append("smaller micro-batches (--micro-batch 1)")
    tips.append("more GPUs (--devices) or GPUs with more memory (the cluster's gpu.memory)")
    return tips


def _gb(value: float | None) -> str:
    """Bytes as GB for the table: three significant digits, whole numbers from 100 GB."""
    if value is None:
        return "-"
    gb = value / GB
    return f"{gb:.0f}" if gb >= 100 else f"{gb:.3g}"


def _size(value: float | None) -> str:
    from .units import format_size

    return "-" if value is None else format_size(value)


# --------------------------------------------------------------------------- tables


COLUMNS = (
    "rank",
    "dp",
    "tp",
    "pp",
    "micro_batch",
    "micro-batches",
    "zero",
    "iteration",
    "samples/s",
    "TFLOP/s/GPU",
    "peak GB",
    "capacity GB",
    "fits",
)
"""Columns of the printed table (and plan.md); a failed run adds its error after them."""
RIGHT_ALIGNED = set(COLUMNS) - {"fits"}


def table_cells(outcome: Outcome) -> list[str]:
    """One row of the printed table; "-" where a value is unknown or does not apply."""
    from .units import format_time

    p = outcome.point
    fits = {True: "yes", False: "NO", None: "-"}[outcome.fits]
    return [
        "-" if outcome.rank is None else str(outcome.rank),
        str(p.dp),
        str(p.tp),
        str(p.pp),
        _dash(p.micro_batch),
        _dash(p.micro_batches),
        str(p.zero),
        "-" if outcome.iteration_time_s is None else format_time(outcome.iteration_time_s),
        "-"
        if outcome.throughput_samples_per_s is None
        else f"{outcome.throughput_samples_per_s:,.1f}",
        "-" if outcome.tflops_per_gpu is None else f"{outcome.tflops_per_gpu:.1f}",
        _gb(outcome.peak_bytes),
        _gb(outcome.capacity_bytes),
        fits if outcome.ok else "failed",
    ]


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_table(rows: Sequence[Outcome]) -> list[str]:
    """The rows as aligned text lines, a header first; failed rows end with their error."""
    cells = [table_cells(o) for o in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(COLUMNS)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if name in RIGHT_ALIGNED else v.ljust(w)
            for v, w, name in zip(values, widths, COLUMNS)
        ]
        return "  ".join(parts).rstrip()

    lines = [line(COLUMNS)]
    for outcome, row in zip(rows, cells):
        text = line(row)
        lines.append(f"{text}  {shorten(outcome.error)}" if outcome.error else text)
    return lines


CSV_COLUMNS = (
    "rank",
    "dp",
    "tp",
    "pp",
    "micro_batch",
    "micro_batches",
    "zero",
    "iteration_time_s",
    "throughput_samples_per_s",
    "tflops_per_gpu",
    "peak_memory_bytes",
    "capacity_bytes",
    "fits",
    "error",
    "flow_iteration_time_s",
    "flow_rank",
)


def csv_text(ranked: Sequence[Outcome], verified: Sequence[Verification] = ()) -> str:
    """Every outcome as CSV, SI units (seconds, samples/s, bytes); empty cells where unknown.
    ``flow_iteration_time_s`` and ``flow_rank`` are filled for the ``verified`` ones."""
    by_index = {v.fast.candidate.index: v for v in verified}
    rows = []
    for o in ranked:
        p = o.point
        values = (
            o.rank,
            p.dp,
            p.tp,
            p.pp,
            p.micro_batch,
            p.micro_batches,
            p.zero,
            o.iteration_time_s,
            o.throughput_samples_per_s,
            o.tflops_per_gpu,
            o.peak_bytes,
            o.capacity_bytes,
            None if o.fits is None else ("yes" if o.fits else "no"),
            o.error,
            *_verified_cells(by_index.get(o.candidate.index)),
        )
        rows.append([tables.cell(v) for v in values])
    return tables.csv_text(CSV_COLUMNS, rows)


def _verified_cells(v: Verification | None) -> tuple[float | None, int | None]:
    if v is None:
        return (None, None)
    return (v.flow.iteration_time_s if v.flow.ok else None, v.flow_rank)


def markdown_text(ranked: Sequence[Outcome], title: str, notes: Sequence[str]) -> str:
    """Every outcome as a Markdown table under ``# title``, the notes (verdict, network) after."""
    lines = [f"# {title}", ""]
    right = [i for i, c in enumerate(COLUMNS) if c in RIGHT_ALIGNED]
    rows = [table_cells(o) + [tables.markdown_escape(o.error)] for o in ranked]
    lines += tables.markdown_table([*COLUMNS, "error"], rows, right_aligned=right)
    lines += [""] + [f"{note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- plot


def plot_figure(ranked: Sequence[Outcome], title: str = "") -> Figure:
    """Throughput per configuration, best first: bars green if they fit, red if not, grey
    if unknown; the best configuration that fits is marked.  At most :data:`PLOT_BARS` bars.
    Built on the Agg canvas without pyplot (no global state).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    ran = [o for o in ranked if o.ok][:PLOT_BARS]
    colours = {True: "tab:green", False: "tab:red", None: "tab:gray"}
    fig = Figure(figsize=(max(6.0, 0.35 * len(ran) + 2.0), 5.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(ran)))
    ax.bar(xs, [o.throughput_samples_per_s for o in ran], color=[colours[o.fits] for o in ran])
    ax.set_xticks(xs, [_short_label(o.point) for o in ran], rotation=90, fontsize="small")
    best = best_fitting(ranked)
    if best is not None and best in ran:
        x = ran.index(best)
        ax.annotate(
            "best",
            (x, best.throughput_samples_per_s or 0.0),
            xytext=(0, 6),
            textcoords="offset points",
            ha="center",
            fontweight="bold",
        )
    ax.set_ylabel("throughput (samples/s)")
    ax.set_xlabel("dp/tp/pp/micro_batch/zero")
    ax.set_ylim(bottom=0, top=max([o.throughput_samples_per_s or 0 for o in ran] + [1]) * 1.12)
    present = {o.fits for o in ran}
    legend = [
        Patch(color=colours[k], label=f"fits: {v}") for k, v in _FIT_WORDS.items() if k in present
    ]
    ax.legend(handles=legend, fontsize="small", loc="upper right")
    extra = (
        f" (best {PLOT_BARS} of {sum(o.ok for o in ranked)})"
        if len(ran) < sum(o.ok for o in ranked)
        else ""
    )
    ax.set_title((title or "throughput per configuration") + extra)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


_FIT_WORDS = {True: "yes", False: "no", None: "unknown"}


def _short_label(point: Point) -> str:
    return f"{point.dp}/{point.tp}/{point.pp}/{_dash(point.micro_batch)}/{point.zero}"


def write_outputs(
    ranked: Sequence[Outcome],
    out_dir: str | os.PathLike[str],
    title: str,
    notes: Sequence[str],
    verified: Sequence[Verification] = (),
) -> list[Path]:
    """Write plan.csv, plan.md and plan.png into ``out_dir`` (each atomically); every outcome,
    and the flow-level times of the ``verified`` ones."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [
        write_atomic(out / "plan.csv", csv_text(ranked, verified)),
        write_atomic(out / "plan.md", markdown_text(ranked, title, notes)),
        save_figure(plot_figure(ranked, title), out / "plan.png", "png", reproducible=False),
    ]


# --------------------------------------------------------------------------- progress


def progress_line(done: int, total: int, elapsed_s: float, width: int = 24) -> str:
    """``planning [=====>    ] 37/120, 1m12s left``: a bar and the time left at the pace so far."""
    filled = width * done // total if total else width
    bar = "=" * filled if filled >= width else "=" * max(filled - 1, 0) + ">" * (filled > 0)
    text = f"planning [{bar.ljust(width)}] {done}/{total}"
    if 0 < done < total:
        text += f", {duration(elapsed_s / done * (total - done))} left"
    elif done and done == total:
        text += f", done in {duration(elapsed_s)}"
    return text


def duration(seconds: float) -> str:
    """Wall time for people: ``45s``, ``1m12s``, ``2h05m``."""
    whole = max(0, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
