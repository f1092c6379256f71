"""Shaped compute of the data-parallel, ZeRO and parameter-server strategies.

Under the roofline compute model each transformer layer of a data-parallel worker costs its
kernels at their shapes, exactly as the pipeline strategy prices a stage of the same layers
with tp = 1 (:mod:`clustersim.strategies.kernel_times`).  Held here to things outside that
code path: the pipeline strategy's own times (one GPU, no communication), docs/compute.md's
per-kernel formulas summed by hand (the roofline of Williams, Waterman and Patterson 2009;
the FLOPs of a layer from Narayanan et al. 2021; FlashAttention's work from Dao 2023,
Section 4.1), FLOPs / (peak x efficiency) for the flat model, and the FLOP counts of the
flat runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.compute.models import Roofline
from clustersim.errors import ScenarioError
from clustersim.records import Record
from clustersim.scenario import parse_scenario
from clustersim.studies.sweep import load_document

from .conftest import SCENARIOS

A100, H100 = "a100-sxm4-80gb", "h100-sxm5-80gb"
"""Catalog GPUs (docs/hardware.md): their curves and the 0.754 calibration come with them."""
PASSES = ("forward", "backward")


def _doc(
    model: dict[str, Any],
    batch: int,
    recompute: str = "none",
    gpu: dict[str, Any] | None = None,
    gpus: int = 1,
    **sections: Any,
) -> dict[str, Any]:
    """A training scenario on one node of ``gpus`` GPUs (catalog A100 unless ``gpu``)."""
    return {
        "name": "shaped",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {
                "gpus": gpus,
                "gpu": gpu or {"preset": A100},
                "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
                "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                "nic": {"bandwidth": "200Gb/s", "latency": "2us"},
            },
        },
        "model": model,
        "training": {
            "global_batch": batch,
            "iterations": 1,
            "precision": "bf16",
            "optimizer": "adam",
            "recompute": recompute,
        },
        **sections,
    }


def _run(doc: dict[str, Any]) -> Any:
    return simulate(parse_scenario(doc))


def _passes(records: list[Record], device: str = "") -> list[Record]:
    """The forward and backward compute records (of ``device``, or of every device)."""
    return [
        r
        for r in records
        if r.kind == "compute" and r.phase in PASSES and (not device or r.resource == device)
    ]


def _compute_s(records: list[Record], device: str = "") -> float:
    return sum(r.duration_s for r in _passes(records, device))


# -- 1. the pipeline strategy with one stage is the reference ------------------------------

ONE_GPU_CASES = [
    # (model, GPU preset, batch, recompute)
    ({"preset": "gpt3-125m"}, A100, 1, "none"),
    ({"preset": "gpt3-125m"}, A100, 3, "full"),
    ({"preset": "gpt3-125m", "flash_attention": True}, H100, 2, "selective"),
    ({"preset": "gpt3-350m", "flash_attention": True}, A100, 4, "full"),
    ({"preset": "bert-large"}, H100, 2, "selective"),
    ({"preset": "bert-large", "flash_attention": True}, A100, 3, "none"),
    ({"preset": "llama2-7b"}, H100, 1, "full"),
    ({"preset": "llama2-7b", "flash_attention": False}, A100, 2, "selective"),
]


@pytest.mark.parametrize("model, gpu, batch, recompute", ONE_GPU_CASES)
def test_data_parallel_on_one_gpu_is_the_pipeline_with_one_stage(
    model: dict[str, Any], gpu: str, batch: int, recompute: str
) -> None:
    """One GPU, no communication: the data-parallel strategy's forward and backward time
    and its iteration equal the pipeline strategy's with tp = pp = dp = 1 and one
    micro-batch of the whole batch, to 1e-9 -- causal and bidirectional, fused and unfused
    attention, gated MLPs, every recomputation, A100 and H100 curves."""
    doc = _doc(model, batch, recompute, {"preset": gpu})
    dp = _run(doc)
    pipe = _run({**doc, "pipeline": {"schedule": "1f1b", "micro_batches": 1}})
    assert dp.summary["workload"] == "data_parallel" and pipe.summary["workload"] == "pipeline"
    assert _compute_s(dp.records) == pytest.approx(_compute_s(pipe.records), rel=1e-9)
    assert dp.summary["iteration_time_s"] == pytest.approx(
        pipe.summary["iteration_time_s"], rel=1e-9
    )
    for key in ("model_flops_per_iteration", "hardware_flops_per_iteration"):
        assert dp.summary[key] == pytest.approx(pipe.summary[key], rel=1e-12)


@pytest.mark.parametrize("micro_batch, recompute", [(1, "full"), (2, "selective"), (4, "none")])
def test_zero_micro_batches_are_priced_at_their_size(micro_batch: int, recompute: str) -> None:
    """ZeRO-2 with gradient accumulation on one GPU runs micro-batches of
    ``training.micro_batch`` samples: its compute is the pipeline strategy's with the same
    micro-batches (m forwards and backwards of b samples each), not one pass of the batch."""
    model = {"preset": "gpt3-125m"}
    base = _doc(model, 4, recompute)
    base["training"]["micro_batch"] = micro_batch
    zero = _run({**base, "zero": {"stage": 2}})
    pipe = _run({**base, "pipeline": {"schedule": "1f1b"}})
    assert zero.summary["workload"] == "zero" and pipe.summary["workload"] == "pipeline"
    assert _compute_s(zero.records) == pytest.approx(_compute_s(pipe.records), rel=1e-9)
    whole = _run(_doc(model, 4, recompute))  # one pass of 4 samples
    if micro_batch < 4:
        assert _compute_s(zero.records) > _compute_s(whole.records)


STRATEGIES = {
    "data_parallel": {},
    "zero1": {"zero": {"stage": 1}},
    "zero3": {"zero": {"stage": 3}},
    "ps_sync": {"data_parallel": {"sync": "ps", "ps": {"servers": 1, "placement": "gpu"}}},
    "ps_backup": {
        "data_parallel": {
            "sync": "ps",
            "ps": {"servers": 1, "placement": "gpu", "mode": "backup", "backup_k": 2},
        }
    },
    "ps_geo": {
        "data_parallel": {"sync": "ps", "ps": {"servers": 1, "placement": "gpu", "mode": "geo"}}
    },
}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_data_parallel_strategy_prices_a_worker_alike(name: str) -> None:
    """Two GPUs of 2 samples each: a worker's forward and backward records take the same
    time under plain data parallelism, ZeRO-1 and -3 and parameter servers (sync, backup,
    geo) -- the time the pipeline strategy gives one stage of the whole model and 2
    samples (no recomputation: parameter-server workers run none)."""
    model = {"preset": "gpt3-125m"}
    run = _run(_doc(model, 4, gpus=2, **STRATEGIES[name]))
    alone = _run({**_doc(model, 2), "pipeline": {"schedule": "1f1b", "micro_batches": 1}})
    per_iteration = _compute_s(alone.records)
    for device in ("rack0/node0/gpu0", "rack0/node0/gpu1"):
        got = _compute_s(run.records, device)
        iterations = len({r.iteration for r in _passes(run.records, device)})
        assert got == pytest.approx(per_iteration * iterations, rel=1e-9), device


# -- 2. docs/compute.md's formulas, summed by hand ----------------------------------------

PEAK, EFFICIENCY, BANDWIDTH = 312e12, 0.754, 2.0e12
E_MAX, KERNEL_S = 0.869, 6.7e-6
F_HALF = KERNEL_S * E_MAX * PEAK
"""The curve of docs/compute.md, ``F_half = kernel_time x e_max x peak``."""
S, H, A, F, V = 512, 1024, 16, 4096, 32000
D = H // A


def _rate_s(w: float) -> float:
    """docs/compute.md: W / (peak x efficiency x eff(W)), eff(W) = e_max W / (W + F_half)."""
    return w / (PEAK * EFFICIENCY * E_MAX * w / (w + F_HALF))


def _product(m: int, n: int, k: int, batch: float = 1) -> float:
    """max(W / (peak x efficiency x eff(W)), bytes / bandwidth) of a product: W = 2 batch m
    n k, bytes = 2 batch (m k + k n + m n) (A and B read, C written, 16-bit)."""
    w = 2.0 * batch * m * n * k
    return max(_rate_s(w), 2.0 * batch * (m * k + k * n + m * n) / BANDWIDTH)


def _memory(nbytes: float) -> float:
    return nbytes / BANDWIDTH


@dataclass(frozen=True)
class ByHand:
    """Seconds of one layer's forward kernels for ``b`` sequences, from the table of
    docs/compute.md, in the groups its backward treats alike."""

    products: float
    """Matrix products (their backward: twice, a data and a weight gradient)."""
    memory: float
    """Memory-bound kernels (their backward: 1.5 x the bytes)."""
    selective: float = 0.0
    """What selective recomputation re-runs: scores, softmax, context."""
    fused: float = 0.0
    """The fused attention kernel's forward."""
    fused_backward: float = 0.0
    """Its backward: 2 x the FLOPs at 1.25 x the work, twice the bytes."""


