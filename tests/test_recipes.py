"""Megatron-Core's production recipes in the 3D hybrid: the distributed optimizer, the
overlapped gradient reduce-scatter and parameter all-gather, tensor-parallel overlap.

The overlaps are held to a hand recurrence over alpha-beta costs.  A model of ``L`` equal
layers (``P`` parameters, ``F`` forward FLOPs per sample, ``2F`` backward) on one
NVSwitch node of ``N`` GPUs (data parallel, flat compute at ``RATE``): with a bucket of
``k`` layers, bucket ``i`` (backward order) holds ``k_i P`` values, 2 bytes each in bf16 (4
bytes for the gradients with ``data_parallel.allreduce.precision: fp32``, the parameters
gathered in 2); a ring reduce-scatter or all-gather of ``S`` bytes takes
``(N - 1)(alpha + S / (N B))`` (all-reduce: twice).
The iteration (``m`` micro-batches, 1F1B on one stage: F0 B0 F1 ... B(m-1)):

* the previous step's all-gathers run back to back from its start, in forward order; the
  first forward's part of bucket ``i`` starts at ``max(previous part's end, its gather's
  end)``;
* the last backward runs bucket by bucket; bucket ``i``'s reduce-scatter starts at
  ``max(its part's end, the previous reduce-scatter's end)`` (one communicator);
* the optimizer step (Adam: 28 bytes per parameter of the 1/N shard over memory bandwidth)
  starts when every reduce-scatter has ended.

Without overlap: compute, one reduce-scatter of all gradients, the step, one all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from clustersim.errors import ScenarioError

from .test_hybrid import LINK_LATENCY, NVLINK_BPS, RATE, SHAPE, doc, run

ALPHA = 2 * LINK_LATENCY
"""A send inside the node: GPU -> NVSwitch -> GPU."""
BF16 = 2
FP32 = 4
ADAM_STEP_BYTES = 28
MEMORY_BPS = 1000e12


@dataclass(frozen=True)
class Case:
    """``layers`` equal layers, data parallel over ``n`` GPUs of one node, recipes asked for
    (``param`` None: ``zero.overlap_param_gather`` left out)."""

    n: int
    layers: int = 8
    params: float = 4e6
    flops: float = 4e9
    per_bucket: int = 2
    m: int = 2
    nvlink: str = "100GB/s"
    zero: int = 1
    grad: bool = True
    param: bool | None = True
    grad_precision: str = "auto"
    """``data_parallel.allreduce.precision``."""

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient value in the reduce-scatter (all-reduce)."""
        return FP32 if self.grad_precision == "fp32" else BF16

    @property
    def bandwidth(self) -> float:
        return float(self.nvlink.removesuffix("GB/s")) * 1e9

    def doc(self, iterations: int = 2) -> dict[str, Any]:
        n, m = self.n, self.m
        document = doc(dp=n, gpus=n, batch=n * m, micro_batch=1, nvlink=self.nvlink, zero=self.zero)
        layer = {"name": "block", "params": self.params, "flops": self.flops, "repeat": self.layers}
        document["model"] = {"layers": [layer]}
        document["training"]["iterations"] = iterations
        bucket = f"{self.per_bucket * self.params * self.grad_bytes:g}B"
        sync = {"overlap": self.grad, "bucket": bucket}
        if self.grad_precision != "auto":
            sync["precision"] = self.grad_precision
        document["data_parallel"] = {"allreduce": sync}
        if self.param is not None:
            document["zero"]["overlap_param_gather"] = self.param
        return document

    def expected(self) -> tuple[float, float]:
        """(iteration seconds, of which compute and step) by the module's recurrence."""
        n, layers, per_bucket, m = self.n, self.layers, self.per_bucket, self.m
        forward, backward = self.flops / RATE, 2 * self.flops / RATE  # one layer, one sample
        groups = [per_bucket] * (layers // per_bucket) + [layers % per_bucket]
        groups = [g for g in groups if g]
        rounds = 2 if self.zero == 0 else 1
        grad, param = self.params * self.grad_bytes, self.params * BF16
        reduce = [ring_s(n, g * grad, self.bandwidth, rounds) for g in groups]
        gather = [ring_s(n, g * param, self.bandwidth) for g in groups]
        whole_reduce = ring_s(n, layers * grad, self.bandwidth, rounds)
        whole_gather = ring_s(n, layers * param, self.bandwidth)
        step = layers * self.params / (n if self.zero else 1) * ADAM_STEP_BYTES / MEMORY_BPS
        t = free = 0.0
        if self.param:  # last iteration's gathers, back to back from the start, forward order
            for i in reversed(range(len(groups))):
                free += gather[i]
                t = max(t, free) + groups[i] * forward
        else:
            t = layers * forward
        t += (m - 1) * layers * (forward + backward)
        if self.grad:
            for i, g in enumerate(groups):
                t += g * backward
                free = max(free, t) + reduce[i]
            t = max(t, free)
        else:
            t += layers * backward + whole_reduce
        t += step
        if self.zero and not self.param:
            t += whole_gather
        return t, m * layers * (forward + backward) + step


def ring_s(n: int, nbytes: float, bandwidth: float, rounds: int = 1) -> float:
    """Ring reduce-scatter or all-gather (``rounds`` 2: all-reduce) over an NVSwitch."""
    return rounds * (n - 1) * (ALPHA + nbytes / n / bandwidth)


# --------------------------------------------------------------------------- overlaps


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("nvlink", ["0.5GB/s", "5GB/s", "100GB/s"])
@pytest.mark.parametrize("per_bucket, m", [(1, 1), (2, 2), (3, 3)])
def test_overlapped_iteration_follows_the_bucket_recurrence(
    n: int, nvlink: str, per_bucket: int, m: int
) -> None:
    """Iteration time and exposed data-parallel time against the hand recurrence, from
    communication-bound (0.5 GB/s) to compute-bound (100 GB/s)."""
    case = Case(n=n, per_bucket=per_bucket, m=m, nvlink=nvlink)
    summary = run(case.doc()).summary
    expected, busy = case.expected()
    assert summary["iteration_times_s"] == pytest.approx([expected] * 2, rel=1e-9)
    recipes = summary["recipes"]
    assert recipes["buckets"] == [-(-8 // per_bucket)]
    assert recipes["dp_exposed_s"][0] == pytest.approx(expected - busy, rel=1e-9, abs=1e-15)
    flight = recipes["dp_communication_s"][0]
    assert recipes["dp_hidden_s"][0] == pytest.approx(flight - (expected - busy), abs=1e-15)


@pytest.mark.parametrize("n", [2, 8])
@pytest.mark.parametrize("per_bucket", [1, 2, 4])
def test_compute_bound_hides_all_but_the_last_reduce_scatter_and_first_gather(
    n: int, per_bucket: int
) -> None:
    """With enough compute beside them only the last bucket's reduce-scatter (the first
    layers, ready when the backward ends) and the first bucket's all-gather (the first
    layers, needed when the forward starts) are exposed: both the bucket of layers 0.."""
    case = Case(n=n, per_bucket=per_bucket, flops=4e11)
    first_layers = (case.layers % per_bucket or per_bucket) * case.params * BF16
    one = ring_s(n, first_layers, NVLINK_BPS)
    summary = run(case.doc()).summary
    assert summary["recipes"]["dp_exposed_s"][0] == pytest.approx(2 * one, rel=1e-9)


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("n, nvlink", [(2, "0.5GB/s"), (4, "5GB/s"), (8, "100GB/s")])
def test_overlap_is_never_slower_than_the_flush(zero: int, n: int, nvlink: str) -> None:
    """Overlapped iteration <= flushed iteration, up to one collective's latency terms per
    extra bucket (8 buckets of one layer against one collective of all)."""
    on = Case(n=n, per_bucket=1, nvlink=nvlink, zero=zero, param=True if zero else None)
    off = replace(on, grad=False, param=False if zero else None)
    latency = 8 * 2 * (n - 1) * ALPHA
    flushed = run(off.doc()).summary["iteration_time_s"]
    assert run(on.doc()).summary["iteration_time_s"] <= flushed + latency
    assert flushed == pytest.approx(off.expected()[0], rel=1e-9)


def test_zero0_overlaps_all_reduce_buckets() -> None:
    """Without the distributed optimizer the buckets are all-reduced (2 (N-1) steps)."""
    case = Case(n=4, zero=0, param=None, nvlink="5GB/s")
    result = run(case.doc())
    assert result.summary["iteration_time_s"] == pytest.approx(case.expected()[0], rel=1e-9)
    ops = {r.label.split()[0] for r in result.records if r.kind == "collective"}
    assert ops == {"allreduce"}
    assert result.summary["recipes"]["overlap_param_gather"] is False


# ------------------------------------------------------------------ gradient precision


@pytest.mark.parametrize(
    "zero, grad, param", [(1, True, True), (1, False, False), (0, True, None), (0, False, None)]
)
@pytest.mark.parametrize("n, nvlink", [(2, "0.5GB/s"), (8, "5GB/s")])
def test_fp32_gradients_double_the_reduction_not_the_gather(
    zero: int, grad: bool, param: bool | None, n: int, nvlink: str
) -> None:
    """``data_parallel.allreduce.precision: fp32`` (Megatron-LM's bf16 training): the
    reduce-scatter (all-reduce) carries 4 bytes a gradient value, the distributed optimizer's
    all-gather 2 bytes a parameter, overlapped or flushed: the recurrence prices each at its
    own bytes."""
    case = Case(n=n, nvlink=nvlink, zero=zero, grad=grad, param=param, grad_precision="fp32")
    result = run(case.doc())
    assert result.summary["iteration_time_s"] == pytest.approx(case.expected()[0], rel=1e-9)
    values = case.layers * case.params
    assert result.summary["communication"]["allreduce_bytes"] == [values * FP32]


def test_fp32_gradients_lengthen_a_flushed_iteration_by_one_more_reduction() -> None:
    """Flushed, fp32 gradients add exactly one bf16 reduce-scatter's bandwidth term:
    (N - 1) x L P x 2 bytes / (N B), the rest (latency, gather, compute) unchanged."""
    bf16 = Case(n=4, nvlink="5GB/s", grad=False, param=False)
    fp32 = replace(bf16, grad_precision="fp32")
    gap = run(fp32.doc()).summary["iteration_time_s"] - run(bf16.doc()).summary["iteration_time_s"]
    extra = (4 - 1) * bf16.layers * bf16.params * (FP32 - BF16) / 4 / bf16.bandwidth
    assert gap == pytest.approx(extra, rel=1e-9)


def test_gradient_precision_defaults_to_the_training_precision() -> None:
    """``auto``: bf16 training reduces 2-byte gradients (as before the key), fp32 training
    4-byte ones; writing the training precision's own format changes nothing."""
    case = Case(n=4, nvlink="5GB/s")
    auto = run(case.doc()).summary
    same = run(replace(case, grad_precision="bf16").doc()).summary
    assert auto["iteration_time_s"] == pytest.approx(case.expected()[0], rel=1e-9)
    assert same["iteration_time_s"] == auto["iteration_time_s"]
    assert auto["communication"]["allreduce_bytes"] == [case.layers * case.params * BF16]


# --------------------------------------------------------------------------- defaults


def _recipes(summary: dict[str, Any]) -> tuple[bool, ...]:
    r = summary["recipes"]
    keys = ("distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather")
    return tuple(r[k] for k in keys) + (r["tp_comm_overlap"],)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, (True, True, True, False)),
        ({"zero": {"stage": 0}}, (False, True, False, False)),
        ({"zero": {"overlap_param_gather": False}}, (True, True, False, False)),
        ({"data_parallel": {"allreduce": {"overlap": False}}}, (True, False, False, False)),
        (
            {"data_parallel": {"allreduce": {"overlap": False}}, "zero": {"stage": 0}},
            (False, False, False, False),
        ),
        ({"zero": {"stage": 2}}, (False, False, False, False)),
    ],
)
def test_a_transformer_runs_megatron_cores_recipes_unless_told(
    changes: dict[str, Any], expected: tuple[bool, ...]
) -> None:
    """No zero section: the distributed optimizer; overlaps on; each key switches one off."""
    document = {**doc(tp=2, dp=4, gpus=8, batch=8), **changes}
    summary = run(document).summary
    assert _recipes(summary) == expected
    assert summary["zero_stage"] == changes.get("zero", {}).get("stage", 1)


