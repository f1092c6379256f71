"""Published measurements of real training runs and collectives, reproduced from the hardware
catalog and the published layout only (``clustersim reproduce --only production``).

Each training case runs a scenario of ``scenarios/production/``: its cluster is catalog presets
(``cluster.node: {preset: dgx-a100}``), its model, batch, tp/pp/dp and schedule are the ones its
source published, and no case sets an efficiency or any hardware number of its own -- a GPU
type's calibration is made once, on data kept out of this family (docs/hardware.md,
"Efficiency").  Where a source leaves a setting out, the scenario's header says what it takes
and from where (the framework's published recipe, or its stated default).  The collective cases
run nccl-tests' all-reduce on catalog nodes with clustersim's defaults
(:mod:`clustersim.validation.nccl_tests`).

Which runs are carried: those whose source publishes the model, the GPU count, tp, pp and dp,
the global batch, the micro-batch and, with pipeline parallelism, the schedule.  The runs left
out, and what clustersim gives for them, are listed in docs/accuracy.md ("Known gaps").

The cases are built by :mod:`.published` (the simulated iteration time turned into the source's
own metric with the source's own FLOP count, :func:`megatron_hardware_flops`, or token count,
so that expected and got are the same quantity); this module holds the calibration cases (the
runs the model was shaped on), :mod:`.held_out` the runs that shaped nothing.  Every case is
held within :data:`~.published.CASE_TOLERANCE` (a known gap: still missing it); the family's
mean absolute error, and its held-out cases' alone, within :data:`MEAN_TARGET`, unless marked
in :data:`MEAN_GAPS` (``clustersim reproduce`` prints them and exits 1 when one fails).
"""

from __future__ import annotations

from . import held_out
from .case import HELD_OUT, Case
from .published import (
    FAMILY,
    VTRAIN,
    collective_case,
    flops_per_gpu,
    megatron_hardware_flops,
    seconds,
    tokens_per_gpu,
    training_case,
)

__all__ = ["FAMILY"]  # the family's name, as every family module has it

MEAN_TARGET = 0.10
"""Largest mean absolute relative error of the family, and of its held-out cases alone."""
SPLIT_MEAN_TARGETS = {HELD_OUT: MEAN_TARGET}
"""Split -> the largest mean absolute relative error of the family's cases of that split."""
MEAN_GAPS: dict[str | None, str] = {}
"""Split (None: the whole family) -> why its mean is known to miss :data:`MEAN_TARGET`
(``clustersim.validation.MEAN_GAPS``: reported, and a failure once it is met)."""


KOR22 = "Korthikanti et al. 2022 (MLSys 2023, arXiv:2205.05198)"
NAR21 = "Narayanan et al. 2021 (SC21, arXiv:2104.04473), Table 2"
BLOOM = "BigScience, tr11-176B-ml README, training log, iteration 85376"
NEMO = "NVIDIA NeMo 24.07 performance summary (NVIDIA/NeMo docs, commit 070a0bb)"
FOUNDRY = "MosaicML LLM Foundry, scripts/train/benchmarking/README.md (061f2c7c)"
GPT3_175B_EQ3 = megatron_hardware_flops(1536, 2048, 96, 12288, 51200)
"""Equation 3's FLOPs of an iteration of Narayanan et al.'s 174.6B model at batch 1536."""

