"""Mixture of experts and expert parallelism (clustersim.model.moe, strategies/hybrid/experts).

Sources: parameter counts of the published models (Jiang et al. 2024, "Mixtral of
Experts": 46.7B total, 12.9B active; Dai et al. 2024, "DeepSeekMoE": 16.4B total, 2.8B
active; DeepSeek-AI 2024, "DeepSeek-V3 Technical Report": 671B, 37B); the direct
all-to-all's alpha-beta cost, ``alpha + (n - 1) S / n / B`` per rank over the bottleneck
link; ZeRO's model-state bytes (Rajbhandari et al. 2020) with experts split over ep.
The reference hardware is tests/test_hybrid.py's: 8-GPU nodes at 100 TFLOP/s, NVSwitch
at 100 GB/s per GPU with 1 us per link.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.errors import ScenarioError
from clustersim.model.moe import MoE, expert_shares, load_factors, moe_blocks
from clustersim.model.presets import build_preset
from clustersim.model.transformer import Transformer
from tests.test_hybrid import LINK_LATENCY, NVLINK_BPS, RATE, SHAPE, doc, run

MOE = {"experts": 8, "top_k": 2}
H, S, F, V, LAYERS = SHAPE["hidden"], SHAPE["seq"], 4 * SHAPE["hidden"], SHAPE["vocab"], 4


def moe_doc(moe: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """tests/test_hybrid.py's scenario with experts on every block."""
    document = doc(**changes)
    document["model"]["moe"] = dict(MOE if moe is None else moe)
    return document


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize(
    "name, total, active, active_tolerance",
    [
        ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01),
        # DeepSeekMoE Table: "2.8B" activated, rounded to 0.1B: 2.83B is within its rounding
        ("deepseek-moe-16b", 16.4e9, 2.8e9, 0.05e9 / 2.8e9),
        # standard attention stands in for MLA (+18M parameters per block, all active)
        ("deepseek-v3", 671e9, 37e9, 0.05),
    ],
)
def test_preset_parameters_match_published(
    name: str, total: float, active: float, active_tolerance: float
) -> None:
    shape = build_preset(name).transformer
    assert shape.params == pytest.approx(total, rel=0.01)
    assert shape.active_params == pytest.approx(active, rel=active_tolerance)


def test_mixtral_parameters_by_hand() -> None:
    """Per block: attention h(h + 2 h_kv) + h^2, two RMS norms, router 8h, 8 SwiGLU experts of
    3 h f; embedding and untied head V h each, final norm h."""
    h, kv, f, v = 4096, 1024, 14336, 32000
    block = h * (h + 2 * kv) + h * h + 2 * h + 8 * h + 8 * 3 * h * f
    assert build_preset("mixtral-8x7b").params == 2 * v * h + 32 * block + h == 46_702_792_704
    active = 2 * v * h + h + 32 * (block - 6 * 3 * h * f)
    assert build_preset("mixtral-8x7b").transformer.active_params == active


# --------------------------------------------------------------------------- shapes


def shape(**moe: Any) -> Transformer:
    fields = {"experts": 8, "top_k": 2, "blocks": moe_blocks(LAYERS), "expert_ffn": F, **moe}
    return Transformer(LAYERS, H, 8, F, V, S, moe=MoE(**fields))


