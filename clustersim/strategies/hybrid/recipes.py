"""Megatron-Core's production recipes in the 3D hybrid: which are in force, and why.

Megatron-Core trains large transformers at scale with four settings beyond the textbook
3D hybrid (flags of Megatron-LM's ``megatron/training/arguments.py``; its
``megatron/core/distributed/`` package; the large-model examples and NeMo recipes turn the
first three on):

* the **distributed optimizer** (``--use-distributed-optimizer``): ZeRO-1 over the
  data-parallel ranks (dp x cp) of every tensor and pipeline rank -- gradients
  reduce-scattered, optimizer states sharded, updated parameters all-gathered.  Here
  ``zero.stage: 1`` (:mod:`.sharded`); its memory is ZeRO-1's ``4 Psi + K Psi / N_d``.
* ``--overlap-grad-reduce``: gradients sit in buckets (:mod:`.grad_buckets`); a bucket's
  reduce-scatter (all-reduce without the distributed optimizer) starts as soon as every
  gradient in it is ready in the last micro-batch's backward of its model chunk, while the
  backward goes on.  Here ``data_parallel.allreduce.overlap``.
* ``--overlap-param-gather``: after the step the updated parameters are all-gathered bucket
  by bucket beside the next iteration's forward; a forward waits only for the buckets it
  uses.  Here ``zero.overlap_param_gather``.
* ``--tp-comm-overlap`` (off by default, in Megatron-Core too): Transformer Engine's
  userbuffers overlap each sequence-parallel all-gather and reduce-scatter with the matrix
  product beside it (:mod:`.tp_overlap`).  Here ``parallelism.tp_comm_overlap``.

Megatron-LM also keeps its gradients its own way: a contiguous buffer of *main gradients*,
in fp32 when training in bf16 (``--accumulate-allreduce-grads-in-fp32``, forced for bf16 in
``megatron/training/arguments.py``), which its distributed optimizer reduce-scatters in place
and never shards; in fp16 its optimizer keeps an fp32 copy of the gradients beside the master
weights.  A transformer here at ZeRO stage 0 or 1 is therefore accounted as Megatron-LM's table
says (:data:`clustersim.model.memory.MEGATRON`: 18 bytes per parameter in bf16 with Adam, 6 +
12/d with the distributed optimizer); ZeRO-2/3 are DeepSpeed's (Megatron-DeepSpeed) and keep
the ZeRO paper's accounting, as do lists of layers; ``training.memory.states`` picks either.
The gradient collectives carry ``data_parallel.allreduce.precision`` (:func:`grad_bytes_per_value`):
``fp32`` is Megatron-LM's reduction of those fp32 main gradients, ``auto`` the training
precision (NeMo's launcher recipes sync in bf16); the parameter all-gather carries the
training precision either way.

**Defaults.**  A transformer (a preset or ``model.transformer``) in this strategy runs with
the first three unless the scenario says otherwise: ``zero.stage`` not given means 1 (0
when ``data_parallel.allreduce.algorithm`` cannot reduce-scatter: tree, recursive doubling),
``data_parallel.allreduce.overlap`` not given means on, ``zero.overlap_param_gather`` not
given means on with the distributed optimizer and the gradient overlap.  A model given as
a list of layers keeps the textbook defaults (ZeRO 0, no overlap).  The overlaps apply to
the schedules that flush (not PipeDream's, whose updates are per micro-batch) with ZeRO 0
or 1 (ZeRO-2/3 reduce every micro-batch, :mod:`.sharded`); elsewhere they are reported off.
Megatron-LM's 2021 runs (``scenarios/megatron/``) predate these and pin them off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...collectives import algorithm
from ...errors import Problem, ScenarioError
from ...model import memory
from ...model.layers import BYTES_PER_VALUE
from ...model.memory import MEGATRON, ZERO, StateAccounting

DISTRIBUTED_OPTIMIZER_STAGE = 1
"""The ZeRO stage of Megatron-Core's distributed optimizer."""
BUCKET_PARAMS_MIN = 40_000_000
"""Megatron-Core's default bucket: max(40M, 1M x dp) parameters
(``megatron/core/distributed/distributed_data_parallel.py``: larger data-parallel groups
get larger buckets so that each ring step stays bandwidth-bound)."""
BUCKET_PARAMS_PER_RANK = 1_000_000
SHARDED_OPS = frozenset({"reducescatter", "allgather"})
"""What the distributed optimizer runs in place of the all-reduce."""


@dataclass(frozen=True)
class Recipes:
    """The production recipes in force in one hybrid run (module docstring)."""

    distributed_optimizer: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    bucket_params: float
    """Parameters per gradient bucket (per GPU), where a model chunk is bucketed."""


