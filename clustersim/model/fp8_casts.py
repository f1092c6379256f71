"""Transformer Engine's fp8 casts and transposes around the matrix products of a layer.

fp8 training (``training.precision: fp8``) as NeMo and Megatron-Core run it: Transformer
Engine's (TE's) modules under ``fp8_autocast`` with the delayed-scaling recipe.  The
products run in fp8 (:mod:`.operators` lists them; the device prices them at its fp8 peak),
but an fp8 GEMM takes fp8 operands, and on Hopper each operand of the weight-gradient GEMM
transposed as well, so TE writes an fp8 copy and an fp8 transpose of each tensor it feeds
to one: memory-bound kernels this module lists, memory-bound operations of the layer like
its norms (``flops`` 0, ``bytes`` read and written).

Which products are TE's, and which tensors arrive in 16 bits (Megatron-Core, tags
core_v0.6.0 cac60ce and core_v0.9.0 1afee59): ``megatron/core/models/gpt/gpt_layer_specs.py``
builds ``linear_qkv`` and ``linear_fc1`` as ``TELayerNormColumnParallelLinear`` (TE's
LayerNormLinear: the layer norm fused in front of the product) and ``linear_proj`` and
``linear_fc2`` as ``TERowParallelLinear`` (TE's Linear); the attention core is TE's
DotProductAttention in 16 bits, the MLP's activation Megatron's fused bias-GeLU or
bias-SwiGLU (``megatron/core/transformer/mlp.py``, 16-bit output), and the output layer
Megatron's own ``ColumnParallelLinear`` (``gpt_model.py``) outside ``fp8_autocast``
(``transformer_block.py``), so ``logits`` gets no casts.  TE's fused LayerNormMLP, which
writes the activation in fp8 and fuses dGeLU with the cast of fc1's output gradient
(``transformer_engine/pytorch/module/layernorm_mlp.py``), is not in Megatron-Core's spec
and is not modelled.

Per TE product ``m x n x k`` on one GPU (``m = b s`` rows, ``k`` the width of its input,
``n`` of its output; :mod:`.operators`), in bytes per value: a 16-bit value read 2, an fp8
value written 1 and its transpose another 1, an fp8 value read 1.  Sources: TE v1.9
(NVIDIA/TransformerEngine e79d915), ``transformer_engine/pytorch/module/linear.py``,
``layernorm_linear.py`` and ``base.py``; the kernels ``transformer_engine/common/transpose/
cast_transpose.cu`` (one pass reads the input and writes the cast and its transpose, the
amax reduced in the same pass) and ``transpose.cu``.  The same in every release 1.5 to 1.13;
where 2.x (v2.1, 450146a) differs it is said.

* ``fp8_cast.input`` (forward; ``proj``, ``fc2``: TE's Linear): its 16-bit input, ``m x k``
  values, cast and transposed in one kernel (``_Linear.forward``:
  ``fp8_cast_transpose_fused``), 2 + 1 + 1 = **4** bytes.  Under sequence parallelism TE 1.x
  only casts it (``cast_to_fp8``, **3** bytes; the condition ``not sequence_parallel``) and
  the backward transposes it (``_Linear.backward``: ``tex.fp8_transpose``,
  ``fp8_transpose.input``, 1 + 1 = **2** bytes); 2.x fuses both for a row-parallel Linear.
* ``fp8_transpose.norm_output`` (backward; ``qkv``, ``fc1``: LayerNormLinear): the norm
  writes its output in fp8 itself (``_LayerNormLinear.forward``: ``ln_out`` of dtype uint8
  from ``_apply_normalization``, no cast kernel), and the weight gradient's transposed copy
  of the ``m x k`` values (gathered first under sequence parallelism) is made by
  ``tex.fp8_transpose`` in ``_LayerNormLinear.backward``: **2** bytes (2.x makes it in the
  forward: the same bytes).  The norm's own bytes stay ``norm_residual``'s 16-bit ones (the
  byte per value its fp8 output saves is not taken off).
* ``fp8_cast.grad_output`` (backward; every TE product): the output gradient, ``m x n``
  values, cast and transposed in one kernel (``grad_output_preprocess``:
  ``fp8_cast_transpose_fused``; with a bias TE adds, ``fp8_cast_transpose_bgrad_fused``
  reduces its gradient in the same pass): **4** bytes.  A row-parallel product (``proj``,
  ``fc2``) under sequence parallelism receives it split ``t`` ways along the rows and gathers
  it in fp8: its ``m n / t`` values are cast (**3** bytes) and the ``m n`` gathered values
  transposed (**2** bytes).  TE's separate bias-gradient pass of that case
  (``grad_output_mat.sum(dim=0)``) does not run under Megatron-Core, which builds ``proj``,
  ``fc1`` and ``fc2`` with ``skip_bias_add=True`` (``transformer/attention.py``,
  ``transformer/mlp.py``; ``TELinear`` then passes ``return_bias``, and TE adds no bias):
  their biases are added, and their gradients reduced, by Megatron's bias-dropout-add and
  bias-activation fusions, as at bf16; ``qkv``'s bias is TE's, its gradient fused with the
  cast.
* ``fp8_cast.weight`` (once per step; every TE product): its weight, ``n x k`` values, cast
  and transposed into a cached fp8 workspace (``get_fp8_workspace``:
  ``Float8Tensor.cast_transpose_``): **4** bytes.  TE recasts it when ``is_first_microbatch``
  is None (its default) or True (``Linear.forward``: ``update_workspace =
  is_first_microbatch is None or is_first_microbatch``); Megatron-Core sets it on the first
  micro-batch of each model chunk (``pipeline_parallel/schedules.py``:
  ``model.set_is_first_microbatch()``) and passes False after it (``TELinear.forward``,
  ``extensions/transformer_engine.py`` in 0.9, ``transformer/custom_layers/
  transformer_engine.py`` in 0.6), so the pipeline strategy
  (Megatron-Core's layout) casts each weight once per step, at its chunk's first forward;
  the data-parallel, ZeRO and parameter-server strategies take TE's default, a cast at every
  forward.  The dgrad GEMM reads the cached transpose.

The experts of an MoE layer (``expert_fc1``, ``expert_fc2`` per local expert, and the shared
experts' ``shared_fc1``, ``shared_fc2``; :mod:`.moe_operators`) are TE products too:
Megatron-Core builds them as ``TEGroupedMLP`` (``TEColumnParallelGroupedLinear`` and
``TERowParallelGroupedLinear``, ``megatron/core/transformer/moe/experts.py`` at core_v0.11.0
aa6207e2da) inside the block's ``fp8_autocast``, the activation between them Megatron's
16-bit SwiGLU.  TE's GroupedLinear casts each group's 16-bit input and transposes it in one
kernel (``_GroupedLinear.forward``: ``tex.fused_multi_quantize`` with row- and column-wise
usage in v2.1 450146ae6; ``fp8_multi_cast_transpose_fused`` in v1.13 e5edd6cc3), its output
gradients likewise in the backward (``fused_multi_quantize`` of ``grad_output_mats``), and
its weights into cached workspaces as TE's Linear does (``get_weight_workspace`` with
``update_workspace = is_first_microbatch is None or is_first_microbatch``): ``fp8_cast.input``
**4** bytes per ``m x k`` value, ``fp8_cast.grad_output`` **4** per ``m x n`` value,
``fp8_cast.weight`` 4 per ``n x k`` value, with no sequence split (the dispatcher has gathered
the rows; the shared experts under sequence parallelism are priced alike).  The router's
product is not TE's (16 bits, no casts).

Full recomputation re-runs a layer's forward, its ``fp8_cast.input`` included (not the
weight's: it is cached).  Not priced: the amax of each tensor (reduced inside the cast
kernels: one atomic max per thread block) and the recipe's per-step amax-history reduction
and scale update (a few values per tensor, kilobytes per step); the fp8 norm output's saving
(above); the gradients the GEMMs write (16-bit, as at bf16).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..compute.models import Operation
from .transformer import Transformer

PREFIX = "fp8_"
"""Names of the operations of this module start with it."""
INPUT = "fp8_cast.input"
INPUT_TRANSPOSE = "fp8_transpose.input"
NORM_OUTPUT = "fp8_transpose.norm_output"
GRAD_OUTPUT = "fp8_cast.grad_output"
WEIGHT = "fp8_cast.weight"

LAYERNORM_LINEAR = frozenset({"qkv", "fc1"})
"""Products of TE's LayerNormLinear (Megatron-Core's ``TELayerNormColumnParallelLinear``)."""
LINEAR = frozenset({"proj", "fc2"})
"""Products of TE's Linear (``TERowParallelLinear``): row-parallel."""
GROUPED_LINEAR = frozenset({"expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2"})
"""Products of an MoE layer's experts (:mod:`.moe_operators`): TE's GroupedLinear
(Megatron-Core's ``TEGroupedMLP``) and the shared experts' TE Linear, on the rows the
dispatcher gathered: no sequence split."""

