"""Data-parallel training with bucketed all-reduce, held to hand-computed times.

The reference setup: GPUs on one switch (links 100 GB/s, no latency unless
said), 100 TFLOP/s and 1 TB/s memory each; four layers of 25e6 parameters
(100 MB of fp32 gradients) and 1 GFLOP per sample forward (2 backward); a
global batch of 400.  With 4 workers (100 samples each) a layer's forward
takes 1 ms and its backward 2 ms, the sgd step 12 B x 1e8 / 1 TB/s = 1.2 ms,
and a ring all-reduce of S bytes 2(n-1)/n x S / B (alpha-beta).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from clustersim import simulate
from clustersim.cli import main
from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

from .conftest import SCENARIOS, TEXTBOOK

LAYERS = 4
PARAMS = 25e6
FLOPS = 1e9
RATE = 100e12
MEMORY_BPS = 1e12
BATCH = 400
GRAD_BYTES = PARAMS * 4
OPTIMIZER_S = 12 * LAYERS * PARAMS / MEMORY_BPS


def doc(
    devices: int = 4,
    *,
    workers: str | None = None,
    bucket: str = "100MB",
    overlap: bool = True,
    latency: str = "0",
    network: str = "flow",
    iterations: int = 3,
    stragglers: list[dict[str, Any]] | None = None,
    algorithm: str = "ring",
    batch: int = BATCH,
) -> dict[str, Any]:
    """A training scenario document on a switch of ``devices`` GPUs."""
    data_parallel: dict[str, Any] = {
        "allreduce": {"algorithm": algorithm, "bucket": bucket, "overlap": overlap}
    }
    if workers is not None:
        data_parallel["workers"] = workers
    return {
        "name": "dp-test",
        "cluster": {
            "kind": "switch",
            "devices": devices,
            "device": {"flops": "100TFLOPS", "memory_bandwidth": "1TB/s"},
            "link": {"bandwidth": "100GB/s", "latency": latency},
        },
        "network": {"model": network, **TEXTBOOK},
        "stragglers": stragglers or [],
        "model": {
            "layers": [{"name": "block", "params": PARAMS, "flops": FLOPS, "repeat": LAYERS}]
        },
        "training": {"global_batch": batch, "iterations": iterations},
        "data_parallel": data_parallel,
    }


def run(document: dict[str, Any]) -> dict[str, Any]:
    return simulate(parse_scenario(document)).summary


def allreduce_s(document: dict[str, Any], nbytes: float, n: int) -> float:
    """Alpha-beta time of a ring all-reduce of ``nbytes`` over gpu0 .. gpu{n-1}."""
    topology = build_topology(parse_scenario(document).cluster)
    call = CollectiveCall("allreduce", tuple(f"gpu{i}" for i in range(n)), nbytes)
    return analytical_time(call, topology)


def layer_s(n: int) -> float:
    """Forward time of one layer with the batch split over ``n`` workers."""
    return FLOPS * (BATCH / n) / RATE


# -- (a) no overlap ---------------------------------------------------------


@pytest.mark.parametrize("bucket", ["100MB", "1GB"])
def test_no_overlap_exposes_whole_allreduce(bucket: str) -> None:
    """iteration = forward + backward + all-reduce of every gradient + optimizer step."""
    d = doc(bucket=bucket, overlap=False)
    ring = allreduce_s(d, LAYERS * GRAD_BYTES, 4)
    assert ring == pytest.approx(2 * 3 / 4 * LAYERS * GRAD_BYTES / 100e9, rel=1e-12)
    expected = LAYERS * 3 * layer_s(4) + ring + OPTIMIZER_S
    assert expected == pytest.approx(19.2e-3)
    s = run(d)
    assert s["iteration_times_s"] == pytest.approx([expected] * 3, rel=1e-9)
    assert s["iteration_time_s"] == pytest.approx(expected, rel=1e-9)


# -- (b) overlap --------------------------------------------------------------


@pytest.mark.parametrize("latency", ["0", "2us"])
@pytest.mark.parametrize("network", ["flow", "analytical"])
def test_overlap_exposes_only_last_bucket(latency: str, network: str) -> None:
    """Backward per layer (2 ms) > one bucket's all-reduce (1.5 ms): only the last is exposed."""
    d = doc(latency=latency, network=network)
    last = allreduce_s(d, GRAD_BYTES, 4)
    assert last < 2 * layer_s(4)
    expected = LAYERS * 3 * layer_s(4) + last + OPTIMIZER_S
    s = run(d)
    assert s["iteration_times_s"] == pytest.approx([expected] * 3, rel=1e-9)
    assert s["buckets"] == {"count": LAYERS, "bytes": [GRAD_BYTES] * LAYERS}
    assert s["communication"]["bytes_per_iteration"] == LAYERS * GRAD_BYTES
    for row in s["per_iteration"].values():
        assert row["compute_s"] == pytest.approx(LAYERS * 3 * layer_s(4) + OPTIMIZER_S)
        assert row["exposed_communication_s"] == pytest.approx(last, rel=1e-9)
        assert row["idle_s"] == pytest.approx(0.0, abs=1e-12)