def default_zero_stage(scenario: Any, transformer: bool, algorithm_name: str) -> int:
    """``zero.stage`` if given, else 1 for a transformer (the distributed optimizer) whose
    gradient algorithm ``algorithm_name`` can reduce-scatter and all-gather, else 0."""
    zero = scenario.zero
    if zero is not None and "stage" in zero.model_fields_set:
        return zero.level
    if not transformer:
        return 0
    ops = algorithm(algorithm_name, "data_parallel.allreduce.algorithm").ops
    return DISTRIBUTED_OPTIMIZER_STAGE if SHARDED_OPS <= ops else 0


def state_accounting(train: Any, transformer: bool, zero: int) -> StateAccounting:
    """``training.memory.states`` if given, else Megatron-LM's accounting for a transformer
    at ZeRO stage 0 or 1 (Megatron's own optimizers), ZeRO's otherwise."""
    megatron = transformer and zero <= DISTRIBUTED_OPTIMIZER_STAGE
    return memory.state_accounting(train.memory.states, MEGATRON if megatron else ZERO)


def grad_bytes_per_value(sync: Any, precision: str) -> float:
    """Bytes of one gradient value in the data-parallel collectives:
    ``data_parallel.allreduce.precision`` (``sync.precision``), or with ``auto`` the training
    ``precision``'s (:data:`~clustersim.model.layers.BYTES_PER_VALUE`)."""
    return float(BYTES_PER_VALUE[precision if sync.precision == "auto" else sync.precision])


def resolve(layout: Any) -> Recipes:
    """The recipes of a checked :class:`~.layout.HybridLayout` (``zero``, ``dp``,
    ``schedule``, ``options`` set); a ScenarioError for a recipe asked where it cannot run."""
    scenario, zero = layout.scenario, layout.zero
    transformer = layout.model.transformer is not None
    sync = layout.config.allreduce
    overlaps_apply = layout.schedule.flush and zero < 2
    grad = sync.overlap if "overlap" in sync.model_fields_set else transformer
    grad = grad and overlaps_apply
    asked = scenario.zero.overlap_param_gather if scenario.zero is not None else None
    if asked and zero != DISTRIBUTED_OPTIMIZER_STAGE:
        raise ScenarioError(
            Problem(
                "zero.overlap_param_gather",
                f"the overlapped parameter all-gather is the distributed optimizer's; ZeRO "
                f"stage {zero} " + ("gathers no parameters" if zero == 0 else "gathers its own"),
                "zero.stage: 1, or leave overlap_param_gather out",
            )
        )
    if asked and not layout.schedule.flush:
        raise ScenarioError(
            Problem(
                "zero.overlap_param_gather",
                f"not modelled with the flush-free {layout.schedule.name} schedule (it "
                "updates per micro-batch)",
                "a schedule that flushes (1f1b, interleaved, gpipe, zb-h1, zb-v), or false",
            )
        )
    param = grad and transformer if asked is None else asked
    param = param and zero == DISTRIBUTED_OPTIMIZER_STAGE
    return Recipes(
        distributed_optimizer=zero == DISTRIBUTED_OPTIMIZER_STAGE,
        overlap_grad_reduce=grad,
        overlap_param_gather=param,
        tp_comm_overlap=_tp_comm_overlap(layout),
        bucket_params=_bucket_params(layout),
    )


def _bucket_params(layout: Any) -> float:
    """``data_parallel.allreduce.bucket`` in parameters if given (bytes of gradients as the
    collective carries them: ``layout.grad_bytes_per_value``), else Megatron-Core's default
    max(40M, 1M x dp)."""
    sync = layout.config.allreduce
    if "bucket" in sync.model_fields_set:
        return sync.bucket / layout.grad_bytes_per_value
    return float(max(BUCKET_PARAMS_MIN, BUCKET_PARAMS_PER_RANK * layout.dp))


def _tp_comm_overlap(layout: Any) -> bool:
    """``parallelism.tp_comm_overlap``, refused without sequence parallelism (Megatron-LM
    asserts it: the overlapped collectives are sequence parallelism's) or with a 2-D/3-D
    tensor mode."""
    par = layout.parallelism
    if not par.tp_comm_overlap:
        return False
    if layout.tp_mode.name != "1d":
        raise ScenarioError(
            Problem(
                "parallelism.tp_comm_overlap",
                f"overlaps Megatron's 1-D tensor-parallel collectives; tp_mode {par.tp_mode} "
                "has its own grid collectives",
                "tp_mode: 1d, or tp_comm_overlap: false",
            )
        )
    if not par.sequence_parallel:
        raise ScenarioError(
            Problem(
                "parallelism.tp_comm_overlap",
                "overlaps the all-gathers and reduce-scatters of sequence parallelism with the "
                "matrix products (Megatron-LM requires --sequence-parallel with it)",
                "sequence_parallel: true, or tp_comm_overlap: false",
            )
        )
    return True