READ_16 = 2
"""Bytes of a 16-bit value read."""
WRITE_8 = 1
"""Bytes of an fp8 value written (its transpose: as many again)."""
READ_8 = 1
"""Bytes of an fp8 value read."""
CAST = READ_16 + WRITE_8
"""Bytes per value of a cast: 3."""
CAST_TRANSPOSE = READ_16 + 2 * WRITE_8
"""Bytes per value of a fused cast and transpose: 4."""
TRANSPOSE = READ_8 + WRITE_8
"""Bytes per value of a transpose of an fp8 tensor: 2."""


class Fp8Casts(NamedTuple):
    """What decides a layer's fp8 casts beyond its products' shapes."""

    sequence_split: int = 1
    """GPUs a row-parallel product's output-gradient rows are split over by sequence
    parallelism: tp with sequence parallelism, else 1 (none)."""

    @classmethod
    def of(
        cls, precision: str | None, shape: Transformer | None, tp: int, sequence_parallel: bool
    ) -> Fp8Casts | None:
        """The casts of a run in ``precision`` of ``shape`` on ``tp`` GPUs per tensor group
        (None unless it trains a transformer in fp8)."""
        if precision != "fp8" or shape is None:
            return None
        return cls(tp if sequence_parallel and tp > 1 else 1)


