"""The kernels of a mixture-of-experts layer on one GPU, as Megatron-Core runs them.

An MoE layer (kind ``moe``; :mod:`.moe`) is a router, a token dispatcher that permutes the
tokens to the experts and back, and the experts' matrix products, grouped per local
expert.  For a micro-batch of ``b`` sequences of ``s`` tokens (``R = b s`` rows), hidden
``h``, ``E`` routed experts of width ``f`` (gated: ``g = 2`` columns in the first product,
else 1), ``k`` experts per token, ``S`` shared experts, tensor parallelism ``t`` (Megatron-Core
splits the experts over it: expert tensor parallelism = tp, and sequence parallelism is on
with tp > 1: core_v0.6.0 ``megatron/training/arguments.py`` line 499 refuses MoE with tp and
without it) and expert parallelism ``e`` (``E / e`` local experts per GPU):

* ``norm_residual`` -- the pre-MLP norm and the residual add, as a dense MLP's (11 bytes per
  ``R h`` value; :mod:`.operators`).  Megatron-Core's MoE spec builds the norm apart
  (``pre_mlp_layernorm=TENorm if num_experts``, ``megatron/core/models/gpt/gpt_layer_specs.py``
  at core_v0.11.0 aa6207e2da), where a dense MLP fuses it into its first product.
* ``router`` -- the gate, a product ``m = R / t`` (each GPU routes its sequence shard),
  ``n = E``, ``k = h`` (``torch.nn.functional.linear`` in ``Router.gating``,
  ``megatron/core/transformer/moe/router.py`` at core_v0.6.0 cac60ce4c8 and core_v0.11.0: not
  Transformer Engine's, so fp8 training runs it in 16 bits), and ``router_topk``, memory-bound
  over the ``R E / t`` scores (``TopKRouter.aux_loss_load_balancing``: ``torch.topk`` reads
  the logits, the load-balancing loss's fp32 softmax reads and writes them, the routing map
  is written and summed with the probabilities by ``switch_load_balancing_loss_func``):
  :data:`ROUTER_BYTES` = 4 + 4 + 4 + 1 + 4 + 1 = 18 bytes per score.
* ``permute`` -- ``moe_utils.permute`` (core_v0.11.0 lines 221-279): ``tokens.index_select(0,
  sorted_indices)`` copies each of the ``P`` token copies it sends to an expert, reading and
  writing ``h`` 16-bit values: ``4 P h`` bytes.
* ``sort_chunks`` -- the all-to-all dispatcher with more than one local expert regroups the
  tokens it received by local expert (``sort_chunks_by_idxs``, or with padding to capacity a
  ``transpose(0, 1).contiguous()``; ``MoEAlltoAllTokenDispatcher.token_permutation`` and
  ``token_unpermutation``, token_dispatcher.py at core_v0.11.0 lines 537-556 and 586-605):
  ``4 N h`` bytes each way, ``N = R k`` the token copies the GPU's experts process.
* ``expert_fc1``, ``activation``, ``expert_fc2`` -- per local expert, its share ``m = N e / E
  = R k e / E`` of the tokens (the mean load; :mod:`~clustersim.strategies.hybrid.experts`
  adds the busiest GPU's padding and skew) through products ``m x (g f / t) x h`` and ``m x h
  x (f / t)``, the activation between them as a dense MLP's (6 bytes per ``N f / t`` value
  gated, else 4).  One product per expert: Transformer Engine's grouped GEMM launches one
  cuBLAS GEMM per group (``nvte_multi_stream_cublas_gemm``,
  ``transformer_engine/common/gemm/cublaslt_gemm.cu`` lines 541-565 at v2.1 450146ae6,
  round-robin over its streams; priced one after the other).
* ``unpermute`` -- ``moe_utils.unpermute`` (core_v0.11.0 lines 282-350): the ``P`` expert
  outputs multiplied by their probabilities (``4 P h``), a zero ``G x h`` output
  (``2 G h``) and ``scatter_add_`` of the products into it (the ``P`` rows read, the output
  read and written: ``2 P h + 4 G h``): ``6 P h + 6 G h`` bytes.
* ``shared_fc1``, ``activation``, ``shared_fc2`` -- the shared experts, one MLP of width
  ``S f`` over all ``R`` rows (``SharedExpertMLP``, ``shared_experts.py``), split ``t`` ways.

The dispatcher sets ``P`` and ``G``.  clustersim prices expert parallelism (``e > 1``) as
the all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``; its communication in
:mod:`~clustersim.strategies.hybrid.experts`): each GPU permutes its own ``R / t`` rows,
``P = R k / t``, and restores them, ``G = R / t``.  Without expert parallelism it is
Megatron-Core's default (``moe_token_dispatcher_type = "allgather"`` in every release 0.6 to
0.13, ``transformer_config.py``), ``MoEAllGatherTokenDispatcher``: it gathers the rows of
the tensor and expert group first (core_v0.11.0 token_dispatcher.py lines 133-197), so it
permutes the copies for all its experts, ``P = N = R k``, and restores the gathered rows,
``G = R e``.  (Megatron-Core 0.6's allgather dispatcher gathers twice and scatters twice
where 0.11's permutes once: token_dispatcher.py at core_v0.6.0, lines 133-232; priced as
0.11's.)

Backward: as :func:`~.operators.backward_operations` does for every layer (two products per
product, 1.5 x the bytes of each memory-bound kernel).  FLOPs: the products add up to the
layer's (:attr:`~.transformer.Transformer.moe_flops`, router and active experts) x b / t.
Not priced: host synchronisations of the token counts (``tokens_per_expert.cpu()``), the
index computations (argsort, masked_select, histograms: a few bytes per token), TE's fused
permutation (``moe_permute_fusion``, off by default).  Units: elements, FLOPs, bytes.
"""

