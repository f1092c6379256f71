"""Builders of the cases of measured runs (the production family's, :mod:`.production`,
and its held-out cases, :mod:`.held_out`): a scenario of ``scenarios/production/`` simulated
and turned into its source's own metric with the source's own FLOP or token count
(:func:`megatron_hardware_flops`, :func:`tokens_per_gpu`), so that expected and got are the
same quantity; nccl-tests' all-reduce on catalog nodes (:func:`collective_case`).  Units:
seconds, FLOP/s, tokens/s, GB/s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api import simulate
from . import nccl_tests
from .case import CALIBRATION, HELD_OUT, Case, Tolerance, Value, scenario

FAMILY = "production"
CASE_TOLERANCE = 0.20
"""Largest relative error a case may have."""
VTRAIN = "Bang et al. 2024 (vTrain, MICRO 2024), data/ground_truth_multi.csv"


def megatron_hardware_flops(
    batch: float, seq: float, layers: float, hidden: float, vocab: float
) -> float:
    """FLOPs of one iteration by Narayanan et al. 2021, Equation 3 (full recomputation
    counted): ``96 B s l h^2 (1 + s/6h + V/16lh)``."""
    b, s, n, h, v = batch, seq, layers, hidden, vocab
    return 96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


Metric = Callable[[float], float]
"""The source's metric of a simulated iteration time (seconds)."""


def seconds() -> Metric:
    """The metric is the iteration time itself (s)."""
    return lambda t: t


def flops_per_gpu(flops_per_iteration: float, gpus: int) -> Metric:
    """FLOP/s per GPU of an iteration of ``flops_per_iteration`` FLOPs on ``gpus`` GPUs."""
    return lambda t: flops_per_iteration / (gpus * t)


def tokens_per_gpu(tokens_per_iteration: float, gpus: int) -> Metric:
    """Tokens per second per GPU of an iteration of ``tokens_per_iteration`` tokens."""
    return lambda t: tokens_per_iteration / (gpus * t)


def measured_case(
    family: str,
    folder: str,
    file: str,
    cid: str,
    title: str,
    source: str,
    expected: float,
    unit: str,
    read: Callable[[dict[str, Any]], float],
    split: str,
    known_gap: str = "",
) -> Case:
    """A measured run: ``scenarios/<folder>/<file>`` simulated, ``read`` from its summary in
    the source's ``unit``, within :data:`CASE_TOLERANCE`; ``split``: calibration or held
    out; ``known_gap``: why it misses its tolerance today (:attr:`Case.known_gap`)."""

    def compute() -> Value:
        return read(simulate(scenario(folder, file)).summary)

    where = f"scenarios/{folder}/{file}"
    tolerance = Tolerance(rel=CASE_TOLERANCE)
    return Case(
        cid, family, title, source, expected, unit, tolerance, compute, where, split, known_gap
    )


def training_case(
    cid: str,
    file: str,
    title: str,
    source: str,
    expected: float,
    unit: str,
    metric: Metric,
    split: str = CALIBRATION,
    known_gap: str = "",
) -> Case:
    """A measured training run of the production family: ``scenarios/production/<file>``'s
    iteration time in the source's ``unit`` (:func:`measured_case`)."""
    return measured_case(
        FAMILY,
        "production",
        file,
        cid,
        title,
        source,
        expected,
        unit,
        lambda summary: metric(summary["iteration_time_s"]),
        split,
        known_gap,
    )


def collective_case(
    cid: str, kind: str, nodes: int, gib: float, expected: float, source: str
) -> Case:
    """A measured nccl-tests all-reduce bus bandwidth (GB/s) on ``nodes`` catalog nodes."""
    size = gib * nccl_tests.GIB
    where = f"{kind}, {nodes} node{'s' if nodes > 1 else ''}, {gib:g} GiB all-reduce"
    return Case(
        cid,
        FAMILY,
        f"{where} bus bandwidth",
        source,
        expected,
        "GB/s",
        Tolerance(rel=CASE_TOLERANCE),
        lambda: nccl_tests.busbw_GBps(kind, nodes, size),
        f"{where}: clustersim.validation.nccl_tests.dgx_scenario, the defaults",
        CALIBRATION,
    )


VTRAIN_FILE = "VIA-Research/vTrain f8dda847, data/ground_truth_multi.csv"


def vtrain_case(cid: str, file: str, title: str, line: int, seconds_measured: float) -> Case:
    """A held-out row of vTrain's measured table (line ``line`` of the CSV, header line 1)."""
    return training_case(
        cid,
        file,
        title,
        f"{VTRAIN} ({VTRAIN_FILE}, line {line})",
        seconds_measured,
        "s",
        seconds(),
        HELD_OUT,
    )


def per_gpu_case(
    cid: str, file: str, title: str, source: str, expected: float, gpus: int, known_gap: str = ""
) -> Case:
    """A held-out run whose source publishes tokens/s per GPU: the summary's tokens/s over its
    ``gpus``."""
    return measured_case(
        FAMILY,
        "production",
        file,
        cid,
        title,
        source,
        expected,
        "tokens/s",
        lambda summary: summary["tokens_per_s"] / gpus,
        HELD_OUT,
        known_gap,
    )
