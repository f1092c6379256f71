"""Measured memory of real training runs, reproduced from their published description.

Each case runs a scenario of ``scenarios/memory/`` -- the run as its publication states it:
model shape, GPUs, tp/pp/dp, micro-batch, sequence, precision, recomputation, optimizer
sharding -- and compares the summary's memory of the device the figure was read on with the
published figure.  What a figure counts depends on how it was read, and the scenario says
so in ``training.memory`` (:mod:`clustersim.model.memory`): PyTorch's
``max_memory_allocated`` counts the tensors alone (``fragmentation: 0``); NVML and
``nvidia-smi`` also count the caching allocator's reserve (the default fragmentation
allowance) and the CUDA context, which those sources measure themselves (``context``).

Every case is held within :data:`CASE_TOLERANCE` and marked calibration (it was used to
choose a change of the memory model) or held out (it shaped nothing); ``clustersim
reproduce`` prints each split's mean.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from ...metrics import MemoryRow
from ..case import CALIBRATION, HELD_OUT, Case, Tolerance, Value, scenario
from .reading import FAMILY, device, memory_of, model_states_bytes

CASE_TOLERANCE = 0.10
"""Largest relative error a measured case may have."""
MIB = 2**20

MEGATRON = "NVIDIA/Megatron-LM functional tests"
HF_ANATOMY = (
    "Hugging Face Transformers docs, Model training anatomy "
    "(huggingface.co/docs/transformers/main/en/model_memory_anatomy), vanilla training"
)
HF_SINGLE_GPU = (
    "Hugging Face Transformers docs v4.27.2, Efficient Training on a Single GPU "
    "(huggingface.co/docs/transformers/v4.27.2/en/perf_train_gpu_one)"
)

Part = Callable[[MemoryRow], float]
"""What a case reads from a device's row of the summary (bytes)."""


def peak(row: MemoryRow) -> float:
    """The device's peak: every part, fragmentation and context included."""
    return row.peak_bytes


def _measured(
    cid: str,
    file: str,
    title: str,
    source: str,
    expected: float,
    part: Part,
    split: str,
    gpu: str | None = None,
) -> Case:
    """A measured figure: ``part`` of device ``gpu`` (default: the fullest) of
    ``scenarios/memory/<file>``."""

    def compute() -> Value:
        return part(device(memory_of(scenario("memory", file)), gpu))

    where = f"scenarios/memory/{file}" + (f", {gpu}" if gpu else "")
    tolerance = Tolerance(rel=CASE_TOLERANCE)
    return Case(cid, FAMILY, title, source, expected, "B", tolerance, compute, where, split)


LAST_RANK = "rack0/node0/gpu7"
"""Where Megatron-LM logs memory: its last rank (the tensorboard writer's)."""
TP4 = "megatron_7b_tp4_h100.yaml"
PP4 = "megatron_7b_pp4_vp8_h100.yaml"
TP4_SOURCE = f"{MEGATRON}, gpt3_7b_tp4_pp1_memory_speed, golden_values_dev_dgx_h100.json"
PP4_SOURCE = f"{MEGATRON}, gpt3_7b_tp1_pp4_memory_speed, golden_values_dev_dgx_h100.json"

CASES: tuple[Case, ...] = (
    _measured(
        "mlm-7b-tp4-peak",
        TP4,
        "7B GPT, tp 4 x dp 2, micro-batch 2, seq 8192, bf16, distributed optimizer: max allocated",
        f"{TP4_SOURCE}, mem-max-allocated-bytes",
        57_143_791_616,
        peak,
        CALIBRATION,
        LAST_RANK,
    ),
    _measured(
        "mlm-7b-tp4-states",
        TP4,
        "the same run: allocated after the iteration (model states)",
        f"{TP4_SOURCE}, mem-allocated-bytes",
        20_663_519_232,
        model_states_bytes,
        CALIBRATION,
        LAST_RANK,
    ),
    _measured(
        "mlm-7b-pp4-peak",
        PP4,
        "7B GPT, pp 4 x 8 chunks x dp 2, micro-batch 1, seq 8192, bf16, distributed "
        "optimizer: max allocated, last stage",
        f"{PP4_SOURCE}, mem-max-allocated-bytes",
        60_720_852_992,
        peak,
        CALIBRATION,
        LAST_RANK,
    ),
    _measured(
        "mlm-7b-pp4-states",
        PP4,
        "the same run: allocated after the iteration (model states), last stage",
        f"{PP4_SOURCE}, mem-allocated-bytes",
        24_808_996_864,
        model_states_bytes,
        CALIBRATION,
        LAST_RANK,
    ),
    _measured(
        "hf-bert-b4",
        "hf_bert_large_b4.yaml",
        "BERT-large, fp32, batch 4, seq 512, one V100: GPU memory occupied (NVML)",
        f"{HF_ANATOMY}: 14949 MB",
        14949 * MIB,
        peak,
        CALIBRATION,
    ),
    _measured(
        "hf-bert-b1",
        "hf_bert_large_b1_accum4.yaml",
        "BERT-large, fp32, batch 1 x 4 accumulation steps: GPU memory occupied (NVML)",
        f"{HF_SINGLE_GPU}, Gradient Accumulation: 8681 MB",
        8681 * MIB,
        peak,
        HELD_OUT,
    ),
    _measured(
        "hf-bert-b1-gc",
        "hf_bert_large_b1_accum4_checkpointing.yaml",
        "BERT-large, fp32, batch 1 x 4, gradient checkpointing: GPU memory occupied (NVML)",
        f"{HF_SINGLE_GPU}, Gradient Checkpointing: 6775 MB",
        6775 * MIB,
        peak,
        HELD_OUT,
    ),
)
