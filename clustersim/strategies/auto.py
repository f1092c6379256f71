"""Defaults for what a scenario leaves out: the choices a tuned production run makes.

A publication states a run's model, layout, batch and precision; it rarely states every knob
the team tuned.  Where a scenario leaves such a knob to clustersim (the value ``auto``, the
default), the training strategy chooses it the way Megatron-Core's and NeMo's recipes do, by
its own memory and cost model, deterministically:

* ``parallelism.sequence_parallel`` -- on wherever tp > 1 with Megatron's 1-D tensor
  parallelism (:func:`sequence_parallel`);
* ``training.recompute`` -- for a transformer, the least recomputation (none, then selective,
  then full; in the pipeline strategy per pipeline stage) with which every GPU fits its memory;
  full where nothing fits, and the run is marked as not fitting, as a forced one is
  (:func:`least_recompute`, :func:`choose_recompute`);
* ``training.micro_batch`` -- where neither it nor ``pipeline.micro_batches`` is written: one
  sample, as NeMo's and Megatron-Core's pre-training recipes (:func:`micro_batch`);
* ``pipeline.chunks`` and ``pipeline.stages`` -- the pipeline strategy's
  (:mod:`clustersim.strategies.hybrid.auto`).

Every choice is an :class:`~clustersim.metrics.AutoChoice` in the strategy's
``auto_choices``, keyed by the scenario key path it stands for: summary.json's
``auto_choices``, the lines ``validate`` and ``run`` print, the report card's, and the values
``scenario.resolved.yaml`` writes (so that the resolved file runs to the same result with
nothing left to choose).  A value the scenario writes is never changed.  Units: bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import Problem, ScenarioError
from ..metrics import AutoChoice
from ..model.memory import memory_summary, with_settings
from ..scenario.training import RECOMPUTE_MODES
from ..units import format_size

RECOMPUTE_KEY = "training.recompute"
SEQUENCE_PARALLEL_KEY = "parallelism.sequence_parallel"
CHUNKS_KEY = "pipeline.chunks"
STAGE_LAYERS_KEY = "pipeline.stage_layers"
MICRO_BATCH_KEY = "training.micro_batch"
AUTO = "auto"


def sequence_parallel(
    given: bool | str, tp: int, tp_mode: str, runs_it: bool
) -> tuple[bool, AutoChoice | None]:
    """``parallelism.sequence_parallel`` resolved: ``given`` when written; ``auto`` is on
    wherever ``tp`` > 1 with a mode that ``runs_it`` (Megatron's 1-D: Megatron-Core's and
    NeMo's recipes pass ``--sequence-parallel`` with every tensor-parallel layout; the 2-D/3-D
    modes already split every activation), with the choice to report when tp > 1 (at tp 1
    nothing is split and nothing is chosen)."""
    if given != AUTO:
        return bool(given), None
    if tp == 1:
        return False, None
    reason = (
        f"tp {tp}: Megatron-Core's and NeMo's recipes run sequence parallelism with tensor "
        "parallelism (Korthikanti et al. 2022)"
        if runs_it
        else f"tp_mode {tp_mode} splits every activation over its grid itself"
    )
    return runs_it, AutoChoice(runs_it, reason)


def micro_batch(
    per_replica: int, stages: int, allowed: Callable[[int], bool]
) -> tuple[int, AutoChoice] | None:
    """``training.micro_batch`` of a transformer run by the pipeline strategy that writes
    neither it nor ``pipeline.micro_batches``: the smallest micro-batch (samples) that splits
    a replica's ``per_replica`` samples into a count of micro-batches the schedule of
    ``stages`` stages takes (``allowed(m)``) -- one sample wherever the schedule allows it, as
    NeMo's and Megatron-Core's pre-training recipes run (``micro_batch_size=1``): with
    pipeline parallelism the bubble shrinks as the micro-batches grow (Narayanan et al. 2021,
    Section 3.3) and 1F1B holds at most ``stages`` in flight whatever their count; without,
    they are gradient-accumulation steps and the least activation memory.  None when no
    divisor of ``per_replica`` gives an allowed count."""
    for size in range(1, per_replica + 1):
        count = per_replica // size
        if per_replica % size or not allowed(count):
            continue
        what = "micro-batches" if stages > 1 else "gradient-accumulation steps"
        why = (
            f"pp {stages}: micro-batches of {size} sample{'s' if size > 1 else ''}, {count} "
            f"{what} per replica, as NeMo's and Megatron-Core's pre-training recipes run them "
            "(micro_batch_size=1"
            + ("; the bubble shrinks as their count grows)" if stages > 1 else ")")
        )
        if size > 1:
            why += "; the schedule takes no count of smaller ones"
        return size, AutoChoice(size, why)
    return None


def recompute_modes(transformer: bool) -> tuple[str, ...]:
    """The modes ``recompute: auto`` tries, least first: a transformer's three; a list of
    layers none only (auto leaves a list of layers as it is)."""
    return RECOMPUTE_MODES if transformer else ("none",)


def least_recompute(
    modes: Sequence[str], peak: Callable[[str], float], capacity: float
) -> tuple[str, dict[str, float]]:
    """The first of ``modes`` whose ``peak(mode)`` (bytes) is within ``capacity`` (bytes), and
    the peaks tried on the way; the last mode (the most recomputation) when none fits."""
    tried: dict[str, float] = {}
    for mode in modes:
        tried[mode] = peak(mode)
        if tried[mode] <= capacity:
            return mode, tried
    return modes[-1], tried


def tried_text(tried: Mapping[str, float], capacity: float) -> str:
    """``none needs 93.1 GB, selective 71.9 GB of 80 GB``."""
    parts = [f"{mode} {format_size(peak)}" for mode, peak in tried.items()]
    parts[0] = parts[0].replace(" ", " needs ", 1)
    return f"{', '.join(parts)} of {format_size(capacity)}"


def fits_or_not(chosen: str, tried: Mapping[str, float], capacity: float) -> str:
    """The reason of one recompute choice: the least that fits, or nothing fits."""
    if tried[chosen] <= capacity:
        if len(tried) == 1:
            return f"fits without recomputation ({tried_text(tried, capacity)})"
        return f"the least recomputation that fits ({tried_text(tried, capacity)})"
    return f"nothing fits, the most recomputation taken ({tried_text(tried, capacity)})"


def choose_recompute(strategy: Any) -> None:
    """``training.recompute`` of a data-parallel or ZeRO ``strategy`` resolved in place, once
    its memory plan can be made: ``strategy.train`` becomes a copy holding the mode, and a
    choice made is added to ``strategy.auto_choices``.  The least recomputation with which
    every worker fits (its :meth:`memory_plan` with ``training.memory``), for a transformer;
    none for a list of layers."""
    train = strategy.train
    given = train.recompute
    if isinstance(given, list):
        raise ScenarioError(
            Problem(
                RECOMPUTE_KEY,
                f"one mode per pipeline stage ({given}), but the {strategy.name} strategy "
                "runs no pipeline",
                "auto, none, selective or full",
            )
        )
    if given != AUTO:
        return
    modes = recompute_modes(strategy.model.transformer is not None)
    settings = train.memory
    blocks = {}

    def peak(mode: str) -> float:
        strategy.train = train.model_copy(update={"recompute": mode})
        plan = with_settings(strategy.memory_plan(), settings)
        blocks[mode] = memory_summary(plan)
        return _overfill(blocks[mode])

    chosen, tried = least_recompute(modes, peak, 1.0)
    strategy.train = train.model_copy(update={"recompute": chosen})
    if len(modes) > 1:
        worst = blocks[chosen]
        device = worst.fullest_device or worst.peak_device
        capacity = worst.per_device[device].capacity_bytes
        peaks = {mode: blocks[mode].per_device[device].peak_bytes for mode in tried}
        reason = fits_or_not(chosen, peaks, capacity) + f" on the fullest GPU, {device}"
        strategy.auto_choices[RECOMPUTE_KEY] = AutoChoice(chosen, reason)


def _overfill(block: Any) -> float:
    """The fullest device's peak / capacity of a memory block (1 and below: every device fits)."""
    if block is None:
        return 0.0
    if block.fits:
        return 0.0
    device = block.fullest_device or block.peak_device
    row = block.per_device[device]
    return row.peak_bytes / row.capacity_bytes if row.capacity_bytes > 0 else float("inf")