def test_a_list_of_layers_keeps_the_textbook_defaults() -> None:
    document = Case(n=4, zero=0, param=None).doc()
    del document["zero"], document["data_parallel"]
    summary = run(document).summary
    assert summary["zero_stage"] == 0
    assert _recipes(summary) == (False, False, False, False)
    assert {r.label for r in run(document).records if r.kind == "collective"} == {
        "allreduce stage0"
    }


@pytest.mark.parametrize("dp, expected", [(4, 40e6), (64, 64e6)])
def test_megatron_bucket_is_40m_or_1m_per_rank_parameters(dp: int, expected: float) -> None:
    """``max(40M, 1M x dp)`` parameters (Megatron-Core's DistributedDataParallel), bf16."""
    document = doc(dp=dp, gpus=8, nodes=dp // 8 or 1, batch=dp)
    if dp < 8:
        document = doc(dp=dp, gpus=dp, batch=dp)
    assert run(document).summary["recipes"]["bucket_bytes"] == expected * BF16


def test_plain_data_parallel_and_zero_strategies_are_unchanged() -> None:
    """Without tp, pp or a pipeline section a transformer runs data_parallel (or zero), as
    before: no recipes block, DDP's 25 MB buckets."""
    document = doc(dp=4, gpus=4, batch=4)
    del document["pipeline"], document["training"]["micro_batch"]
    del document["parallelism"]["tp_algorithm"]  # data_parallel would ignore it: refused
    summary = run(document).summary
    assert summary["workload"] == "data_parallel" and "recipes" not in summary
    document["zero"] = {"stage": 1, "overlap_param_gather": True}
    with pytest.raises(ScenarioError, match="zero.overlap_param_gather"):
        run(document)


@pytest.mark.parametrize("t, p, d", [(1, 1, 8), (2, 2, 2), (4, 1, 2), (1, 2, 4), (8, 1, 1)])
def test_distributed_optimizer_memory_is_megatrons_table(t: int, p: int, d: int) -> None:
    """Megatron-LM's distributed optimizer in bf16 (docs/user-guide/features/dist_optimizer.md):
    6 Psi + 12 Psi / d -- bf16 weights, fp32 main gradients kept whole, K = 12 sharded over
    dp -- with Psi the stage's parameters / t on one GPU; with ``training.memory.states: zero``
    the ZeRO paper's Z1, 4 Psi + K Psi / N_d."""
    document = doc(tp=t, pp=p, dp=d, gpus=t * p * d, batch=8)
    for accounting, parts in (("megatron", (2, 4, 12)), ("zero", (2, 2, 12))):
        document["training"]["memory"] = {"states": accounting}
        summary = run(document).summary
        for s in range(p):
            row = summary["memory"]["per_device"][summary["tensor_groups"][0][s][0]]
            psi = row["weights_bytes"] / BF16
            weights, gradients, k = parts
            assert row["gradients_bytes"] == pytest.approx(gradients * psi, rel=1e-12)
            assert row["optimizer_states_bytes"] == pytest.approx(k * psi / d, rel=1e-12)
            assert weights * psi == pytest.approx(row["weights_bytes"], rel=1e-12)


def test_megatrons_accounting_is_the_default_for_its_transformers() -> None:
    """A transformer in the pipeline strategy at ZeRO stage 0 or 1 is accounted as
    Megatron-LM keeps it (fp32 main gradients in bf16) without being asked."""
    document = doc(tp=2, pp=1, dp=4, gpus=8, batch=8)
    default = run(document).summary["memory"]["per_device"]
    document["training"]["memory"] = {"states": "megatron"}
    pinned = run(document).summary["memory"]["per_device"]
    assert default == pinned


# --------------------------------------------------------------------------- chunks


def test_interleaved_chunks_reduce_as_their_last_backward_ends() -> None:
    """Interleaved 1F1B, two chunks per device: each chunk (one bucket, as Megatron-Core
    leaves chunks after the first) is reduce-scattered as soon as its last backward ends,
    before the stage's last backward (the flush)."""
    document = doc(pp=2, dp=2, gpus=4, batch=8)
    document["pipeline"] = {"schedule": "interleaved", "chunks": 2}
    result = run(document)
    device = result.summary["tensor_groups"][0][1][0]
    backward = [r for r in result.records if r.resource == device and r.label == "bwd"]
    flush = max(r.end_s for r in backward)
    for chunk in (0, 1):
        last = max(r.end_s for r in backward if r.op == f"chunk{chunk}")
        (scatter,) = [
            r
            for r in result.records
            if r.resource == device
            and r.kind == "collective"
            and r.label == f"reducescatter stage1 chunk{chunk} bucket0"
        ]
        assert scatter.start_s == pytest.approx(last, abs=1e-12)
        assert (scatter.start_s < flush) == (chunk == 1)
    assert result.summary["recipes"]["buckets"] == [2, 2]


def test_only_the_first_stage_first_chunk_is_bucketed() -> None:
    """Megatron-Core buckets pp rank 0's first model chunk; the others are one bucket each."""
    document = doc(pp=2, dp=2, gpus=4, batch=8)
    document["data_parallel"] = {"allreduce": {"bucket": "1MB"}}
    summary = run(document).summary
    buckets = summary["recipes"]["buckets"]
    assert buckets[0] > 1 and buckets[1] == 1


# --------------------------------------------------------------------------- tensor parallel


def _tp_exposed_per_block(t: int, bandwidth: float, b: int = 1) -> tuple[float, float]:
    """(collective seconds, exposed seconds) of one transformer block's pass: per layer an
    all-gather beside its first product and a reduce-scatter beside its last (QKV and
    output projection; MLP up and down), each ring of S = b s h bf16 values over t GPUs.
    Products: 2 b s h n / t FLOPs at RATE (n = 3h QKV, h projection, 4h MLP)."""
    s, h = SHAPE["seq"], SHAPE["hidden"]
    c = ring_s(t, b * s * h * BF16, bandwidth)
    products = [(3 * h, h), (4 * h, 4 * h)]  # (first, last) of attention, MLP
    exposed = 0.0
    for first, last in products:
        for n in (first, last):
            exposed += max(0.0, c - 2 * b * s * h * n / t / RATE)
    return 4 * c, exposed


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("nvlink", ["1GB/s", "20GB/s", "1000GB/s"])
def test_tp_comm_overlap_exposes_what_outlasts_the_products(t: int, nvlink: str) -> None:
    """Per forward op: the tensor-parallel hold ends ``sum max(0, c - g)`` after the compute
    (all of ``c`` without the overlap); the summary's tp seconds per iteration agree."""
    bandwidth = float(nvlink.removesuffix("GB/s")) * 1e9
    on = doc(tp=t, gpus=t, batch=2, nvlink=nvlink, sequence_parallel=True, tp_comm_overlap=True)
    off = doc(tp=t, gpus=t, batch=2, nvlink=nvlink, sequence_parallel=True)
    total, exposed = _tp_exposed_per_block(t, bandwidth)
    blocks = SHAPE["layers"]
    for document, waited in ((on, exposed), (off, total)):
        result = run(document)
        device = result.summary["workers"][0]
        rows = [r for r in result.records if r.resource == device and r.microbatch == 0]
        compute = next(r for r in rows if r.label == "fwd")
        hold = next(
            r
            for r in rows
            if r.label.startswith("tp ")
            and r.start_s < compute.end_s + 1e-9
            and r.end_s >= compute.end_s
        )
        assert hold.end_s - compute.end_s == pytest.approx(blocks * waited, rel=1e-9, abs=1e-15)
        recipes = result.summary["recipes"]
        passes = 2 * 2  # forward and backward of two micro-batches
        assert recipes["tp_communication_s"][0] == pytest.approx(passes * blocks * total, rel=1e-9)
        assert recipes["tp_exposed_s"][0] == pytest.approx(passes * blocks * waited, rel=1e-9)
    assert 0 < exposed < total  # some collectives outlast their products, some do not


@pytest.mark.parametrize(
    "changes, path",
    [
        (
            {"parallelism": {"tp": 2, "tp_comm_overlap": True, "sequence_parallel": False}},
            "parallelism.tp_comm_overlap",
        ),
        ({"zero": {"stage": 0, "overlap_param_gather": True}}, "zero.overlap_param_gather"),
        ({"zero": {"stage": 2, "overlap_param_gather": True}}, "zero.overlap_param_gather"),
        (
            {"pipeline": {"schedule": "pipedream"}, "zero": {"overlap_param_gather": True}},
            "zero.overlap_param_gather",
        ),
        (
            {"data_parallel": {"allreduce": {"precision": "fp8"}}},
            "data_parallel.allreduce.precision",
        ),
    ],
)
def test_recipes_that_cannot_run_are_refused(changes: dict[str, Any], path: str) -> None:
    document = {**doc(tp=2, dp=4, gpus=8, batch=8), **changes}
    with pytest.raises(ScenarioError, match=path.replace(".", r"\.")):
        run(document)


LAYOUTS = [
    (8, 2, 4, "1f1b"),
    (8, 2, 4, "interleaved"),
    (8, 2, 4, "zb-h1"),
    (4, 2, 2, "gpipe"),
    (2, 1, 2, "1f1b"),
]
"""(tp, pp, nodes, schedule): a stage per node, two stages sharing a node's NIC, pp 1."""


@pytest.mark.parametrize("nic", ["1GB/s", "1000GB/s"])
@pytest.mark.parametrize("tp, pp, nodes, schedule", LAYOUTS)
def test_transformer_recipes_never_lengthen_the_iteration(
    nic: str, tp: int, pp: int, nodes: int, schedule: str
) -> None:
    """Megatron-Core's defaults against the same distributed optimizer after the flush
    (``overlap: false``), across schedules, layouts and NIC speeds: never longer, beyond the
    latency of the extra chunk collectives (1e-5).  (Buckets far smaller than the default
    can be: each pays the ring's latency.)"""
    dp = nodes * 8 // (tp * pp)
    shape = {**SHAPE, "layers": 8}
    document = doc(tp=tp, pp=pp, dp=dp, nodes=nodes, gpus=8, batch=dp * 4, nic=nic, shape=shape)
    document["pipeline"] = {
        "schedule": schedule,
        **({"chunks": 2} if pp > 1 and schedule == "interleaved" else {}),
    }
    on = run(document).summary
    document["data_parallel"] = {"allreduce": {"overlap": False}}
    off = run(document).summary
    assert on["recipes"]["overlap_grad_reduce"] and not off["recipes"]["overlap_grad_reduce"]
    assert on["iteration_time_s"] <= off["iteration_time_s"] * (1 + 1e-5)