from __future__ import annotations

from ..compute.models import Operation
from .moe import MoE
from .transformer import Transformer

__all__ = ["moe_operations", "permuted_rows"]

ROUTER_BYTES = 18.0
"""Bytes per router score of the top-k and the load-balancing loss (module docstring)."""
PERMUTE_BYTES = 4.0
"""Bytes per permuted value: a 16-bit value read and written."""
UNPERMUTE_COPY_BYTES = 6.0
"""Bytes per permuted value of the unpermutation: scaled by its probability (read and
written, 4) and read by the scatter-add (2)."""
UNPERMUTE_OUTPUT_BYTES = 6.0
"""Bytes per restored value: zeroed (2), read and written by the scatter-add (4)."""
NORM_RESIDUAL_BYTES = 11.0
"""Bytes per ``R h`` value of the pre-MLP norm and the residual add (as :mod:`.operators`)."""


def _memory(name: str, nbytes: float) -> Operation:
    return Operation(name, 0, 0, 0, 0, 0.0, nbytes)


def _product(name: str, m: float, n: int, k: int) -> Operation:
    """A product of ``m`` rows (the mean load of an expert need not be whole)."""
    flops = 2.0 * m * n * k
    return Operation(name, max(1, round(m)), n, k, 1, flops, 2.0 * (m * k + k * n + m * n))


def permuted_rows(shape: Transformer, b: int, tp: int, ep: int) -> tuple[float, float]:
    """``(P, G)``: the token copies one GPU permutes and the rows it restores (module
    docstring), for ``b`` sequences."""
    moe = _experts(shape)
    rows = b * shape.seq
    if ep > 1:
        return rows * moe.top_k / tp, rows / tp
    return float(rows * moe.top_k), float(rows)


def moe_operations(shape: Transformer, b: int, tp: int, ep: int = 1) -> list[Operation]:
    """The forward kernels of one MoE layer for ``b`` sequences on one GPU of ``tp`` tensor
    and ``ep`` expert-parallel ranks (module docstring)."""
    moe = _experts(shape)
    if moe.experts % ep:
        raise ValueError(f"ep {ep} does not divide the {moe.experts} experts")
    h, rows, gate = shape.hidden, b * shape.seq, 2 if shape.gated_ffn else 1
    act = 6.0 if shape.gated_ffn else 4.0
    local = moe.experts // ep
    tokens = rows * moe.top_k  # N: token copies this GPU's experts process
    per_expert = tokens / local
    f = moe.expert_ffn // tp
    permuted, restored = permuted_rows(shape, b, tp, ep)
    ops = [
        _memory("norm_residual", NORM_RESIDUAL_BYTES * rows * h),
        _product("router", rows / tp, moe.experts, h),
        _memory("router_topk", ROUTER_BYTES * rows * moe.experts / tp),
        _memory("permute", PERMUTE_BYTES * permuted * h),
    ]
    regroup = ep > 1 and local > 1
    if regroup:
        ops.append(_memory("sort_chunks", PERMUTE_BYTES * tokens * h))
    ops += [_product("expert_fc1", per_expert, gate * f, h) for _ in range(local)]
    ops.append(_memory("activation", act * tokens * f))
    ops += [_product("expert_fc2", per_expert, h, f) for _ in range(local)]
    if regroup:
        ops.append(_memory("sort_chunks", PERMUTE_BYTES * tokens * h))
    unpermute = UNPERMUTE_COPY_BYTES * permuted + UNPERMUTE_OUTPUT_BYTES * restored
    ops.append(_memory("unpermute", unpermute * h))
    if moe.shared_experts:
        width = moe.shared_experts * moe.expert_ffn // tp
        ops += [
            _product("shared_fc1", rows, gate * width, h),
            _memory("activation", act * rows * width),
            _product("shared_fc2", rows, h, width),
        ]
    return ops


def _experts(shape: Transformer) -> MoE:
    if shape.moe is None:
        raise ValueError("a dense transformer has no experts")
    return shape.moe