def _by_hand(kind: str, b: int, flash: bool) -> ByHand:
    rows = b * S
    norm = _memory(11.0 * rows * H)
    projections = _product(rows, 3 * H, H) + _product(rows, H, H)
    if kind == "attention" and flash:
        flops = 2.0 * b * A * S * S * (D + D)  # the two score products, counted in full
        nbytes = 2.0 * b * S * (A * 2 * D + A * 2 * D) + 4.0 * b * A * S  # Q, K, V, O; logsumexp
        fused = max(_rate_s(0.5 * flops), _memory(nbytes))  # causal: half the blocks
        back = max(_rate_s(1.25 * 0.5 * 2 * flops), _memory(2 * nbytes))
        return ByHand(projections, norm, fused=fused, fused_backward=back)
    if kind == "attention":
        scores = _product(S, S, D, b * A) + _product(S, D, S, b * A)
        softmax = _memory(9.0 * b * A * S * S)
        return ByHand(projections + scores, norm + softmax, selective=scores + softmax)
    if kind == "mlp":
        products = _product(rows, F, H) + _product(rows, H, F)
        return ByHand(products, norm + _memory(4.0 * rows * F))
    return ByHand(_product(rows, V, H), _memory(12.0 * rows * V))  # the LM head


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_layer_time_is_the_sum_of_its_kernels_by_hand(flash: bool, b: int, recompute: str) -> None:
    """A GPT layer (h 1024, 16 heads, s 512, f 4096, V 32000) on a 312 TFLOP/s, 2 TB/s GPU
    at efficiency 0.754 with the curve e_max 0.869, 6.7 us: each forward record is the sum
    of its kernels' rooflines; each backward twice every product, 1.5 x every memory-bound
    kernel (the fused attention: 2 x the FLOPs at 1.25 x the work, twice the bytes), plus
    the recomputed forward (full) or scores, softmax and context (selective, unfused)."""
    gpu = {
        "flops": "312TFLOPS",
        "efficiency": EFFICIENCY,
        "memory": "80GB",
        "memory_bandwidth": "2TB/s",
        "compute": {"curve": {"e_max": E_MAX, "kernel_time": "6.7us"}},
    }
    shape = {"layers": 1, "hidden": H, "heads": A, "seq": S, "vocab": V, "ffn": F}
    model = {"transformer": {**shape, "flash_attention": flash}}
    run = _run(_doc(model, b, recompute, gpu))
    took = {r.label: r.duration_s for r in _passes(run.records)}
    for kind, name in (("attention", "layer0.attention"), ("mlp", "layer0.mlp"), ("head", "head")):
        hand = _by_hand(kind, b, flash)
        forward = hand.products + hand.memory + hand.fused
        again = {"none": 0.0, "selective": hand.selective, "full": forward}[recompute]
        again = 0.0 if kind == "head" else again  # recomputation re-runs blocks only
        backward = again + 2 * hand.products + 1.5 * hand.memory + hand.fused_backward
        assert took[f"fwd {name}"] == pytest.approx(forward, rel=1e-12), name
        assert took[f"bwd {name}"] == pytest.approx(backward, rel=1e-12), name


