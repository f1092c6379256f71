"""The validity rules of a parallel configuration, in one place.

Each rule returns the :class:`~clustersim.errors.Problem` that forbids a
configuration (with the scenario key path and what is allowed), or None (a list
of problems, for the schedules' shape).  Placement, the pipeline schedules and the
hybrid strategy raise these problems; ``clustersim plan`` uses the same rules to
leave forbidden configurations out of its search.

* workers and groups: :func:`grid_split_problem` (tp x pp divides the workers),
  :func:`grid_size_problem` (dp x tp x pp is the workers),
  :func:`tensor_group_node_problem` (a tensor-parallel group inside a node),
  :func:`tensor_group_type_problem` (and of one GPU type);
* :func:`tensor_parallel_problem` -- tensor parallelism splits a transformer's
  attention heads, so ``tp`` must divide them (Megatron-LM);
* :func:`sharded_zero_problem` -- ZeRO stages that shard gradients (2) or also
  parameters (3) run without pipeline parallelism (pp = 1, any tp), as in DeepSpeed;
* pipeline schedules, ``(p, m, v)``: :func:`schedule_problems` (what every schedule
  needs), :func:`micro_batch_per_stage_problem` (1F1B's warm-up),
  :func:`micro_batches_multiple_problem` (the interleaved schedule's groups);
* batch and stages: :func:`micro_batch_problem` (micro-batches divide a replica's
  samples), :func:`micro_batch_size_problem` (at least one sample each),
  :func:`stage_split_problem` (the model splits into the virtual stages),
  :func:`stage_layers_problem` (``pipeline.stage_layers`` fits them).

Plan's own search restrictions (powers of two for tp; at least one micro-batch per
stage whatever the schedule) stay in :mod:`clustersim.studies.plan.space`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..errors import Problem, ScenarioError

SHARDED_STAGE = 2
"""The first ZeRO stage that shards gradients (and, at 3, parameters)."""


def enforce(problem: Problem | None) -> None:
    """Raise ``problem`` as a :class:`~clustersim.errors.ScenarioError`, if there is one."""
    if problem is not None:
        raise ScenarioError(problem)


# --------------------------------------------------------------------------- workers and groups


def grid_split_problem(
    workers: int, tp: int, pp: int, path: str = "parallelism", cp: int = 1
) -> Problem | None:
    """Why ``tp`` x ``pp`` (x ``cp``) does not split ``workers`` into whole data-parallel
    replicas (``dp`` not given), or None.  The key is the degree that is not 1."""
    if workers % (tp * pp * cp) == 0:
        return None
    if cp > 1:
        return Problem(
            path,
            f"tp {tp} x cp {cp} x pp {pp} = {tp * cp * pp} does not divide the {workers} workers",
            f"tp x cp x pp dividing {workers}",
        )
    key = f"{path}.pp" if tp == 1 else f"{path}.tp" if pp == 1 else path
    return Problem(
        key,
        f"tp {tp} x pp {pp} = {tp * pp} does not divide the {workers} workers",
        f"tp x pp dividing {workers}",
    )


def grid_size_problem(
    workers: int, dp: int, tp: int, pp: int, path: str = "parallelism", cp: int = 1
) -> Problem | None:
    """Why ``dp`` x ``tp`` x ``pp`` (x ``cp``) is not the number of ``workers``, or None."""
    if dp * tp * pp * cp == workers:
        return None
    if cp > 1:
        return Problem(
            f"{path}.dp",
            f"dp {dp} x tp {tp} x cp {cp} x pp {pp} = {dp * tp * cp * pp}, but there are "
            f"{workers} workers",
            f"dp x tp x cp x pp = {workers} (or select workers with data_parallel.workers)",
        )
    return Problem(
        f"{path}.dp",
        f"dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp}, but there are {workers} workers",
        f"dp x tp x pp = {workers} (or select workers with data_parallel.workers)",
    )


class SpreadGroup(NamedTuple):
    """A tensor-parallel group that a placement put on several nodes."""

    order: Sequence[str]
    """``parallelism.order``, innermost axis first."""
    replica: int
    stage: int
    nodes: Sequence[str]
    """The nodes it spans, sorted."""


def tensor_group_node_problem(
    tp: int,
    gpus_per_node: int | None,
    allow_cross_node_tp: bool = False,
    *,
    spread: SpreadGroup | None = None,
    path: str = "parallelism",
) -> Problem | None:
    """Why a tensor-parallel group of ``tp`` GPUs cannot stay inside a node of
    ``gpus_per_node`` GPUs (None: the cluster has no nodes), or None.

    Tensor parallelism needs NVLink: its groups stay inside a node unless
    ``allow_cross_node_tp``.  ``spread`` is a group that fits a node but that the
    placement's order put on several.
    """
    if tp == 1 or allow_cross_node_tp or gpus_per_node is None:
        return None
    if tp > gpus_per_node:
        reason = f"tp {tp} is larger than a node's {gpus_per_node} GPUs"
    elif spread is not None:
        reason = (
            f"with order {list(spread.order)} the tensor-parallel group of replica "
            f"{spread.replica} stage {spread.stage} spans nodes {', '.join(spread.nodes)}"
        )
    else:
        return None
    return Problem(
        f"{path}.tp",
        f"{reason}; tensor parallelism needs NVLink inside a node",
        f"tp <= {gpus_per_node} with tp innermost in order, "
        "or parallelism.allow_cross_node_tp: true",
    )


def tensor_group_type_problem(
    group: Sequence[str],
    types: Sequence[str],
    replica: int,
    stage: int,
    path: str = "parallelism",
) -> Problem | None:
    """Why the tensor-parallel group ``group`` (its devices' GPU ``types``, "" for a GPU
    naming no preset) cannot run, or None: its GPUs compute every layer in lock step, shard
    for shard, so they must be of one type (a mixed cluster's nodes are each of one kind)."""
    kinds = sorted(set(types))
    if len(kinds) <= 1:
        return None
    parts = []
    for kind in kinds:
        mine = [x for x, t in zip(group, types, strict=True) if t == kind]
        where = mine[0] if len(mine) == 1 else f"{mine[0]} .. {mine[-1]}"
        parts.append(f"{len(mine)} x {kind or 'no preset'} ({where})")
    return Problem(
        f"{path}.tp",
        f"the tensor-parallel group of replica {replica} stage {stage} mixes GPU types: "
        f"{', '.join(parts)}; its GPUs split every layer in lock step",
        "tensor-parallel groups of one GPU type: tp dividing a node's GPUs with tp innermost "
        "in order, or allow_cross_node_tp over nodes of one kind only",
    )


def tensor_parallel_problem(tp: int, heads: int | None) -> Problem | None:
    """Why ``tp`` cannot split a model with ``heads`` attention heads (None: not a
    transformer), or None if it can."""
    if tp == 1:
        return None
    if heads is None:
        return Problem(
            "parallelism.tp",
            "tensor parallelism splits transformer layers; this model is a list of layers",
            "tp: 1, or a transformer model (a preset such as gpt3-1.3b, or model.transformer)",
        )
    if heads % tp:
        return Problem(
            "parallelism.tp",
            f"tp {tp} does not divide the model's {heads} attention heads",
            f"a divisor of {heads}",
        )
    return None


def tensor_mode_problems(
    mode: str, tp: int, depth: int, heads: int | None, sequence_parallel: bool
) -> list[Problem]:
    """What forbids ``parallelism.tp_mode`` ``mode`` with ``tp`` GPUs (``tp_depth``
    ``depth``) on a model with ``heads`` attention heads: the mode's own grid rules
    (:mod:`clustersim.parallel.tp_modes`), a transformer to split, and sequence parallelism
    only with Megatron's 1-D mode."""
    from .tp_modes import TensorParallelMode

    cls = TensorParallelMode.registry.lookup(mode, "parallelism.tp_mode")
    if cls.name == "1d":
        problem = tensor_parallel_problem(tp, heads)
        return [*cls.problems(tp, depth, heads), *([problem] if problem else [])]
    if tp == 1 and depth == 1:
        return []
    out = cls.problems(tp, depth, heads)
    if heads is None:
        out.append(
            Problem(
                "parallelism.tp_mode",
                f"tp_mode {mode} splits transformer layers; this model is a list of layers",
                "a transformer model (a preset such as gpt3-1.3b, or model.transformer)",
            )
        )
    if sequence_parallel and not cls.sequence_parallel:
        out.append(
            Problem(
                "parallelism.sequence_parallel",
                f"sequence parallelism is Megatron's 1-D scheme; tp_mode {mode} already "
                "splits every activation over the grid",
                "false, or tp_mode: 1d",
            )
        )
    return out


def sharded_zero_problem(stage: int, tp: int, pp: int, pipeline_section: bool) -> Problem | None:
    """Why ZeRO ``stage`` cannot run with ``tp`` x ``pp`` (and a ``pipeline`` section), or None.

    Stages 2 and 3 run with tensor parallelism (Megatron-DeepSpeed: each tensor rank's
    1/t slice is sharded over its dp group), with or without a pipeline section, but not
    with pipeline parallelism: DeepSpeed's pipeline engine asserts a ZeRO stage below 2,
    since sharded gradients would be reduced once per micro-batch on every stage.
    ``pipeline_section`` no longer matters; it is kept for callers.
    """
    del pipeline_section
    if stage < SHARDED_STAGE or pp == 1:
        return None
    return Problem(
        "zero.stage",
        f"ZeRO stage {stage} shards gradients{' and parameters' if stage == 3 else ''}; "
        "with pipeline parallelism DeepSpeed's pipeline engine asserts ZeRO stage < 2 "
        "(gradients accumulate over the micro-batches of each stage)",
        "0 or 1 with pp > 1; 2, 3 or fsdp with pp 1 (any tp)",
    )


# --------------------------------------------------------------------------- pipeline schedules


def schedule_problems(
    schedule: str, stages: int, micro_batches: int, chunks: int, multi_chunk: bool
) -> list[Problem]:
    """What forbids ``schedule`` for ``p`` stages, ``m`` micro-batches and ``v`` chunks per
    device, whatever the schedule: p >= 1, m >= 1, and v = 1 unless it is ``multi_chunk``."""
    out: list[Problem] = []
    if stages < 1:
        out.append(Problem("parallelism.pp", "needs at least one stage", ">= 1"))
    if micro_batches < 1:
        out.append(Problem("pipeline.micro_batches", "needs at least one micro-batch", ">= 1"))
    if chunks != 1 and not multi_chunk:
        out.append(
            Problem(
                "pipeline.chunks",
                f"schedule {schedule} runs one model chunk per device, not {chunks}",
                "1, or schedule: interleaved",
            )
        )
    return out


def micro_batch_per_stage_problem(
    schedule: str, stages: int, micro_batches: int, key: str = "pipeline.micro_batches"
) -> Problem | None:
    """Why ``m`` micro-batches cannot fill ``p`` stages of a schedule that warms up with a
    forward per later stage (1F1B, interleaved), or None.  ``key`` set ``m``."""
    if micro_batches >= stages:
        return None
    return Problem(
        key,
        f"{micro_batches} micro-batches are fewer than the {stages} pipeline stages; "
        f"{schedule} needs at least one micro-batch per stage",
        f">= {stages} micro-batches (or schedule gpipe / naive)",
    )


def micro_batches_multiple_problem(
    schedule: str, stages: int, micro_batches: int
) -> Problem | None:
    """Why ``m`` micro-batches do not come in whole groups of ``p`` (the interleaved
    schedule runs groups of p micro-batches through one chunk, then the next), or None."""
    if micro_batches % stages == 0:
        return None
    return Problem(
        "pipeline.micro_batches",
        f"the {schedule} schedule needs micro_batches ({micro_batches}) to be a "
        f"multiple of the pipeline stages ({stages})",
        f"a multiple of {stages}",
    )


# --------------------------------------------------------------------------- batch and stages


def micro_batch_problem(global_batch: int, dp: int, micro_batch: int) -> Problem | None:
    """Why micro-batches of ``micro_batch`` samples do not split a replica's share of
    ``global_batch`` (over ``dp`` replicas) into whole micro-batches, or None."""
    per_replica = global_batch / dp
    m = per_replica / micro_batch
    if m == int(m) and m >= 1:
        return None
    return Problem(
        "training.micro_batch",
        f"micro-batches of {micro_batch} do not divide the {per_replica:g} samples of a "
        f"replica (global batch {global_batch} / dp {dp})",
        f"a divisor of {per_replica:g}",
    )


def micro_batch_size_problem(global_batch: int, dp: int, micro_batches: int) -> Problem | None:
    """Why ``global_batch`` over ``dp`` replicas x ``m`` micro-batches leaves a micro-batch
    less than one sample, or None."""
    size = global_batch / dp / micro_batches
    if size >= 1:
        return None
    return Problem(
        "training.global_batch",
        f"global batch {global_batch} over dp {dp} x {micro_batches} micro-batches "
        f"gives {size:.3g} samples per micro-batch",
        f">= {dp * micro_batches} (one sample per micro-batch at least)",
    )


def stage_split_problem(
    blocks: int, pp: int, chunks: int, transformer: bool, uneven: bool = False
) -> Problem | None:
    """Why a model cannot be split into ``pp`` x ``chunks`` virtual stages without
    ``pipeline.stage_layers``, or None: with ``pipeline.stages: even`` a transformer's
    ``blocks`` go l / (p v) to each (Megatron-LM); any other model, and any model whose
    split may be ``uneven`` (``pipeline.stages: auto``, Megatron-Core's split, or
    ``balanced``), needs at least one of its ``blocks`` (transformer blocks, or layers) per
    stage."""
    parts = pp * chunks
    if transformer and not uneven:
        if blocks % parts == 0:
            return None
        what = f"pp {pp} x chunks {chunks}" if parts != pp else f"pp {pp}"
        return Problem(
            "parallelism.pp",
            f"the model's {blocks} transformer layers do not divide into {what} = {parts} "
            "stages (pipeline.stages: even)",
            f"pp x chunks dividing {blocks}, pipeline.stages: auto (Megatron-Core's split: "
            "fewer layers on the first and last stage), or pipeline.stage_layers",
        )
    if blocks >= parts:
        return None
    what = "transformer layers" if transformer else "layers"
    return Problem(
        "parallelism.pp",
        f"the model has {blocks} {what}, fewer than the {parts} (virtual) stages",
        f"pp x chunks <= {blocks}",
    )


def stage_layers_problem(stage_layers: Sequence[int], layers: int, stages: int) -> Problem | None:
    """Why ``pipeline.stage_layers`` is not ``stages`` counts adding up to ``layers``, or None."""
    path = "pipeline.stage_layers"
    if len(stage_layers) != stages:
        return Problem(
            path,
            f"lists {len(stage_layers)} stages, the pipeline has {stages} "
            "(virtual stages: pp x chunks)",
            f"{stages} layer counts",
        )
    if sum(stage_layers) != layers:
        return Problem(
            path,
            f"the counts add up to {sum(stage_layers)} layers, the model has {layers} "
            "(a layer with repeat: n counts n times)",
            f"counts adding up to {layers}",
        )
    return None
