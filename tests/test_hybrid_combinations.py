"""The 3D hybrid's features together: split-backward schedules with experts, tensor
parallelism, ZeRO-2 and context parallelism; and the pairs it refuses.

Each feature is held to its source in its own test file; here the question is whether
they compose: the counts of what runs (all-to-alls, tensor-parallel holds, reduce-scatters,
ring flows) follow from the schedule's operations, and the work conserved by splitting the
backward into B and W is the unsplit backward's.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.errors import ScenarioError
from tests.test_hybrid import SHAPE, doc, run

MOE = {"experts": 8, "top_k": 2}


def with_schedule(document: dict[str, Any], schedule: str) -> dict[str, Any]:
    document["pipeline"] = {"schedule": schedule}
    return document


def with_moe(document: dict[str, Any]) -> dict[str, Any]:
    document["model"]["moe"] = dict(MOE)
    return document


def count(result: Any, label: str, device: str = "rack0/node0/gpu0") -> int:
    """Records named ``label`` on ``device``: computes and holds on its stream, or sent by it."""
    return sum(1 for r in result.records if r.label == label and device in (r.resource, r.src))


def busy_seconds(result: Any, labels: tuple[str, ...], device: str) -> float:
    found = [r for r in result.records if r.label in labels and r.resource == device]
    assert found, (labels, device)
    return sum(r.end_s - r.start_s for r in found)


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 4), (4, 8)])
def test_split_backward_with_experts_keeps_the_alltoalls_and_the_work(pp: int, m: int) -> None:
    """ZB-H1 with ep 2: the all-to-alls go with F and B only (W sends nothing), so they
    number as many as under 1F1B, and B + W do exactly the unsplit backward's compute."""
    runs = {}
    for schedule in ("1f1b", "zb-h1"):
        document = with_moe(doc(pp=pp, dp=2, gpus=2 * pp, batch=2 * m, ep=2))
        runs[schedule] = run(with_schedule(document, schedule))
    base, split = runs["1f1b"], runs["zb-h1"]
    for device in ("rack0/node0/gpu0", f"rack0/node0/gpu{pp - 1}"):
        assert count(split, "ep alltoall", device) == count(base, "ep alltoall", device) > 0
        unsplit = busy_seconds(base, ("bwd",), device)
        assert busy_seconds(split, ("bwd_input", "bwd_weight"), device) == pytest.approx(
            unsplit, rel=1e-9
        )
        assert count(split, "bwd_weight", device) == m


@pytest.mark.parametrize("tp", [2, 4])
def test_split_backward_with_tensor_parallel_holds_on_forward_and_b(tp: int) -> None:
    """Megatron's tensor-parallel collectives (sequence parallelism's, on with tp > 1) carry
    activations and input gradients: one hold per F and per B, none per W -- as many as
    under 1F1B."""
    m = 4
    runs = {
        schedule: run(with_schedule(doc(tp=tp, pp=2, gpus=2 * tp, batch=m), schedule))
        for schedule in ("1f1b", "zb-h1")
    }
    holds = {name: count(r, "tp reducescatter+allgather") for name, r in runs.items()}
    assert holds["zb-h1"] == holds["1f1b"] == 2 * m


@pytest.mark.parametrize("m", [2, 4])
def test_zero2_with_split_backward_reduce_scatters_after_each_w(m: int) -> None:
    """ZeRO-2 reduce-scatters a micro-batch's gradients once they are complete: after its
    W under ZB-H1 (pp 1, tp 2), m per iteration and tensor rank."""
    document = with_schedule(doc(tp=2, dp=2, gpus=4, batch=2 * m, zero=2), "zb-h1")
    result = run(document)
    scatters = sorted(
        r.start_s for r in result.records if r.label.startswith("reducescatter") and r.src
    )
    weights = sorted(r.end_s for r in result.records if r.label == "bwd_weight")
    assert len(weights) == m * 4  # m W records on each of the 4 GPUs
    assert scatters and scatters[0] >= weights[0] - 1e-12
    assert count(result, "reducescatter stage0") == 2 * m  # a collective and its transfer
    assert count(result, "allgather stage0") == 2  # one parameter all-gather after the step
    summary = result.summary
    assert summary["zero_stage"] == 2 and summary["tp"] == 2


def test_context_parallel_ring_runs_with_forward_and_b_only() -> None:
    """Ring attention with ZB-H1: K/V flows for F, K/V + dK/dV for B, nothing for W: as
    many ring flows as under 1F1B."""
    shape = {**SHAPE, "seq": 1024}
    flows = {}
    for schedule in ("1f1b", "zb-h1"):
        result = run(with_schedule(doc(cp=2, pp=2, gpus=4, batch=4, shape=shape), schedule))
        flows[schedule] = sum(1 for r in result.records if r.label == "kv ring")
    assert flows["zb-h1"] == flows["1f1b"] > 0


@pytest.mark.parametrize(
    "changes, moe, schedule, path, words",
    [
        ({"cp": 2, "dp": 2, "ep": 2, "gpus": 4}, True, "1f1b", "parallelism.ep", "context"),
        ({"cp": 2, "tp": 4, "tp_mode": "2d"}, False, "1f1b", "parallelism.tp_mode", "cp > 1"),
        (
            {"dp": 2, "ep": 2, "gpus": 2, "offload": "optimizer"},
            True,
            "1f1b",
            "training.offload",
            "ep > 1",
        ),
        (
            {"tp": 4, "tp_mode": "2d", "gpus": 4, "offload": "optimizer"},
            False,
            "1f1b",
            "training.offload",
            "2d",
        ),
        (
            {"pp": 2, "gpus": 2, "offload": "activations"},
            False,
            "zb-h1",
            "training.offload.activations",
            "zb-h1",
        ),
    ],
)
def test_pairs_not_modelled_together_are_refused(
    changes: dict[str, Any], moe: bool, schedule: str, path: str, words: str
) -> None:
    changes = dict(changes)
    offload = changes.pop("offload", None)
    document = with_schedule(doc(batch=8, **changes), schedule)
    if moe:
        with_moe(document)
    if offload is not None:
        document["training"]["offload"] = {offload: "cpu"}
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == path
    assert words in str(info.value)