# -- 3. flat and shapeless models keep the FLOP pricing -----------------------------------


def _flat_seconds(records: list[Record], peak: float, efficiency: float) -> None:
    """Every forward and backward record lasts its FLOPs / (peak x efficiency), exactly."""
    records = _passes(records)
    assert records
    for r in records:
        assert r.duration_s == pytest.approx(r.flops / (peak * efficiency), rel=1e-12), r.label


FLAT_GPU = {"flops": "312TFLOPS", "efficiency": 0.5, "memory": "80GB", "memory_bandwidth": "2TB/s"}


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize(
    "model, gpu",
    [
        ({"preset": "gpt3-125m"}, {**FLAT_GPU, "compute": {"model": "flat"}}),
        ({"preset": "resnet50"}, FLAT_GPU),
        ({"layers": [{"name": "fc", "params": 1e6, "flops": 4e9}]}, FLAT_GPU),
    ],
)
def test_flat_model_and_shapeless_models_price_flops(
    name: str, model: dict[str, Any], gpu: dict[str, Any]
) -> None:
    """``compute.model: flat`` (a transformer) and models without shapes (ResNet-50, a
    layer list) under the default roofline: every layer's time is FLOPs / (peak x
    efficiency), as before shaped work, under every data-parallel strategy."""
    run = _run(_doc(model, 4, "none", gpu, gpus=2, **STRATEGIES[name]))
    _flat_seconds(run.records, 312e12, 0.5)


