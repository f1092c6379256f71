"""The keys users compare between training runs: MFU, tokens/s, time to train, GPU-hours, cost.

Spliced into summary.json after the strategy's keys, each key only when it can be computed
(older summaries keep their bytes):

* ``mfu`` -- model FLOPs utilisation: model FLOP/s achieved / (GPUs x peak FLOP/s), i.e.
  ``model_tflops_per_gpu`` x 1e12 / the workers' mean peak FLOP/s.  Model FLOPs count the
  forward and backward passes *without* recomputation (PaLM's definition, Chowdhery et al.
  2022, Appendix B; for a transformer clustersim's count is Megatron-LM's
  72 B s l h^2 (1 + s/6h + V/12lh), Narayanan et al. 2021: the 96 B s l h^2
  (1 + s/6h + V/16lh) of ``tflops_per_gpu`` with full recomputation less the recomputed
  forward pass of the transformer layers).  Present whenever the strategy counts FLOPs
  (data parallel, ZeRO, pipeline/hybrid), transformer or not: hand layers give their
  FLOPs per sample.
* ``tokens_per_s`` -- ``throughput_samples_per_s`` x sequence length (transformer models).
* ``time_to_train_s`` -- the job without failures: ``training.tokens`` -> the iterations
  :func:`clustersim.resilience.job_length` gives x ``iteration_time_s`` (the goodput keys'
  ``ideal_time_to_train_s``); ``training.duration`` -> that duration.
* ``gpu_hours`` -- the job's workers (every replica's, in one-replica mode) x
  ``time_to_train_s`` / 3600.
* ``cost`` -- ``gpu_hours`` x ``cluster.gpu_hour_price`` (in the price's currency).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parts import OPTIONAL, SummaryPart


@dataclass(frozen=True)
class UsageSummary(SummaryPart):
    """MFU, tokens/s, time to train, GPU-hours and cost (each only when computable)."""

    mfu: float | None = field(default=None, metadata=OPTIONAL)
    """Model FLOP/s achieved / (GPUs x peak FLOP/s), recomputation not counted."""
    tokens_per_s: float | None = field(default=None, metadata=OPTIONAL)
    """``throughput_samples_per_s`` x sequence length (transformer models)."""
    time_to_train_s: float | None = field(default=None, metadata=OPTIONAL)
    """Seconds the whole job takes without failures (``training.tokens`` or ``duration``)."""
    gpu_hours: float | None = field(default=None, metadata=OPTIONAL)
    """Workers x ``time_to_train_s`` / 3600."""
    cost: float | None = field(default=None, metadata=OPTIONAL)
    """``gpu_hours`` x ``cluster.gpu_hour_price``."""

    def empty(self) -> bool:
        """No key to write."""
        return not self.as_dict()


def usage_summary(
    *,
    model_tflops_per_gpu: float | None,
    peak_flops_per_gpu: float | None,
    samples_per_s: float,
    seq: int | None,
    job_iterations: int | None,
    duration_s: float | None,
    iteration_time_s: float,
    gpus: int,
    gpu_hour_price: float | None,
) -> UsageSummary | None:
    """The usage keys from a run's numbers (see the module docstring); None when none applies.

    ``job_iterations`` is the job's length in iterations from ``training.tokens`` (None
    without tokens); ``duration_s`` is ``training.duration``.
    """
    mfu = None
    if model_tflops_per_gpu is not None and peak_flops_per_gpu and model_tflops_per_gpu > 0:
        mfu = model_tflops_per_gpu * 1e12 / peak_flops_per_gpu
    tokens_per_s = samples_per_s * seq if seq else None
    time_s = None
    if duration_s is not None:
        time_s = duration_s
    elif job_iterations is not None:
        time_s = job_iterations * iteration_time_s
    gpu_hours = gpus * time_s / 3600.0 if time_s is not None else None
    cost = gpu_hours * gpu_hour_price if gpu_hours is not None and gpu_hour_price else None
    usage = UsageSummary(mfu, tokens_per_s, time_s, gpu_hours, cost)
    return None if usage.empty() else usage
