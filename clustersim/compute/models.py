"""Compute models: the seconds a list of operators takes on one device (a plugin registry).

An :class:`Operation` is one kernel: a matrix product (``m x k`` by ``k x n``, ``batch``
times; ``flops`` = 2 batch m n k) or a memory-bound kernel (``flops`` 0; softmax, GeLU,
layer norm, dropout), with the ``bytes`` it reads and writes in device memory; ``work``
(default 1) is the hardware FLOPs per counted FLOP of a kernel that recomputes inside itself
(a fused FlashAttention backward), so ``flops`` stays the model's count.

* ``flat``: ``sum(flops) / (peak x efficiency)`` -- memory-bound kernels cost nothing, as
  every FLOP of the model runs at one rate (the simulator's model before shaped work).
* ``roofline`` (default): each operation takes
  ``max(W / (peak x efficiency x eff(W)), bytes / (memory bandwidth x memory_efficiency))``,
  ``W = work x flops``, with ``eff`` the :class:`~clustersim.compute.curve.EfficiencyCurve`;
  the scenario's ``efficiency`` multiplies the curve (the part of the end-to-end rate no
  kernel measurement sees: framework, launches between kernels, kernels not listed), and
  ``memory_efficiency`` (``compute.memory_efficiency``, default 1) is the share of the memory
  bandwidth memory-bound kernels reach (``clustersim calibrate profile --scenario`` fits
  it).  The attention core (:data:`ATTENTION_CORE`) takes its own peak and curve where the
  device has them (``attention``, a :class:`ProductRate`: fp8 training runs it in 16 bits),
  and so do the other products fp8 training keeps in 16 bits (:data:`SIXTEEN_BIT_KERNELS`,
  the output layer's; ``sixteen_bit``).

Units: FLOPs, bytes, FLOP/s, B/s, seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, NamedTuple

from ..registry import Registered, Registry
from .curve import DEFAULT_CURVE, EfficiencyCurve


class Operation(NamedTuple):
    """One kernel of a layer on one GPU (see the module docstring); sizes in elements."""

    name: str
    m: int
    n: int
    k: int
    batch: int
    flops: float
    """FLOPs (2 batch m n k for a product, 0 for a memory-bound kernel)."""
    bytes: float
    """Bytes read and written in device memory."""
    work: float = 1.0
    """FLOPs the hardware runs per counted FLOP: above 1 for a kernel that recomputes inside
    itself what the model's FLOP count does not see (FlashAttention's backward: 1.25)."""


ATTENTION_CORE = frozenset(
    {
        "scores",
        "context",
        "flash_attention",
        "scores.dgrad",
        "scores.wgrad",
        "context.dgrad",
        "context.wgrad",
        "flash_attention.backward",
    }
)
"""Kernels of the attention core, forward and backward: the products of queries and keys and
of scores and values with their gradients' products, and the fused attention kernel with its
backward (:mod:`clustersim.model.operators`)."""

SIXTEEN_BIT_KERNELS = frozenset(
    {"logits", "logits.dgrad", "logits.wgrad", "pooler", "router", "router.dgrad", "router.wgrad"}
)
"""Products fp8 training runs in 16 bits besides the attention core, forward and backward: the
output layer's (the LM head's ``logits`` and its gradients' products), BERT's ``pooler`` and
an MoE layer's ``router`` (:mod:`clustersim.model.operators`).  Megatron-Core (tags core_v0.6.0 cac60ce and core_v0.9.0
1afee59) builds the output layer as its own ``tensor_parallel.ColumnParallelLinear``
(``megatron/core/models/gpt/gpt_model.py``, ``self.output_layer``; ``torch.matmul`` in
``megatron/core/tensor_parallel/layers.py``, not Transformer Engine) and the pooler as a
``torch.nn.Linear`` (``megatron/core/models/bert/pooler.py``, ``get_linear_layer``), and
``TransformerBlock.forward`` (``megatron/core/transformer/transformer_block.py``) opens
Transformer Engine's ``fp8_autocast`` around its layers only: the final norm, the output
layer and the loss run after it closes.  An MoE layer's ``router`` (and its gradients'
products) is Megatron-Core's own ``torch.nn.functional.linear`` (``Router.gating``,
``megatron/core/transformer/moe/router.py`` at core_v0.6.0 cac60ce and core_v0.11.0
aa6207e2da), not Transformer Engine's: 16 bits as well."""