def test_analytical_matches_flow_when_uncontended() -> None:
    """Without overlap and with one bucket nothing shares a link: both models agree."""
    flow = run(doc(bucket="1GB", overlap=False, latency="1us"))
    analytical = run(doc(bucket="1GB", overlap=False, latency="1us", network="analytical"))
    assert analytical["iteration_times_s"] == pytest.approx(flow["iteration_times_s"], rel=1e-9)


# -- (c) sweep of bucket sizes and worker counts -------------------------------


def expected_overlapped(d: dict[str, Any], n: int, layers_per_bucket: int) -> float:
    """Hand schedule: bucket k is ready when its last layer's backward ends; every link of
    the switch then carries its ring's 2(n-1)/n x S bytes at full rate, sharing fairly with
    buckets still in flight (no latency: the links never idle while a bucket is left), so
    the last all-reduce ends at max(ready_k, end_(k-1)) + allreduce(S_k); then the
    optimizer step."""
    fwd = layer_s(n)
    buckets = LAYERS // layers_per_bucket
    ar = allreduce_s(d, layers_per_bucket * GRAD_BYTES, n)
    end = 0.0
    for k in range(buckets):
        ready = LAYERS * fwd + (k + 1) * layers_per_bucket * 2 * fwd
        end = max(ready, end) + ar
    return end + OPTIMIZER_S


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize(("bucket", "layers_per_bucket"), [("50MB", 1), ("150MB", 2), ("1GB", 4)])
def test_sweep_buckets_and_workers(n: int, bucket: str, layers_per_bucket: int) -> None:
    """Bucket sizes x worker counts on an 8-GPU switch, workers chosen by glob."""
    d = doc(8, workers=f"gpu[0-{n - 1}]", bucket=bucket)
    s = run(d)
    assert s["workers"] == [f"gpu{i}" for i in range(n)]
    assert s["buckets"]["count"] == LAYERS // layers_per_bucket
    expected = expected_overlapped(d, n, layers_per_bucket)
    assert s["iteration_time_s"] == pytest.approx(expected, rel=1e-9)
    # (d) throughput = global batch / iteration time
    assert s["throughput_samples_per_s"] == pytest.approx(BATCH / expected, rel=1e-9)


def test_more_workers_shorter_compute_longer_allreduce() -> None:
    """Exposed all-reduce grows with 2(n-1)/n; compute shrinks as 1/n."""
    times = {n: run(doc(8, workers=f"gpu[0-{n - 1}]", overlap=False)) for n in (2, 8)}
    for n, s in times.items():
        expected = LAYERS * 3 * layer_s(n) + 2 * (n - 1) / n * 4e8 / 100e9 + OPTIMIZER_S
        assert s["iteration_time_s"] == pytest.approx(expected, rel=1e-9)


# -- (e) stragglers -----------------------------------------------------------------


def test_fixed_straggler_sets_the_pace() -> None:
    """gpu1 computing 2x slower stretches every worker's iteration to its pace."""
    d = doc(stragglers=[{"devices": "gpu1", "slowdown": 2}])
    last = allreduce_s(d, GRAD_BYTES, 4)
    expected = 2 * (LAYERS * 3 * layer_s(4) + OPTIMIZER_S) + last
    s = run(d)
    assert s["iteration_times_s"] == pytest.approx([expected] * 3, rel=1e-9)
    fast = s["per_iteration"]["gpu0"]
    assert fast["idle_s"] > 0
    assert s["per_iteration"]["gpu1"]["idle_s"] == pytest.approx(0.0, abs=1e-12)


# -- (f) determinism ---------------------------------------------------------------


def test_same_summary_twice() -> None:
    d = doc(
        stragglers=[{"random": {"fraction": 0.5, "slowdown": {"dist": "lognormal", "sigma": 0.3}}}]
    )
    first = simulate(parse_scenario(d)).summary_json()
    assert first == simulate(parse_scenario(d)).summary_json()
    times = json.loads(first)["iteration_times_s"]
    assert len(set(times)) > 1  # random stragglers do vary the iterations


# -- defaults, summary and checks ---------------------------------------------------


def test_default_workers_are_every_gpu_and_single_worker_runs() -> None:
    s = run(doc(3))
    assert s["workers"] == ["gpu0", "gpu1", "gpu2"]
    one = run(doc(1, batch=400))
    assert one["iteration_time_s"] == pytest.approx(LAYERS * 3 * layer_s(1) + OPTIMIZER_S)


