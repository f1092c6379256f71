"""ZeRO-2 and ZeRO-3 with tensor parallelism in the 3D hybrid (pp = 1).

Hand formulas (:mod:`clustersim.strategies.hybrid.sharded`), per iteration and tensor rank,
with ``P`` = params / t values of 2 bytes (bf16) and ``m`` micro-batches, over the dp group:

* ZeRO-1: one reduce-scatter of ``2P`` bytes after the last backward, one all-gather after
  the step;
* ZeRO-2: a reduce-scatter after every micro-batch's backward (DeepSpeed's stage-2
  optimizer cannot accumulate a sharded gradient), then one all-gather: ``m + 1`` collectives;
* ZeRO-3: an all-gather before every forward and every backward and a reduce-scatter after
  every backward, no all-gather after the step: ``3 m`` collectives.

Each collective is a ring over the dp GPUs of one NVSwitch node:
(n-1)(alpha + S/(n B)) (tests/test_hybrid.py's reference cluster), all exposed.
Model states per GPU: Rajbhandari et al. 2020 (ZeRO), Section 5, of the 1/t slice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from clustersim.errors import ScenarioError

from .test_hybrid import LINK_LATENCY, NVLINK_BPS, doc, run


def ring_share_s(n: int, nbytes: float) -> float:
    return (n - 1) * (2 * LINK_LATENCY + nbytes / n / NVLINK_BPS)


def collectives_per_device(result: Any) -> Counter[str]:
    """How many dp collectives of each op device 0 ran in the iteration."""
    device = result.summary["workers"][0]
    return Counter(
        r.label.split()[0]
        for r in result.records
        if r.kind == "collective" and r.resource == device and "stage" in r.label
    )


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("tp, dp, m", [(2, 4, 2), (4, 2, 4), (2, 2, 1), (1, 4, 3)])
def test_sharded_zero_collectives_per_iteration(zero: int, tp: int, dp: int, m: int) -> None:
    """Counts of dp collectives per device, and the bytes per iteration they move."""
    result = run(doc(tp=tp, dp=dp, gpus=tp * dp, batch=dp * m, micro_batch=1, zero=zero))
    counts = collectives_per_device(result)
    scatters = 1 if zero == 1 else m
    gathers = {1: 1, 2: 1, 3: 2 * m}[zero]
    assert counts == {"reducescatter": scatters, "allgather": gathers}
    p_bytes = result.summary["model"]["params"] / tp * 2
    size = result.summary["communication"]["allreduce_bytes"][0]
    assert size == pytest.approx(p_bytes, rel=1e-12)
    moved = (scatters + gathers) * size
    assert moved == pytest.approx({1: 2, 2: m + 1, 3: 3 * m}[zero] * p_bytes, rel=1e-12)


@pytest.mark.parametrize("tp, dp, m", [(2, 4, 2), (4, 2, 3), (2, 2, 4)])
def test_sharded_zero_time_adds_exposed_ring_collectives(tp: int, dp: int, m: int) -> None:
    """ZeRO-2 - ZeRO-1 = (m-1) reduce-scatters; ZeRO-3 - ZeRO-1 = (m-1) reduce-scatters +
    (2m-1) all-gathers, each (n-1)(alpha + S/(n B)) with S = 2 params / t."""
    times = {}
    for zero in (1, 2, 3):
        summary = run(doc(tp=tp, dp=dp, gpus=tp * dp, batch=dp * m, micro_batch=1, zero=zero))
        times[zero] = summary.summary["iteration_time_s"]
        size = summary.summary["communication"]["allreduce_bytes"][0]
    one = ring_share_s(dp, size)
    assert times[2] - times[1] == pytest.approx((m - 1) * one, rel=1e-6, abs=1e-12)
    assert times[3] - times[1] == pytest.approx((m - 1 + 2 * m - 1) * one, rel=1e-6)


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("tp, dp", [(2, 4), (4, 2), (8, 1)])
def test_sharded_zero_model_states_shard_the_tensor_slice(zero: int, tp: int, dp: int) -> None:
    """ZeRO paper: stage 2: 2P + (2 + 12) P / N_d; stage 3: (2 + 2 + 12) P / N_d, P = Psi / t."""
    result = run(doc(tp=tp, dp=dp, gpus=tp * dp, batch=dp * 2, micro_batch=1, zero=zero))
    p = result.summary["model"]["params"] / tp
    row = result.summary["memory"]["per_device"][result.summary["workers"][0]]
    assert row["weights_bytes"] == pytest.approx(2 * p / (dp if zero == 3 else 1), rel=1e-12)
    assert row["gradients_bytes"] == pytest.approx(2 * p / dp, rel=1e-12)
    assert row["optimizer_states_bytes"] == pytest.approx(12 * p / dp, rel=1e-12)
    assert row["communication_buffers_bytes"] > 0


@pytest.mark.parametrize("zero", [2, 3])
def test_sharded_zero_with_pipeline_parallelism_is_refused_as_deepspeed_does(zero: int) -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(tp=2, pp=2, dp=2, batch=8, zero=zero))
    problem = info.value.problems[0]
    assert problem.path == "zero.stage"
    assert "DeepSpeed's pipeline engine asserts ZeRO stage < 2" in problem.message


# --------------------------------------------------------------------------- the zero strategy


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("devices, m", [(2, 1), (2, 4), (4, 2), (8, 5)])
def test_zero_strategy_accumulates_gradients_over_micro_batches(
    stage: int, devices: int, m: int
) -> None:
    """Data parallelism alone with ``training.micro_batch``: per iteration and worker,
    ZeRO-1 reduce-scatters its buckets once (after the last micro-batch) and all-gathers
    them once; ZeRO-2 reduce-scatters after every micro-batch (DeepSpeed's stage-2
    default); ZeRO-3 also gathers every layer before each forward and backward of every
    micro-batch.  Bytes per iteration: Psi x 2 bytes (fp16) x (1, m, m) reduce-scattered and
    (1, 1, 2 m) gathered."""
    from .test_zero import UNIFORM
    from .test_zero import doc as zero_doc
    from .test_zero import run as zero_run

    batch = 400
    micro = batch // devices // m
    document = zero_doc(devices, stage=stage, iterations=1, bucket="50MB")
    document["training"].update(micro_batch=micro, precision="fp16")
    result = zero_run(document)
    psi = sum(x["params"] * x.get("repeat", 1) for x in UNIFORM)
    traffic = result.summary["communication"]
    scatters, gathers = {1: (1, 1), 2: (m, 1), 3: (m, 2 * m)}[stage]
    assert traffic["reducescatter_bytes"] == pytest.approx(scatters * 2 * psi, rel=1e-12)
    assert traffic["allgather_bytes"] == pytest.approx(gathers * 2 * psi, rel=1e-12)
    device = result.summary["workers"][0]
    counted = Counter(
        r.label.split()[0]
        for r in result.records
        if r.kind == "collective" and r.resource == device
    )
    buckets = result.summary["buckets"]["count"]
    layers = 4
    assert counted["reducescatter"] == scatters * buckets
    assert counted["allgather"] == (2 * m * layers if stage == 3 else buckets)
    computes = sum(1 for r in result.records if r.kind == "compute" and r.resource == device)
    assert computes == m * 2 * layers + 1  # forward and backward per layer, optimizer step
