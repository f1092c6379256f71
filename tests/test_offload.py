"""Offload to CPU memory over PCIe (``training.offload``) in the 3D hybrid.

Held to ZeRO-Offload (Ren et al. 2021, sections 4.1-4.2: fp16 gradients GPU->CPU, the
CPU optimizer step, fp16 parameters CPU->GPU, the gradient copy overlapped with
backward) and ZeRO-R/ZeRO-Infinity activation offload (Rajbhandari et al. 2020/2021:
activations to CPU memory after forward, back before backward), priced by the alpha-beta
cost of a PCIe copy (bytes / bandwidth, latency 0 here).  Reference cluster:
test_hybrid's, with the PCIe bandwidth given.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.errors import ScenarioError

from .test_hybrid import SHAPE, doc, run

GPU0, CPU = "rack0/node0/gpu0", "rack0/node0/cpu"
BF16 = 2  # bytes per value


def offload_doc(
    pcie: str = "1000GB/s", optimizer: str = "none", activations: str = "none", **kw: Any
) -> dict[str, Any]:
    document = doc(**kw)
    document["cluster"]["node"]["pcie"]["bandwidth"] = pcie
    document["training"]["offload"] = {"optimizer": optimizer, "activations": activations}
    return document


def _copy_rows(result: Any, label: str, device: str = GPU0) -> list[Any]:
    return [
        r
        for r in result.records
        if r.kind == "transfer" and r.label == label and device in (r.src, r.dst)
    ]


@pytest.mark.parametrize("gpus, zero", [(1, 0), (2, 0), (2, 1), (4, 1)])
def test_optimizer_offload_moves_gradients_and_parameters_once(gpus: int, zero: int) -> None:
    """ZeRO-Offload: per iteration a GPU sends its gradient shard (Psi / N_d values with
    ZeRO, Psi without) to the CPU and receives the same number of updated parameters."""
    document = offload_doc(optimizer="cpu", gpus=gpus, batch=4, zero=zero)
    result = run(document)
    states = run(doc(gpus=gpus, batch=4, zero=zero)).summary["memory"]["per_device"][GPU0]
    shard_values = states["weights_bytes"] / BF16 / (gpus if zero else 1)
    out = _copy_rows(result, "offload gradients")
    back = _copy_rows(result, "fetch parameters")
    assert sum(r.bytes for r in out) == pytest.approx(shard_values * BF16, rel=1e-12)
    assert sum(r.bytes for r in back) == pytest.approx(shard_values * BF16, rel=1e-12)
    report = result.summary["offload"]
    assert report["optimizer_bytes_per_iteration"] == pytest.approx(
        2 * shard_values * BF16, rel=1e-12
    )


def _backward_s(result: Any) -> float:
    rows = [
        r
        for r in result.records
        if r.kind == "compute" and r.label == "bwd" and r.resource == GPU0 and r.iteration == 0
    ]
    return rows[-1].end_s - rows[-1].start_s


@pytest.mark.parametrize("pcie_Bps, exposed", [(1000e9, False), (2e9, True)])
def test_gradient_copy_hides_behind_the_last_backward_unless_pcie_is_slow(
    pcie_Bps: float, exposed: bool
) -> None:
    """One GPU, no reduction: the gradient copy starts with the last backward, so the GPU
    waits max(0, copy - backward) for it, then the parameter copy back (alpha-beta,
    latency 0: bytes / PCIe bandwidth)."""
    shape = {**SHAPE, "layers": 8, "hidden": 1024, "heads": 16}
    pcie = f"{pcie_Bps / 1e9:g}GB/s"
    result = run(offload_doc(pcie=pcie, optimizer="cpu", gpus=1, batch=2, shape=shape))
    nbytes = sum(r.bytes for r in _copy_rows(result, "offload gradients"))
    copy_s = nbytes / pcie_Bps
    backward_s = _backward_s(result)
    assert (copy_s > backward_s) == exposed
    expected = max(0.0, copy_s - backward_s) + copy_s  # the return moves as many bytes
    assert result.summary["offload"]["pcie_exposed_s"] == pytest.approx(expected, rel=1e-9)


def test_gpus_sharing_the_cpu_link_copy_at_a_shared_rate() -> None:
    """The GPUs of a node reach their CPU through one PCIe cable: two GPUs copying their
    gradients at once each get half of it (max-min fair), so each copy takes twice as long
    as one GPU's alone (same bytes: no ZeRO, each copies all gradients)."""
    one = run(offload_doc(pcie="10GB/s", optimizer="cpu", gpus=1, batch=2, zero=0))
    two = run(offload_doc(pcie="10GB/s", optimizer="cpu", gpus=2, batch=2, zero=0))
    (a,) = _copy_rows(one, "offload gradients")
    rows = [r for r in two.records if r.label == "offload gradients" and r.iteration == 0]
    assert len(rows) == 2 and rows[0].bytes == pytest.approx(a.bytes, rel=1e-12)
    alone = a.bytes / 10e9
    assert a.end_s - a.start_s >= alone * (1 - 1e-9)
    for r in rows:
        assert r.end_s - r.start_s == pytest.approx(2 * alone, rel=1e-9)