def test_summary_keys() -> None:
    s = run(doc(iterations=2))
    assert s["workload"] == "data_parallel"
    assert s["model"] == {"name": "custom", "params": LAYERS * PARAMS}
    assert s["global_batch"] == BATCH
    assert {"iteration_time_s", "iteration_times_s", "throughput_samples_per_s"} <= s.keys()
    assert set(s["devices"]) == set(s["per_iteration"]) == set(s["workers"])
    assert s["makespan_s"] == pytest.approx(sum(s["iteration_times_s"]))


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"workers": "tpu*"}, "data_parallel.workers"),
        ({"algorithm": "nonesuch"}, "data_parallel.allreduce.algorithm"),
        ({"batch": 3}, "training.global_batch"),
    ],
)
def test_check_errors_name_the_key(changes: dict[str, Any], path: str) -> None:
    with pytest.raises(ScenarioError) as err:
        run(doc(**changes))
    assert path in str(err.value)


def test_preset_model_runs() -> None:
    d = doc(iterations=1)
    d["model"] = {"preset": "resnet50"}
    s = run(d)
    assert s["model"]["name"] == "resnet50"
    assert s["buckets"]["count"] >= 2
    assert s["iteration_time_s"] > 0


# -- (g) shipped scenarios through the CLI ------------------------------------------

SHIPPED = {"overlap.yaml": 14.7e-3, "no_overlap.yaml": 19.2e-3, "straggler.yaml": 27.9e-3}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_scenarios(tmp_path, name: str) -> None:
    path = SCENARIOS / "data_parallel" / name
    assert main(["run", str(path), "-o", str(tmp_path), "-q"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iteration_time_s"] == pytest.approx(SHIPPED[name], rel=1e-9)
    assert summary["throughput_samples_per_s"] == pytest.approx(BATCH / SHIPPED[name], rel=1e-9)


def test_shipped_scenarios_are_all_tested() -> None:
    assert {p.name for p in (SCENARIOS / "data_parallel").glob("*.yaml")} == set(SHIPPED)


def test_buckets_queue_on_their_communicator() -> None:
    """8 workers: a bucket's all-reduce (1.75 ms) outlasts a layer's backward (0.5 ms); on
    one communicator the next bucket waits for the one in flight (NCCL's one stream), so
    bucket k starts when bucket k-1 ends and they never overlap on a device."""
    result = simulate(parse_scenario(doc(8, iterations=1)))
    rows = result.timeline()
    rows = rows[(rows.kind == "collective") & (rows.resource == "gpu0")]
    starts = [rows[rows.label == f"allreduce bucket{k}"].start_s.min() for k in range(LAYERS)]
    ends = [rows[rows.label == f"allreduce bucket{k}"].end_s.max() for k in range(LAYERS)]
    fwd = layer_s(8)
    assert starts[0] == pytest.approx(LAYERS * fwd + 2 * fwd)  # the first bucket is ready
    for k in range(1, LAYERS):
        ready = LAYERS * fwd + 2 * fwd * (k + 1)
        assert starts[k] == pytest.approx(max(ready, ends[k - 1]), rel=1e-12)
        assert starts[k] >= ends[k - 1]
    duration = ends[0] - starts[0]
    assert [e - s for s, e in zip(starts, ends)] == pytest.approx([duration] * LAYERS)


@pytest.mark.parametrize("recompute", ["selective", "full"])
@pytest.mark.parametrize("workers", [1, 2])
def test_recompute_adds_its_forward_flops(recompute: str, workers: int) -> None:
    """Full recomputation re-runs every block's forward (the 96 vs 72 of Megatron-LM);
    selective re-runs the attention scores, 4 s^2 h FLOPs per sample per layer.  The flat
    compute model prices them at the peak (the roofline's kernels: test_kernel_times.py)."""
    shape = {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 512}
    base = {
        "name": "dp-recompute",
        "cluster": {
            "kind": "switch",
            "devices": workers,
            "device": {"flops": "100TFLOPS", "compute": {"model": "flat"}},
            "link": {"bandwidth": "100GB/s"},
        },
        "model": {"transformer": shape},
        "training": {"global_batch": 4 * workers, "iterations": 1, "precision": "bf16"},
        "network": {"model": "analytical", **TEXTBOOK},
    }
    with_recompute = {**base, "training": {**base["training"], "recompute": recompute}}
    plain, more = run(base), run(with_recompute)
    s, h, layers, samples = shape["seq"], shape["hidden"], shape["layers"], 4
    if recompute == "full":
        extra = samples * layers * (24 * s * h * h + 4 * s * s * h)
    else:
        extra = samples * layers * 4 * s * s * h
    gap = more["iteration_time_s"] - plain["iteration_time_s"]
    assert gap == pytest.approx(extra / 100e12, rel=1e-9)
