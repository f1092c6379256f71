"""Device memory: model states (weights, gradients, optimizer states), activations, buffers.

The model-state bytes follow the ZeRO paper (Rajbhandari et al. 2020, Section 3.1
and 5): with ``Psi`` parameters, mixed precision and Adam, a device of plain data
parallelism holds 2 Psi bytes of fp16 weights, 2 Psi of fp16 gradients and
K Psi = 12 Psi of optimizer states (fp32 master weights, momentum, variance).
ZeRO stage 1 shards the optimizer states over the ``N_d`` data-parallel ranks,
stage 2 also the gradients, stage 3 also the weights (cases Z0-Z3 of
``validation/cases.md``).

In general the bytes per parameter are: weights and gradients
``BYTES_PER_VALUE[precision]`` each; optimizer states 4 bytes per fp32 state
(sgd none, momentum one, adam two) plus a 4-byte fp32 master copy of the
weights when training in fp16/bf16.

That is the ZeRO paper's accounting (:data:`ZERO`), which DeepSpeed and PyTorch keep.
Megatron-LM keeps its gradients in a contiguous buffer of *main gradients*, in fp32 when
training in bf16 (:data:`MEGATRON`; its table in ``docs/user-guide/features/dist_optimizer.md``):
bf16 weights 2 + fp32 gradients 4 + K = 12 bytes per parameter, 18 in all (the distributed
optimizer shards only K: 6 + 12 / d); in fp16 the buffer is fp16 and the optimizer keeps an
fp32 copy of the gradients beside the master weights (2 + 2 + 16 = 20, 4 + 16 / d); in fp32,
4 + 4 + 8 = 16 (8 + 8 / d).  :data:`STATE_ACCOUNTINGS` names both; ``training.memory.states``
picks one, the default being the strategy's (Megatron's for a transformer in the pipeline
strategy with Megatron's own optimizers, ZeRO's elsewhere).

A device's peak is the sum of its parts: model states are held the whole
iteration and the buffers are in use at the activation peak (an upper bound
that real frameworks reach within a few percent).  ``training.memory``
(:func:`with_settings`) adds an allocator fragmentation allowance, a fraction of
the other parts (:data:`DEFAULT_FRAGMENTATION`), reported as its own part, can leave the
communication buffers out, and can add the memory the CUDA context takes outside
PyTorch's allocator (``context``, reported as its own part).  Which of these a measured
figure holds depends on how it was read: ``torch.cuda.max_memory_allocated`` the parts
alone (fragmentation 0), ``max_memory_reserved`` the parts and the allocator's
fragmentation, ``nvidia-smi`` all of that and the context.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..metrics.summary import MemoryBlock, MemoryRow
from .layers import BYTES_PER_VALUE

__all__ = [
    "DeviceMemory",
    "MEGATRON",
    "ModelStates",
    "OPTIMIZER_STATES",
    "STATE_ACCOUNTINGS",
    "StateAccounting",
    "ZERO",
    "state_accounting",
    "memory_summary",
    "model_states",
    "optimizer_bytes_per_param",
    "over_capacity_message",
    "with_settings",
]

DEFAULT_FRAGMENTATION = 0.10
"""Default ``training.memory.fragmentation``: 10% of the other parts.  PyTorch's caching
allocator leaves freed blocks it cannot reuse for a differently sized request: GMLake (Guo
et al., ASPLOS 2024) measured 15% of memory lost on average (up to 33%) over eight LLM
fine-tuning setups on A100-80GB that used recomputation, offload and ZeRO, which fragment
more than plain training; we take 10% for the general case.  Set
``training.memory.fragmentation: 0`` for the bare sum (to compare with papers that count
model states and activations only), 0.15-0.3 for a pessimistic answer (see docs/writing-scenarios.md,
"Memory")."""

OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}
"""fp32 values of optimizer state per parameter."""
FP32_BYTES = 4


def optimizer_bytes_per_param(optimizer: str, precision: str) -> float:
    """K: optimizer-state bytes per parameter (fp32 states, plus fp32 master weights when the
    weights are kept in 16 bits: fp16, bf16, fp8; fp32 and tf32 keep fp32 weights).

    Adam in mixed precision: 4 (master) + 4 (momentum) + 4 (variance) = 12.
    """
    master = FP32_BYTES if BYTES_PER_VALUE[precision] < FP32_BYTES else 0
    return master + FP32_BYTES * OPTIMIZER_STATES[optimizer]


@dataclass(frozen=True)
class StateAccounting:
    """How a training framework keeps a parameter's model states: the bytes of its gradient
    and the fp32 copies its optimizer keeps beside the states of :func:`optimizer_bytes_per_param`,
    by precision (a precision not listed: the training precision's bytes, no copy)."""

    name: str
    description: str
    gradient_bytes: Mapping[str, float]
    """Bytes of one gradient value as the framework keeps it, by training precision."""
    optimizer_extra_bytes: Mapping[str, float]
    """fp32 bytes per parameter the optimizer keeps beyond K (sharded with it), by precision."""

    def gradients(self, precision: str) -> float:
        """Bytes of one kept gradient value when training in ``precision``."""
        return self.gradient_bytes.get(precision, BYTES_PER_VALUE[precision])

    def optimizer(self, optimizer: str, precision: str) -> float:
        """Optimizer bytes per parameter: K and the framework's extra fp32 copies."""
        extra = self.optimizer_extra_bytes.get(precision, 0.0) if OPTIMIZER_STATES[optimizer] else 0
        return optimizer_bytes_per_param(optimizer, precision) + extra


ZERO = StateAccounting(
    "zero",
    "the ZeRO paper's: gradients in the training precision, K = fp32 master weights and "
    "optimizer states ((2 + 2 + K) Psi in mixed precision)",
    {},
    {},
)
"""Rajbhandari et al. 2020, Section 3.1: what DeepSpeed and PyTorch keep."""
MEGATRON = StateAccounting(
    "megatron",
    "Megatron-LM's: bf16 and fp8 keep fp32 main gradients (2 + 4 + K = 18 bytes with Adam), "
    "fp16 keeps fp16 gradients and an fp32 copy in the optimizer (2 + 2 + K + 4 = 20)",
    {"bf16": FP32_BYTES, "fp8": FP32_BYTES},
    {"fp16": FP32_BYTES},
)
"""Megatron-LM, ``docs/user-guide/features/dist_optimizer.md`` (bytes per parameter: fp16
20, bf16 18, fp32 16; with the distributed optimizer 4 + 16/d, 6 + 12/d, 8 + 8/d) and
``megatron/training/arguments.py`` (bf16 accumulates and all-reduces gradients in fp32)."""
STATE_ACCOUNTINGS: dict[str, StateAccounting] = {a.name: a for a in (ZERO, MEGATRON)}
"""``training.memory.states`` names -> their accounting."""


def state_accounting(name: str | None, default: StateAccounting) -> StateAccounting:
    """The accounting ``training.memory.states`` names, or the strategy's ``default``."""
    return default if name is None else STATE_ACCOUNTINGS[name]


@dataclass(frozen=True)
class ModelStates:
    """Bytes of weights, gradients and optimizer states one device holds."""

    weights: float
    gradients: float
    optimizer_states: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer_states


def model_states(
    params: float,
    *,
    zero_stage: int = 0,
    dp: int = 1,
    precision: str,
    optimizer: str,
    accounting: StateAccounting = ZERO,
) -> ModelStates:
    """Model states of a device holding ``params`` parameters, sharded by ZeRO over ``dp`` ranks.

    ZeRO's accounting: stage 0: (2 + 2 + K) Psi; stage 1: 4 Psi + K Psi / N_d; stage 2:
    2 Psi + (2 + K) Psi / N_d; stage 3: (2 + 2 + K) Psi / N_d (mixed precision).
    ``accounting`` (:data:`MEGATRON`) may keep other gradient bytes and fp32 copies.
    """
    weights = params * BYTES_PER_VALUE[precision]
    gradients = params * accounting.gradients(precision)
    states = params * accounting.optimizer(optimizer, precision)
    if zero_stage >= 1:
        states /= dp
    if zero_stage >= 2:
        gradients /= dp
    if zero_stage >= 3:
        weights /= dp
    return ModelStates(weights, gradients, states)


@dataclass(frozen=True)
class DeviceMemory:
    """What one device holds at its peak, and what it can hold (bytes)."""

    weights: float
    gradients: float
    optimizer_states: float
    activations: float
    """Stored activations at the peak, with the recomputation chosen."""
    communication_buffers: float
    """Buckets, gathered parameters, send/receive buffers in use at the peak."""
    capacity: float
    fragmentation: float = 0.0
    """Allocator fragmentation allowance (bytes) on top of the parts above."""
    context: float = 0.0
    """Memory outside PyTorch's allocator: the CUDA context and libraries (bytes)."""

    @classmethod
    def of(
        cls, states: ModelStates, activations: float, buffers: float, capacity: float
    ) -> DeviceMemory:
        return cls(
            states.weights,
            states.gradients,
            states.optimizer_states,
            activations,
            buffers,
            capacity,
        )

    @property
    def peak(self) -> float:
        """Bytes at the peak of the iteration: the sum of the parts."""
        return (
            self.weights
            + self.gradients
            + self.optimizer_states
            + self.activations
            + self.communication_buffers
            + self.fragmentation
            + self.context
        )

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    def row(self) -> MemoryRow:
        """This device's row of the summary's ``memory.per_device``."""
        return MemoryRow(
            weights_bytes=self.weights,
            gradients_bytes=self.gradients,
            optimizer_states_bytes=self.optimizer_states,
            activations_bytes=self.activations,
            communication_buffers_bytes=self.communication_buffers,
            peak_bytes=self.peak,
            capacity_bytes=self.capacity,
            fits=self.fits,
            fragmentation_bytes=self.fragmentation or None,
            context_bytes=self.context or None,
        )

    def with_settings(
        self, fragmentation: float, buffers: bool, context: float = 0.0
    ) -> DeviceMemory:
        """This device with ``training.memory``: buffers left out unless ``buffers``, a
        ``fragmentation`` fraction of the remaining parts added as its own part, and
        ``context`` bytes outside the allocator."""
        kept = self.communication_buffers if buffers else 0.0
        parts = self.weights + self.gradients + self.optimizer_states + self.activations + kept
        return replace(
            self,
            communication_buffers=kept,
            fragmentation=fragmentation * parts,
            context=context,
        )


def with_settings(
    per_device: Mapping[str, DeviceMemory], settings: Any
) -> Mapping[str, DeviceMemory]:
    """``per_device`` with ``training.memory`` applied (``settings``: its ``fragmentation``,
    ``buffers`` and ``context``; the same mapping if it changes nothing)."""
    fragmentation, buffers = settings.fragmentation, settings.buffers
    context = getattr(settings, "context", 0.0)
    if fragmentation == 0 and buffers and context == 0:
        return per_device
    made: dict[DeviceMemory, DeviceMemory] = {}  # devices alike: the replicas of one rank
    out = {}
    for name, m in per_device.items():
        found = made.get(m)
        if found is None:
            found = made[m] = m.with_settings(fragmentation, buffers, context)
        out[name] = found
    return out


def memory_summary(per_device: Mapping[str, DeviceMemory]) -> MemoryBlock | None:
    """The ``memory`` block of summary.json (None without devices).

    ``fits`` (every device within its capacity), ``peak_bytes`` (the largest
    peak), ``peak_device`` (the first device with it), ``capacity_bytes`` (of that device),
    ``devices_over_capacity`` (how many) and ``per_device`` (each device's
    parts, peak, capacity and ``fits``); ``fullest_device`` (the first device with the
    largest peak / capacity) when it is not ``peak_device``.
    """
    if not per_device:
        return None
    peak_device = max(per_device, key=lambda d: per_device[d].peak)  # the first of equals
    fullest = max(per_device, key=lambda d: _fill(per_device[d]))
    if _fill(per_device[fullest]) == _fill(per_device[peak_device]):
        fullest = peak_device
    worst = per_device[peak_device]
    over = sum(1 for m in per_device.values() if not m.fits)
    return MemoryBlock(
        fits=over == 0,
        peak_bytes=worst.peak,
        peak_device=peak_device,
        capacity_bytes=worst.capacity,
        devices_over_capacity=over,
        per_device=_shared_rows(per_device),
        fullest_device=fullest if fullest != peak_device else None,
    )


def _fill(memory: DeviceMemory) -> float:
    """Peak over capacity (infinite for a device without memory that needs some)."""
    if memory.capacity > 0:
        return memory.peak / memory.capacity
    return float("inf") if memory.peak > 0 else 0.0


def over_capacity_message(memory: MemoryBlock | None) -> str:
    """One line saying which device needs how much more than it has ("" if all fit)."""
    if memory is None or memory.fits:
        return ""
    from ..units import format_size

    device = memory.fullest_device or memory.peak_device
    row = memory.per_device[device]
    parts = ", ".join(
        f"{key.removesuffix('_bytes').replace('_', ' ')} {format_size(getattr(row, key))}"
        for key in (
            "weights_bytes",
            "gradients_bytes",
            "optimizer_states_bytes",
            "activations_bytes",
            "communication_buffers_bytes",
            "fragmentation_bytes",
            "context_bytes",
        )
        if getattr(row, key) is not None
    )
    return (
        f"does not fit in device memory: {memory.devices_over_capacity} device(s) over "
        f"capacity; {device} needs {format_size(row.peak_bytes)} of "
        f"{format_size(row.capacity_bytes)} ({parts})"
    )


def _shared_rows(per_device: Mapping[str, DeviceMemory]) -> dict[str, MemoryRow]:
    """Each device's summary row, one object for devices with equal memory (the replicas of
    one stage and tensor rank: 131,072 rows of a few dozen kinds)."""
    made: dict[DeviceMemory, MemoryRow] = {}
    out = {}
    for name, m in per_device.items():
        row = made.get(m)
        if row is None:
            row = made[m] = m.row()
        out[name] = row
    return out