BEFORE_SHAPED = {
    "zero/gpt3_1.3b_stage3_prefetch.yaml": 0.3587274071630925,
    "ps_vs_ring/bert_large_ps_dedicated.yaml": 2.1975522681054067,
}
"""Iteration times (s) of two shipped transformer scenarios before the data-parallel
strategies priced shapes (commit 3999bbc, every layer at FLOPs / (peak x efficiency))."""


@pytest.mark.parametrize("name", list(BEFORE_SHAPED))
def test_flat_model_gives_the_numbers_of_before(name: str) -> None:
    """``compute.model: flat`` on a shipped ZeRO-3 and a parameter-server scenario of
    transformers (GPT-3 1.3B, BERT-large) gives the iteration time of the code before
    shaped pricing, to the last digit."""
    doc = load_document(SCENARIOS / name)
    doc["cluster"]["node"]["gpu"]["compute"] = {"model": "flat"}
    run = simulate(parse_scenario(doc, str(SCENARIOS / name)))
    assert run.summary["iteration_time_s"] == BEFORE_SHAPED[name]


# -- 4. the FLOP counts do not change -------------------------------------------------------


@pytest.mark.parametrize(
    "name, recompute",
    [("data_parallel", "full"), ("zero1", "selective"), ("zero3", "full"), ("ps_sync", "none")],
)
def test_flop_counts_are_those_of_the_flat_model(name: str, recompute: str) -> None:
    """Roofline and flat runs record the same FLOPs per layer and pass and report the same
    model and hardware FLOPs per iteration; the roofline run is slower (e_max < 1, and the
    memory-bound kernels take time)."""
    model = {"preset": "gpt3-125m"}
    gpu = {"preset": A100}
    roof = _run(_doc(model, 4, recompute, gpu, gpus=2, **STRATEGIES[name]))
    flat_gpu = {**gpu, "compute": {"model": "flat"}}
    flat = _run(_doc(model, 4, recompute, flat_gpu, gpus=2, **STRATEGIES[name]))

    def flops(run: Any) -> list[tuple[str, int, str, float]]:
        return sorted((r.resource, r.iteration, r.label, r.flops) for r in _passes(run.records))

    assert flops(roof) == flops(flat)
    keys = ("model_flops_per_iteration", "hardware_flops_per_iteration")
    for key in keys if not name.startswith("ps") else ():  # parameter servers report none
        assert roof.summary[key] == flat.summary[key]
    assert _compute_s(roof.records) > _compute_s(flat.records)


# -- caching and errors ----------------------------------------------------------------------


def test_each_distinct_layer_is_priced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 workers, 2 iterations, ZeRO-3 of GPT-3 350M (24 blocks): the roofline prices one
    list of kernels per (layer shape, pass) -- embedding, attention, MLP, head, forward and
    backward: at most 8 -- not one per layer, worker or iteration."""
    calls = []
    original = Roofline.seconds

    def counted(self: Roofline, ops: Any) -> float:
        calls.append(1)
        return original(self, ops)

    monkeypatch.setattr(Roofline, "seconds", counted)
    doc = _doc({"preset": "gpt3-350m"}, 16, "full", gpus=8, zero={"stage": 3})
    doc["training"]["iterations"] = 2
    run = _run(doc)
    assert len(_passes(run.records)) == 8 * 2 * 2 * (24 * 2 + 2)
    assert 0 < len(calls) <= 8


def test_bad_kernels_file_is_refused_before_a_data_parallel_run(tmp_path: Any) -> None:
    """A data-parallel transformer run reads its GPUs' kernels files before it starts: a bad
    one is a ScenarioError naming the key, the file and the line."""
    (tmp_path / "k.csv").write_text("m,n,k,dtype,tflops\n1024,1024,x,bf16,100\n")
    gpu = {**FLAT_GPU, "compute": {"kernels": "k.csv"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_doc({"preset": "gpt3-125m"}, 2, gpu=gpu, gpus=2)))
    with pytest.raises(ScenarioError) as info:
        simulate(path)
    message = str(info.value)
    assert "cluster.node.gpu.compute.kernels" in message and "k.csv line 2" in message