class ProductRate(NamedTuple):
    """The peak (FLOP/s) and curve a set of products runs at where it differs from the other
    products' (fp8 training keeps its attention core and its output layer in 16 bits)."""

    peak_flops: float
    curve: EfficiencyCurve


AttentionRate = ProductRate
"""The name :class:`ProductRate` had while only the attention core used it (kept for scripts
that import it)."""


def _model_line(name: str, cls: type[ComputeModel]) -> str:
    return f"{name:<12} {cls.description}"


class ComputeModel(Registered):
    """How long operations take on a device of peak ``peak_flops`` (FLOP/s), scenario
    ``efficiency``, memory bandwidth ``bandwidth_Bps`` (B/s) and efficiency ``curve``;
    ``attention`` the attention core's own peak and curve (:data:`ATTENTION_CORE`), if it has
    them; ``sixteen_bit`` those of the other products an fp8 run keeps in 16 bits
    (:data:`SIXTEEN_BIT_KERNELS`), if it has them; ``memory_efficiency`` the share of
    ``bandwidth_Bps`` memory-bound kernels reach (0 < m <= 1)."""

    registry: ClassVar[Registry[type[ComputeModel]]] = Registry(
        "compute-models", "compute model", describe=_model_line
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    shaped: ClassVar[bool] = True
    """False: the model prices FLOPs alone, so callers may keep passing FLOPs."""

    def __init__(
        self,
        peak_flops: float,
        efficiency: float,
        bandwidth_Bps: float,
        curve: EfficiencyCurve = DEFAULT_CURVE,
        attention: ProductRate | None = None,
        memory_efficiency: float = 1.0,
        sixteen_bit: ProductRate | None = None,
    ) -> None:
        self.peak_flops = peak_flops
        self.efficiency = efficiency
        self.bandwidth_Bps = bandwidth_Bps
        self.curve = curve
        self.attention = attention
        self.memory_efficiency = memory_efficiency
        self.sixteen_bit = sixteen_bit

    def operation_seconds(self, op: Operation) -> float:
        """Seconds of one operation."""
        raise NotImplementedError

    def seconds(self, ops: Iterable[Operation]) -> float:
        """Seconds of ``ops`` run one after the other."""
        return sum(self.operation_seconds(op) for op in ops)


class Flat(ComputeModel):
    """flops / (peak x efficiency); memory-bound kernels cost nothing."""

    name = "flat"
    description = "flops / (peak x efficiency), whatever the shape (memory-bound kernels free)"
    shaped = False

    def operation_seconds(self, op: Operation) -> float:
        return op.flops / (self.peak_flops * self.efficiency)


class Roofline(ComputeModel):
    """max(flops / (peak x efficiency x eff(flops)), bytes / (bandwidth x memory_efficiency))
    per operation."""

    name = "roofline"
    description = (
        "max(flops / (peak x efficiency x eff(F)), bytes / (memory bandwidth x "
        "memory_efficiency)) per kernel, eff(F) = e_max F / (F + F_half)"
    )

    def operation_seconds(self, op: Operation) -> float:
        compute, work = 0.0, op.flops * op.work
        if work > 0:
            peak, curve = self.peak_flops, self.curve
            if self.attention is not None and op.name in ATTENTION_CORE:
                peak, curve = self.attention
            elif self.sixteen_bit is not None and op.name in SIXTEEN_BIT_KERNELS:
                peak, curve = self.sixteen_bit
            compute = work / (peak * self.efficiency * curve(work))
        return max(compute, op.bytes / (self.bandwidth_Bps * self.memory_efficiency))


def compute_model(
    name: str,
    peak_flops: float,
    efficiency: float,
    bandwidth_Bps: float,
    curve: EfficiencyCurve = DEFAULT_CURVE,
    path: str = "",
    attention: ProductRate | None = None,
    memory_efficiency: float = 1.0,
    sixteen_bit: ProductRate | None = None,
) -> ComputeModel:
    """The registered model ``name`` for one device (a ScenarioError at ``path`` if unknown)."""
    cls = ComputeModel.registry.lookup(name, path)
    return cls(
        peak_flops,
        efficiency,
        bandwidth_Bps,
        curve,
        attention,
        memory_efficiency=memory_efficiency,
        sixteen_bit=sixteen_bit,
    )