def test_optimizer_states_leave_the_gpu_for_the_cpu() -> None:
    """The GPU keeps fp16 weights and gradients; Adam's 12 bytes per parameter go to the
    CPU (ZeRO-Offload), whose memory holds every GPU of its node's share."""
    bare = {"fragmentation": 0}  # the bare sum of the parts: no allocator allowance
    plain_doc, offload = (
        doc(gpus=2, batch=4, zero=1),
        offload_doc(optimizer="cpu", gpus=2, batch=4, zero=1),
    )
    plain_doc["training"]["memory"] = offload["training"]["memory"] = bare
    plain = run(plain_doc).summary["memory"]["per_device"]
    offloaded = run(offload).summary
    rows = offloaded["memory"]["per_device"]
    assert rows[GPU0]["optimizer_states_bytes"] == 0.0
    assert rows[GPU0]["peak_bytes"] == pytest.approx(
        plain[GPU0]["peak_bytes"] - plain[GPU0]["optimizer_states_bytes"], rel=1e-12
    )
    states = sum(row["optimizer_states_bytes"] for row in plain.values())
    assert offloaded["offload"]["cpu_memory_bytes"] == {CPU: pytest.approx(states, rel=1e-12)}


@pytest.mark.parametrize("m", [4, 8])
def test_activation_offload_keeps_two_micro_batches_on_the_gpu(m: int) -> None:
    """GPipe on one GPU (forwards 0..m-1, backwards m-1..0) with ``resident`` 2: the first
    m - 2 micro-batches go to the CPU and come back; on the GPU at once are two (the
    last forward and the one before it, or one in use and one prefetched)."""
    kw: dict[str, Any] = {"gpus": 1, "batch": m}
    plain = run(doc(**kw) | {"pipeline": {"schedule": "gpipe"}}).summary
    document = offload_doc(activations="cpu", **kw)
    document["pipeline"] = {"schedule": "gpipe"}
    result = run(document)
    per_mb = plain["activation_memory"]["0"]["peak_bytes"] / m
    row = result.summary["memory"]["per_device"][GPU0]
    assert row["activations_bytes"] == pytest.approx(2 * per_mb, rel=1e-12)
    assert result.summary["activation_memory"]["0"]["peak_bytes"] == pytest.approx(
        2 * per_mb, rel=1e-12
    )
    moved = sum(r.bytes for r in _copy_rows(result, "offload activations"))
    back = sum(r.bytes for r in _copy_rows(result, "fetch activations"))
    assert moved == back == pytest.approx((m - 2) * per_mb, rel=1e-12)
    report = result.summary["offload"]
    assert report["activation_bytes_per_iteration"] == pytest.approx(
        2 * (m - 2) * per_mb, rel=1e-12
    )
    assert report["cpu_memory_bytes"][CPU] == pytest.approx((m - 2) * per_mb, rel=1e-12)


def test_slow_pcie_exposes_activation_fetches() -> None:
    """Fetching a micro-batch back takes bytes / PCIe bandwidth and starts one operation
    ahead of its backward: with a fast PCIe it hides behind that operation (nothing
    exposed); with a slow one each of the m - 2 fetches exposes at least its copy time
    minus one backward."""
    shape = {**SHAPE, "seq": 1024}
    results = {
        bw: run(
            offload_doc(pcie=f"{bw / 1e9:g}GB/s", activations="cpu", gpus=1, batch=8, shape=shape)
            | {"pipeline": {"schedule": "gpipe"}}
        )
        for bw in (10000e9, 1e9)
    }
    assert results[10000e9].summary["offload"]["pcie_exposed_s"] == pytest.approx(0, abs=1e-12)
    slow = results[1e9]
    fetches = _copy_rows(slow, "fetch activations")
    assert len(fetches) == 6
    bound = sum(r.bytes / 1e9 for r in fetches) - 6 * _backward_s(slow)
    assert bound > 0
    assert slow.summary["offload"]["pcie_exposed_s"] >= bound * (1 - 1e-9)


@pytest.mark.parametrize(
    "changes, path, words",
    [
        ({"zero": 2}, "training.offload", "pipeline (3D hybrid) strategy, not by zero"),
        ({"cpu_memory": "1MB", "optimizer": "cpu"}, "training.offload", "more than its"),
    ],
)
def test_impossible_offload_is_an_error(changes: dict[str, Any], path: str, words: str) -> None:
    document = offload_doc(optimizer=changes.get("optimizer", "cpu"), batch=8)
    if "zero" in changes:
        del document["pipeline"], document["parallelism"], document["training"]["micro_batch"]
        document["zero"] = {"stage": changes["zero"]}
    if "cpu_memory" in changes:
        document["cluster"]["node"]["cpu"] = {"memory": changes["cpu_memory"]}
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == path
    assert words in str(info.value)


def test_offload_without_pipeline_keys_runs_the_hybrid() -> None:
    """``training.offload`` alone (plain data parallel) runs on the hybrid (pp = tp = 1,
    ``pipeline.micro_batches`` 8 by default)."""
    document = offload_doc(optimizer="cpu", gpus=2, batch=16)
    del document["pipeline"], document["parallelism"], document["training"]["micro_batch"]
    summary = run(document).summary
    assert summary["workload"] == "pipeline" and summary["offload"]["optimizer"] == "cpu"