@pytest.mark.parametrize("experts, top_k, shared", [(8, 1, 0), (8, 2, 0), (64, 6, 2), (16, 4, 1)])
def test_moe_flops_count_the_active_experts_and_router(
    experts: int, top_k: int, shared: int
) -> None:
    """Forward per sequence: router 2 s h E + (k + shared) x 2 matrices x 2 s h f_e."""
    t = shape(experts=experts, top_k=top_k, shared_experts=shared, expert_ffn=F // 4)
    layer = next(x for x in t.build("m").layers if x.kind == "moe")
    assert layer.forward_flops == 2 * S * H * experts + (top_k + shared) * 4 * S * H * (F // 4)
    assert layer.backward_flops == 2 * layer.forward_flops
    assert layer.params == 2 * H + H * experts + (experts + shared) * (2 * H * F // 4 + F // 4 + H)


@pytest.mark.parametrize("capacity", [1.0, 1.25, 2.0])
@pytest.mark.parametrize("tp", [1, 2])
def test_moe_activations_are_top_k_padded_expert_mlps(capacity: float, tp: int) -> None:
    """GPT-style MoE layer per sequence: 5 s h whole (norm input, expert input, dropout mask)
    + c k x the GeLU input and output (2 s f each, 2 bytes), split over tp."""
    from clustersim.model.activations import layer_activation_bytes

    t = shape(capacity_factor=capacity)
    model = t.build("m")
    layer = next(x for x in model.layers if x.kind == "moe")
    expected = 5 * S * H + capacity * 2 * 4 * S * F / tp
    assert layer_activation_bytes(layer, model, 1.0, tp=tp) == pytest.approx(expected)
    if tp == 1:
        assert layer.activation_bytes == pytest.approx(expected)


def test_expert_layer_rules() -> None:
    assert moe_blocks(6) == (0, 1, 2, 3, 4, 5)
    assert moe_blocks(6, every=2) == (0, 2, 4)
    assert moe_blocks(6, first_dense=1) == (1, 2, 3, 4, 5)
    assert moe_blocks(7, every=2, first_dense=3) == (3, 5)
    assert moe_blocks(6, listed=[4, 1, 4]) == (1, 4)


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_load_factors(ep: int) -> None:
    """L_g = ep x sum over GPU g's experts of max(c / E, p_e): c uniform; skew by hand."""
    assert load_factors(expert_shares(8, None), ep, 1.25) == pytest.approx([1.25] * ep)
    harmonic = sum(1 / (e + 1) for e in range(8))
    zipf = [1 / (e + 1) / harmonic for e in range(8)]
    per = 8 // ep
    expected = [ep * sum(max(1 / 8, p) for p in zipf[g * per : (g + 1) * per]) for g in range(ep)]
    assert load_factors(expert_shares(8, ("zipf", 1.0)), ep, 1.0) == pytest.approx(expected)
    # max_load 3: expert 0 gets 3/8 of the tokens, the 7 others 5/56 each (padded to 1/8)
    hot = load_factors(expert_shares(8, ("max_load", 3.0)), ep, 1.0)
    assert hot[0] == pytest.approx(ep * (3 / 8 + (per - 1) / 8))


# --------------------------------------------------------------------------- expert parallelism


def alltoall_bytes(micro_batch: int, capacity: float = 1.0) -> float:
    """A rank's dispatch buffer: b s k h x 2 bytes (bf16) x capacity factor."""
    return micro_batch * S * MOE["top_k"] * H * 2 * capacity


@pytest.mark.parametrize("ep", [2, 4, 8])
@pytest.mark.parametrize("micro_batch", [1, 4])
def test_alltoall_in_a_node_is_alpha_beta(ep: int, micro_batch: int) -> None:
    """NVSwitch: alpha = 2 links x 1 us, then (ep - 1) S / ep through each GPU's 100 GB/s link;
    2 all-to-alls (dispatch, combine) per MoE layer per forward; the same as the collectives
    package's direct all-to-all."""
    result = run(
        moe_doc(dp=ep, gpus=ep, ep=ep, batch=2 * ep * micro_batch, micro_batch=micro_batch)
    )
    block = result.summary["moe"]
    nbytes = alltoall_bytes(micro_batch)
    one = 2 * LINK_LATENCY + (ep - 1) / ep * nbytes / NVLINK_BPS
    assert block["alltoall_bytes_per_microbatch"] == nbytes
    assert block["alltoalls_per_microbatch"] == [2 * LAYERS]
    assert block["alltoall_seconds_per_microbatch_forward"][0] == pytest.approx(2 * LAYERS * one)
    group = tuple(result.summary["stage_devices"][d][0] for d in range(ep))
    direct = analytical_time(CollectiveCall("alltoall", group, nbytes, "direct"), result.topology)
    assert direct == pytest.approx(one)
    holds = [r for r in result.records if r.label == "ep alltoall"]
    # forward + backward of every micro-batch on every GPU: 2 per micro-batch per device
    assert len(holds) == 2 * 2 * ep
    assert holds[0].end_s - holds[0].start_s == pytest.approx(2 * LAYERS * one)


@pytest.mark.parametrize("nodes", [2, 4])
def test_alltoall_across_nodes_is_bound_by_the_nic(nodes: int) -> None:
    """One GPU per node: every byte leaving a rank crosses its NIC (10 GB/s here, the
    bottleneck), alpha the route latency: alpha + (n - 1) S / n / B_nic."""
    result = run(moe_doc(dp=nodes, nodes=nodes, gpus=1, ep=nodes, batch=2 * nodes, nic="10GB/s"))
    devices = [r[0] for r in result.summary["stage_devices"]]
    alpha = result.topology.routes(devices[0], devices[1])[0].latency_s
    one = alpha + (nodes - 1) / nodes * alltoall_bytes(1) / 10e9
    got = result.summary["moe"]["alltoall_seconds_per_microbatch_forward"][0]
    assert got == pytest.approx(2 * LAYERS * one, rel=1e-9)


@pytest.mark.parametrize(
    "skew, load", [(None, 1.25), ({"zipf": 1.0}, 6 / 2.717857), ({"max_load": 3.0}, 2.125)]
)
def test_expert_compute_is_set_by_the_busiest_gpu(skew: dict | None, load: float) -> None:
    """dp = ep = 4, 8 experts (2 per GPU), capacity 1.25: the forward of the whole model
    (pp 1) costs its FLOPs + (L - 1) x the routed experts' FLOPs of 4 layers, L by hand:
    uniform 1.25; Zipf 1: 4 (1 + 1/2) / H_8 = 2.2076 (H_8 = 2.717857, both shares above the
    capacity 1.25 / 8); max_load 3: 4 (3/8 + 1.25/8) = 2.125 (the cold expert padded)."""
    moe = {**MOE, "capacity_factor": 1.25, **({"skew": skew} if skew else {})}
    result = run(moe_doc(moe, dp=4, gpus=4, ep=4, batch=4))
    assert result.summary["moe"]["busiest_load"] == pytest.approx(load, abs=5e-5)
    attention = 2 * S * H * 3 * H + 2 * S * H * H + 4 * S * S * H
    experts = 2 * S * H * 8 + 2 * 4 * S * H * F
    forward = LAYERS * (attention + experts) + 2 * S * H * V
    extra = (result.summary["moe"]["busiest_load"] - 1) * 2 * 4 * S * H * F * LAYERS
    fwd = [r for r in result.records if r.kind == "compute" and r.label == "fwd"]
    assert fwd and all(r.end_s - r.start_s == pytest.approx((forward + extra) / RATE) for r in fwd)


@pytest.mark.parametrize("ep", [1, 2, 4])
@pytest.mark.parametrize("zero", [0, 1])
def test_memory_per_gpu_splits_experts_over_ep(ep: int, zero: int) -> None:
    """bf16 + Adam as Megatron-LM keeps it: dense parameters (2 + 4 + 12/dp with the
    distributed optimizer, else 18) bytes each, routed experts / ep with their optimizer
    states over dp / ep (dp = 4)."""
    result = run(moe_doc(dp=4, gpus=4, ep=ep, batch=4, zero=zero))
    t = shape()
    routed = LAYERS * 8 * (2 * H * F + F + H)
    dense = t.params - routed
    per = (lambda n: 6 + 12 / n) if zero else (lambda n: 18)
    expected = dense * per(4) + routed / ep * per(4 // ep)
    row = result.summary["memory"]["per_device"][result.summary["workers"][0]]
    states = row["weights_bytes"] + row["gradients_bytes"] + row["optimizer_states_bytes"]
    assert states == pytest.approx(expected)


def test_expert_gradients_sync_over_dp_over_ep() -> None:
    """dp 4, ep 2: dense gradients over the 4 replicas; each expert half over the 2 replicas
    holding it (replicas 0, 2 and 1, 3), routed / ep x 2 bytes."""
    result = run(moe_doc(dp=4, gpus=4, ep=2, batch=4))
    routed = LAYERS * 8 * (2 * H * F + F + H)
    dense = shape().params - routed
    assert result.summary["communication"]["allreduce_bytes"] == [dense * 2]
    syncs = {r.label for r in result.records if r.kind == "collective"}
    assert "ep alltoall" in syncs
    assert result.summary["moe"]["expert_dp"] == 2


@pytest.mark.parametrize(
    "changes, moe, path, words",
    [
        (
            {"dp": 4, "gpus": 4, "ep": 3},
            MOE,
            "parallelism.ep",
            "does not divide the 4 data-parallel",
        ),
        ({"dp": 4, "gpus": 4, "ep": 4}, {"experts": 6}, "parallelism.ep", "the 6 experts"),
        ({"dp": 4, "gpus": 4, "ep": 2}, None, "parallelism.ep", "the model has no experts"),
        ({}, {"experts": 4, "top_k": 5}, "model.moe.top_k", "but the layer has 4"),
        ({}, {"experts": 4, "expert_layers": [1, 9]}, "model.moe.expert_layers", "block 9"),
        (
            {},
            {"experts": 4, "expert_layers": {"first_dense": 4}},
            "model.moe.expert_layers.first_dense",
            "none",
        ),
        ({}, {"experts": 4, "skew": {"max_load": 5}}, "model.moe.skew.max_load", "4 experts"),
        ({}, {"top_k": 2}, "model.moe.experts", "required"),
    ],
)
def test_impossible_moe_is_an_error(
    changes: dict[str, Any], moe: dict | None, path: str, words: str
) -> None:
    document = doc(**changes) if moe is None else moe_doc(moe, **changes)
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == path
    assert words in str(info.value)


def test_moe_needs_a_transformer() -> None:
    document = moe_doc()
    document["model"] = {"layers": [{"name": "fc", "params": 1e6, "flops": 1e9}], "moe": MOE}
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == "model.moe"


def test_example_scenario_shows_the_alltoalls() -> None:
    """scenarios/moe/mixtral_8x7b_ep8.yaml: the all-to-alls are in the timeline, the summary
    has the moe block (Mixtral's 46.7B / 12.9B parameters, 84 MB buffers)."""
    from clustersim import simulate

    result = simulate("scenarios/moe/mixtral_8x7b_ep8.yaml")
    block = result.summary["moe"]
    assert block["ep"] == 8 and block["experts_per_gpu"] == 1
    assert block["alltoall_bytes_per_microbatch"] == 4096 * 2 * 4096 * 2 * 1.25
    assert block["active_params"] == pytest.approx(12.9e9, rel=0.01)
    holds = [r for r in result.records if r.label == "ep alltoall"]
    # 32 GPUs x 4 micro-batches x (forward + backward) x 2 iterations
    assert len(holds) == 32 * 4 * 2 * 2


@pytest.mark.parametrize("nic", ["1GB/s", "100GB/s"])
def test_overlapped_alltoalls_expose_only_what_outlasts_compute(nic: str) -> None:
    """ep_overlap: each op's all-to-alls start with its compute; the op ends at
    max(compute end, all-to-all end).  Across 4 one-GPU nodes behind a slow NIC the
    all-to-alls outlast the compute, behind a fast one they are hidden."""
    document = moe_doc(dp=4, nodes=4, gpus=1, ep=4, batch=4, nic=nic, ep_overlap=True)
    result = run(document)
    compute = {
        (r.resource, r.microbatch, r.label): r
        for r in result.records
        if r.kind == "compute" and r.label in ("fwd", "bwd")
    }
    holds = [r for r in result.records if r.label == "ep alltoall"]
    assert len(holds) == 2 * 4
    for hold in holds:
        ops = [
            c for (dev, j, _), c in compute.items() if dev == hold.resource and j == hold.microbatch
        ]
        op = next(c for c in ops if c.start_s == pytest.approx(hold.start_s))
        end = max(op.end_s, hold.end_s)
        after = [c.start_s for c in ops if c.start_s > op.start_s] or [result.makespan_s]
        assert min(after) >= end - 1e-12
    hidden = all(
        h.end_s <= compute[h.resource, h.microbatch, "fwd"].end_s + 1e-12 for h in holds[:1]
    )
    assert hidden == (nic == "100GB/s")