CALIBRATION_CASES: tuple[Case, ...] = (
    training_case(
        "kor22-175b",
        "kor22_175b_64.yaml",
        "GPT-3 175B, tp 8 x pp 8 (3 chunks), 64 A100s, selective recompute",
        f"{KOR22}, Table 5",
        13.75,
        "s",
        seconds(),
    ),
    training_case(
        "kor22-175b-full",
        "kor22_175b_64_full.yaml",
        "GPT-3 175B, tp 8 x pp 8 (3 chunks), 64 A100s, full recompute",
        f"{KOR22}, Table 5",
        18.13,
        "s",
        seconds(),
    ),
    training_case(
        "nar21-175b-384",
        "nar21_175b_384.yaml",
        "174.6B, tp 8 x pp 12 x dp 4, 384 A100s",
        f"{NAR21}, PTD, 384 GPUs",
        153e12,
        "FLOP/s",
        flops_per_gpu(GPT3_175B_EQ3, 384),
    ),
    training_case(
        "nar21-175b-1536",
        "nar21_175b_1536.yaml",
        "174.6B, tp 8 x pp 12 x dp 16, 1536 A100s",
        f"{NAR21}, PTD, 1536 GPUs",
        141e12,
        "FLOP/s",
        flops_per_gpu(GPT3_175B_EQ3, 1536),
    ),
    training_case(
        "bloom-176b",
        "bloom_176b_384.yaml",
        "BLOOM 176B, tp 4 x pp 12 x dp 8, 384 A100s",
        BLOOM,
        104.70,
        "s",
        seconds(),
    ),
    training_case(
        "vtrain-175b",
        "vtrain_175b_512.yaml",
        "GPT-3 175B, tp 8 x pp 8 x dp 8, 512 A100s, micro-batch 2",
        f"{VTRAIN}, row 175/512",
        55.1096,
        "s",
        seconds(),
    ),
    training_case(
        "vtrain-18b",
        "vtrain_18b_256.yaml",
        "18.4B GPT, tp 8 x dp 32, 256 A100s, micro-batch 8",
        f"{VTRAIN}, row 18.4/256",
        9.6036,
        "s",
        seconds(),
    ),
    training_case(
        "foundry-mpt70b-a100",
        "mosaic_mpt70b_a100_64.yaml",
        "MPT-70B, FSDP over 64 A100s, micro-batch 8 x 4",
        f"{FOUNDRY}, A100 80GB",
        410.0,
        "tokens/s",
        tokens_per_gpu(2048 * 2048, 64),
    ),
    training_case(
        "nemo-gpt3-175b-fp8",
        "nemo_gpt3_175b_512_fp8.yaml",
        "GPT-3 175B, tp 4 x pp 8 (6 chunks) x dp 16, 512 H100s, FP8",
        f"{NEMO}, GPT3-175B, 512 GPUs",
        782.0,
        "tokens/s",
        tokens_per_gpu(2048 * 2048, 512),
    ),
    training_case(
        "nemo-llama2-70b-fp8",
        "nemo_llama2_70b_64_fp8.yaml",
        "Llama 2 70B, tp 4 x pp 4 (20 chunks) x dp 4, 64 H100s, FP8",
        f"{NEMO}, LLAMA2-70B",
        1707.0,
        "tokens/s",
        tokens_per_gpu(128 * 4096, 64),
    ),
    training_case(
        "nemo-gpt3-175b-128-fp8",
        "nemo_gpt3_175b_128_fp8.yaml",
        "GPT-3 175B, tp 4 x pp 8 (6 chunks) x dp 4, 128 H100s, FP8",
        f"{NEMO}, GPT3-175B, 128 GPUs",
        726.0,
        "tokens/s",
        tokens_per_gpu(256 * 2048, 128),
    ),
    training_case(
        "nemo-llama3-70b-fp8",
        "nemo_llama3_70b_64_fp8.yaml",
        "Llama 3 70B, tp 4 x pp 4 (5 chunks) x cp 2 x dp 2, 64 H100s, FP8",
        f"{NEMO}, LLAMA3-70B",
        1533.0,
        "tokens/s",
        tokens_per_gpu(128 * 8192, 64),
    ),
)
"""The runs the model was shaped on (calibration)."""

NCCL_CASES: tuple[Case, ...] = (
    collective_case(
        "nccl-a100-1n",
        "DGX A100",
        1,
        16,
        234.89,
        "S. Bekman, Machine Learning Engineering, network/README.md (nccl-tests)",
    ),
    collective_case(
        "nccl-a100-4n",
        "DGX A100",
        4,
        8,
        192.0,
        "NVIDIA/nccl#812, NVIDIA: 'we measure 192GB/s' on DGX A100 (8 HDR NICs)",
    ),
    collective_case(
        "nccl-h100-1n",
        "DGX H100",
        1,
        8,
        480.43,
        "aws-samples/awsome-distributed-training, nccl-tests, one p5.48xlarge",
    ),
)
"""nccl-tests' all-reduce on catalog nodes (calibration: NCCL's link figures)."""

CASES: tuple[Case, ...] = (*CALIBRATION_CASES, *held_out.CASES, *NCCL_CASES)
"""The measured runs, in the order the family runs them."""

PUBLISHERS: dict[str, str] = {
    "kor22-175b": "NVIDIA",
    "kor22-175b-full": "NVIDIA",
    "nar21-175b-384": "NVIDIA",
    "nar21-175b-1536": "NVIDIA",
    "bloom-176b": "BigScience",
    "vtrain-175b": "KAIST",
    "vtrain-18b": "KAIST",
    "foundry-mpt70b-a100": "MosaicML",
    "nemo-gpt3-175b-fp8": "NVIDIA",
    "nemo-llama2-70b-fp8": "NVIDIA",
    "nemo-gpt3-175b-128-fp8": "NVIDIA",
    "nemo-llama3-70b-fp8": "NVIDIA",
    "nccl-a100-1n": "S. Bekman (Machine Learning Engineering)",
    "nccl-a100-4n": "NVIDIA",
    "nccl-h100-1n": "AWS",
    **held_out.PUBLISHERS,
}
"""Who measured each case: the family's independent sources."""