def is_cast(op: Operation) -> bool:
    """True for an operation of this module."""
    return op.name.startswith(PREFIX)


def _memory(name: str, nbytes: float) -> Operation:
    return Operation(name, 0, 0, 0, 0, 0.0, nbytes)


def _te_products(ops: Iterable[Operation]) -> list[Operation]:
    return [op for op in ops if op.name in LAYERNORM_LINEAR | LINEAR | GROUPED_LINEAR]


def forward_casts(forward: Iterable[Operation], fp8: Fp8Casts) -> list[Operation]:
    """The casts of the forward products ``forward``, per micro-batch (module docstring)."""
    per_value = CAST if fp8.sequence_split > 1 else CAST_TRANSPOSE
    return [
        _memory(INPUT, (per_value if op.name in LINEAR else CAST_TRANSPOSE) * op.m * op.k)
        for op in _te_products(forward)
        if op.name in LINEAR or op.name in GROUPED_LINEAR
    ]


def backward_casts(forward: Iterable[Operation], fp8: Fp8Casts) -> list[Operation]:
    """The casts and transposes the backward of the forward products ``forward`` runs, per
    micro-batch (module docstring)."""
    split = fp8.sequence_split
    out: list[Operation] = []
    for op in _te_products(forward):
        values = op.m * op.n
        if op.name in LINEAR and split > 1:
            out.append(_memory(GRAD_OUTPUT, CAST * values / split + TRANSPOSE * values))
            out.append(_memory(INPUT_TRANSPOSE, TRANSPOSE * op.m * op.k))
        else:
            out.append(_memory(GRAD_OUTPUT, CAST_TRANSPOSE * values))
        if op.name in LAYERNORM_LINEAR:
            out.append(_memory(NORM_OUTPUT, TRANSPOSE * op.m * op.k))
    return out


def weight_casts(forward: Iterable[Operation]) -> list[Operation]:
    """The weight casts of the forward products ``forward``: once per step under Megatron-Core
    (module docstring), whatever the micro-batch."""
    return [_memory(WEIGHT, CAST_TRANSPOSE * op.n * op.k) for op in _te_products(forward)]
