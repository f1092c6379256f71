"""Pipeline stages on mixed hardware (issue 32): ``pipeline.stages: balanced``
(clustersim/strategies/hybrid/balance.py over clustersim/parallel/stages.py's
``minimax_split``), tensor groups of one GPU type, memory checked per type.

Held to: brute force over every contiguous split of small cases (the minimax optimum, within
memory); the proportional law on stages of known speed (layers in proportion to FLOP/s);
the run's own timeline (the stage times the split was chosen by are the compute records'
durations, and they equalise within one block on the slowest GPU); the even split (never
slower on one type, slower on mixed stages); and exit 2 with key paths for what is refused.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import memory_block, prepare, simulate
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.model.memory import over_capacity_message
from clustersim.parallel.placement import Placement
from clustersim.parallel.stages import minimax_split, split_seconds
from clustersim.scenario import parse_scenario
from clustersim.strategies.hybrid.balance import StageCosts, units_of
from clustersim.strategies.kernel_times import LayerTimes
from clustersim.topology import build_topology

A100 = {"preset": "dgx-a100"}
H100 = {"preset": "dgx-h100"}
SHAPE = {"layers": 12, "hidden": 1024, "heads": 16, "seq": 1024, "vocab": 2048}
"""A small GPT-like transformer; its head (2 h V FLOPs per token) is a fifth of a block's."""


def doc(
    groups: list[dict[str, Any]],
    *,
    layers: int = 12,
    stages: str = "balanced",
    micro_batches: int = 8,
    workers: str = "rack0/node*/gpu0",
    **parallelism: Any,
) -> dict[str, Any]:
    """One rack of one node per group (in order); the workers are GPU 0 of each node, so with
    ``pp`` = the nodes each stage is one GPU of its node's type."""
    return {
        "name": "balanced-stages",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": len(groups),
            "rack_uplink": {"oversubscription": 1},
            "node_groups": [{**group, "count": 1} for group in groups],
        },
        "model": {"transformer": {**SHAPE, "layers": layers}},
        "training": {
            "global_batch": 2 * micro_batches,
            "micro_batch": 2,
            "iterations": 1,
            "precision": "bf16",
        },
        "parallelism": {"pp": len(groups), **parallelism},
        "data_parallel": {"workers": workers},
        "pipeline": {"schedule": "1f1b", **({"stages": stages} if stages != "even" else {})},
        "network": {"model": "analytical"},
    }


def with_gpu(group: dict[str, Any], **gpu: Any) -> dict[str, Any]:
    """A node group whose GPU preset is kept and ``gpu`` keys set beside it."""
    preset = "a100-sxm4-80gb" if group["preset"] == "dgx-a100" else "h100-sxm5-80gb"
    return {**group, "gpu": {"preset": preset, **gpu}}


# --------------------------------------------------------------------------- the split itself


def splits(units: int, parts: int) -> Iterator[list[int]]:
    """Every split of ``units`` into ``parts`` contiguous runs of at least one."""
    for cuts in itertools.combinations(range(1, units), parts - 1):
        ends = (0, *cuts, units)
        yield [b - a for a, b in zip(ends, ends[1:])]


def random_case(seed: int) -> tuple[int, int, Any, Any]:
    """Up to 12 units (some free, as an embedding is) on up to 4 stages of their own speeds,
    each unit with a memory and each stage a capacity."""
    rng = random.Random(seed)
    units = rng.randint(1, 12)
    parts = rng.randint(1, min(4, units))
    costs = [rng.choice([0.0, rng.uniform(0.1, 3.0)]) for _ in range(units)]
    speeds = [rng.choice([1.0, 1.5, 2.0, 3.17]) for _ in range(parts)]
    sizes = [rng.uniform(0.5, 2.0) for _ in range(units)]
    capacity = [rng.uniform(1.0, 8.0) for _ in range(parts)]

    def seconds(k: int, first: int, count: int) -> float:
        return sum(costs[first : first + count]) / speeds[k]

    def fits(k: int, first: int, count: int) -> bool:
        return sum(sizes[first : first + count]) <= capacity[k]

    return units, parts, seconds, fits


def fits_all(split: list[int], fits: Callable[[int, int, int], bool]) -> bool:
    return all(fits(k, sum(split[:k]), n) for k, n in enumerate(split))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("with_memory", [False, True])
def test_minimax_split_is_the_brute_force_optimum(seed: int, with_memory: bool) -> None:
    """The slowest stage of the split is the least over every contiguous split (of those
    that fit the memory, with memory; None when none fits), and of the splits that reach it,
    the chosen one has the longest shortest stage."""
    units, parts, seconds, fits = random_case(seed)
    allowed = [s for s in splits(units, parts) if not with_memory or fits_all(s, fits)]
    got = minimax_split(units, parts, seconds, fits if with_memory else None)
    if not allowed:
        assert got is None
        return
    assert got is not None and sum(got) == units and len(got) == parts and min(got) >= 1
    assert not with_memory or fits_all(got, fits)
    best = min(split_seconds(s, seconds)[0] for s in allowed)
    slowest, times = split_seconds(got, seconds)
    assert slowest == pytest.approx(best, rel=1e-9, abs=1e-12)
    optimal = [s for s in allowed if split_seconds(s, seconds)[0] <= best * (1 + 1e-9)]
    evenest = max(min(split_seconds(s, seconds)[1]) for s in optimal)
    assert min(times) == pytest.approx(evenest, rel=1e-9, abs=1e-12)


def test_the_packing_is_a_search_not_a_greedy() -> None:
    """Units costing [0, 1, 0, 0] on a fast, a slow and a fast stage (3x, 1x, 3x): the best
    split is [2, 1, 1] (1/3 s, the first fast stage takes the costly unit).  A greedy from the
    last stage back, each taking all it can within 1/3 s, gives the last stage units 2 and 3
    and leaves the slow stage unit 1 (1 s): it would call 1/3 s impossible."""
    costs, speeds = [0.0, 1.0, 0.0, 0.0], [3.0, 1.0, 3.0]

    def seconds(k: int, first: int, count: int) -> float:
        return sum(costs[first : first + count]) / speeds[k]

    got = minimax_split(4, 3, seconds)
    assert got == [2, 1, 1]
    assert split_seconds(got, seconds)[0] == pytest.approx(1 / 3)


@pytest.mark.parametrize("speeds", [(1.0, 3.0), (1.0, 3.0, 1.0, 3.0), (2.0, 1.0, 1.0)])
def test_equal_layers_go_in_proportion_to_speed(speeds: tuple[float, ...]) -> None:
    """Equal layers on stages of speeds v_k: the split gives each n v_k / sum(v) layers when
    that is whole (the proportional law; every stage then takes the same time)."""
    n = int(4 * sum(speeds))

    def seconds(k: int, first: int, count: int) -> float:
        return count / speeds[k]

    got = minimax_split(n, len(speeds), seconds)
    assert got == [int(n * v / sum(speeds)) for v in speeds]


# --------------------------------------------------------------------------- on a mixed cluster


def stage_compute_s(result: Any, pp: int, microbatch: int = 1) -> list[float]:
    """Per stage, from the timeline: the forward + backward records of one micro-batch on the
    stage's first device (iteration 0)."""
    out = [0.0] * pp
    for r in result.records:
        if r.kind == "compute" and r.label in ("fwd", "bwd") and r.microbatch == microbatch:
            if r.iteration == 0 and r.resource.endswith("gpu0"):
                out[r.stage] += r.duration_s
    return out


def largest_block_s(document: dict[str, Any], device: str) -> float:
    """The largest unit the split moves (a block; the last one with the head), forward +
    backward of one micro-batch on ``device``, priced by the data-parallel strategies' layer
    times (:class:`LayerTimes`, tp 1) -- the tolerance of the equalisation."""
    prepared = prepare(parse_scenario(document))
    model = prepared.strategy.model
    times = LayerTimes(model, "none", Path("."))
    passes = times.passes(prepared.topology.devices[device], 2)
    per_layer = [(f or 0.0) + (b or 0.0) for f, b in zip(*passes, strict=True)]  # None: 0 FLOPs
    out, first = [], 0
    for count in units_of(model):
        out.append(sum(per_layer[first : first + count]))
        first += count
    return max(out)


@pytest.mark.parametrize(
    "groups",
    [[A100, H100, H100, H100], [A100, A100, H100, H100], [A100, A100, A100, H100]]
    + [[H100, A100, H100, A100]],
    ids=["1A-3H", "2A-2H", "3A-1H", "HAHA"],
)
@pytest.mark.parametrize("layers", [12, 20])
def test_balanced_stage_times_equalise(groups: list[dict[str, Any]], layers: int) -> None:
    """Stages on A100s and H100s: the balanced split's stage times, read from the timeline
    (forward + backward records of one micro-batch), differ by at most one block on an A100
    (the slowest GPU): the split moves whole blocks, so it cannot be finer.  They are the
    times the split was chosen by (``stage_balance.stage_seconds``), and the iteration beats
    the even split's."""
    document = doc(groups, layers=layers)
    result = simulate(parse_scenario(document))
    summary = result.summary
    measured = stage_compute_s(result, len(groups))
    block = largest_block_s(document, "rack0/node" + str(groups.index(A100)) + "/gpu0")
    assert max(measured) - min(measured) <= block * (1 + 1e-9)
    chosen = summary["stage_balance"]
    assert chosen["stage_seconds"] == pytest.approx(measured, rel=1e-9)
    types = ["a100-sxm4-80gb" if g is A100 else "h100-sxm5-80gb" for g in groups]
    assert chosen["pace_types"] == types
    assert chosen["pace_devices"] == [f"rack0/node{s}/gpu0" for s in range(len(groups))]
    even = simulate(parse_scenario(doc(groups, layers=layers, stages="even"))).summary
    assert summary["iteration_time_s"] < even["iteration_time_s"]
    assert max(chosen["stage_seconds"]) < max(chosen["even_stage_seconds"])
    h100_layers = sum(n for n, t in zip(summary["stage_layers"], types) if t.startswith("h100"))
    assert h100_layers > sum(n for n, t in zip(even["stage_layers"], types) if t.startswith("h"))


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_stage_times_hold_the_tensor_parallel_collectives(recompute: str) -> None:
    """tp 8 inside each node: a stage's time is its compute and its tensor-parallel holds (the
    ``tp ...`` records of the micro-batch; full recomputation runs the forward's again),
    so the A100 stage with its slower NVLink is priced whole."""
    document = doc([A100, H100], layers=16, workers="*/gpu*", tp=8)
    document["training"]["recompute"] = recompute
    result = simulate(parse_scenario(document))
    measured = [0.0, 0.0]
    for r in result.records:
        if r.iteration == 0 and r.microbatch == 1 and r.resource.endswith("gpu0"):
            if r.label in ("fwd", "bwd") or r.label.startswith("tp "):
                measured[r.stage] += r.duration_s
    assert result.summary["stage_balance"]["stage_seconds"] == pytest.approx(measured, rel=1e-9)


@pytest.mark.parametrize("gpu", [A100, H100], ids=["a100", "h100"])
@pytest.mark.parametrize("vocab", [2048, 32000])
def test_on_one_type_balanced_is_never_slower_than_even(gpu: dict[str, Any], vocab: int) -> None:
    """One GPU type: the even split is one of the splits searched, so the balanced one's slowest
    stage is no slower; with a small head they are the same split, with a head of two blocks'
    FLOPs (V = 32000) balanced takes blocks off the last stage and the iteration is faster."""
    document = doc([gpu] * 4, layers=8)
    document["model"]["transformer"]["vocab"] = vocab
    balanced = simulate(parse_scenario(document)).summary
    document["pipeline"]["stages"] = "even"
    even = simulate(parse_scenario(document)).summary
    chosen = balanced["stage_balance"]
    assert max(chosen["stage_seconds"]) <= max(chosen["even_stage_seconds"])
    if vocab == 2048:
        assert balanced["stage_layers"] == even["stage_layers"]
        assert balanced["iteration_time_s"] == pytest.approx(even["iteration_time_s"], rel=1e-12)
    else:
        assert balanced["stage_layers"][-1] < even["stage_layers"][-1]
        assert balanced["iteration_time_s"] < 0.95 * even["iteration_time_s"]


def test_layers_go_in_proportion_to_flops_per_second() -> None:
    """Equal layers, flat compute at 100 and 300 TFLOP/s (a slow and a fast type, priced as
    FLOPs / rate): 12 layers split 3 : 9, and each stage's records take n x FLOPs / rate."""
    slow = with_gpu(A100, flops="100TFLOPS", efficiency=1, compute={"model": "flat"})
    fast = with_gpu(H100, flops="300TFLOPS", efficiency=1, compute={"model": "flat"})
    document = doc([slow, fast])
    document["model"] = {
        "layers": [{"name": f"l{i}", "params": 1e6, "flops": 4e10} for i in range(12)]
    }
    result = simulate(parse_scenario(document))
    assert result.summary["stage_layers"] == [3, 9]
    layer = prepare(parse_scenario(document)).strategy.model.layers[0]
    per_layer = (layer.forward_flops + layer.backward_flops) * 2  # 2 samples per micro-batch
    want = [3 * per_layer / 100e12, 9 * per_layer / 300e12]
    assert stage_compute_s(result, 2) == pytest.approx(want, rel=1e-12)


def test_interleaved_chunks_balance_their_virtual_stages() -> None:
    """With chunks, each virtual stage is priced on its device: the H100 chunks take more."""
    document = doc([A100, H100], layers=16)
    document["pipeline"].update(schedule="interleaved", chunks=2)
    summary = simulate(parse_scenario(document)).summary
    counts = summary["stage_layers"]
    assert len(counts) == 4 and sum(counts) == 2 * 16 + 2
    assert counts[1] + counts[3] > counts[0] + counts[2]  # virtual stages 1, 3 on the H100
    assert summary["stage_balance"]["pace_types"][1] == "h100-sxm5-80gb"


# --------------------------------------------------------------------------- memory


def test_a_stage_that_does_not_fit_gets_fewer_layers() -> None:
    """H100 stages of 2 GB: the time-optimal split gives stage 1 (which holds 3 micro-batches'
    activations under 1F1B) more than fits, so it gets fewer (memory-bound, the slowest stage
    slower), the last stage (1 micro-batch) takes them, and every device fits.  The balancer's
    memory of each stage is the memory plan's peak of its device."""
    free = simulate(parse_scenario(doc([A100, H100, H100, H100]))).summary
    small = with_gpu(H100, memory="2GB")
    document = doc([A100, small, small, small])
    bound = simulate(parse_scenario(document)).summary
    assert bound["memory"]["fits"] and not free["stage_balance"]["memory_bound"]
    assert bound["stage_balance"]["memory_bound"] and bound["stage_balance"]["fits"]
    assert bound["stage_layers"][1] < free["stage_layers"][1]
    assert bound["stage_layers"][3] > free["stage_layers"][3]
    slowest = max(bound["stage_balance"]["stage_seconds"])
    assert slowest > max(free["stage_balance"]["stage_seconds"])
    prepared = prepare(parse_scenario(document))
    costs, plans = StageCosts(prepared.strategy), prepared.strategy.plans
    block = memory_block(prepared)
    for k, plan in enumerate(plans):
        peak = block.per_device[f"rack0/node{k}/gpu0"].peak_bytes
        assert costs.memory(k, plan.first_layer, plan.layers) == pytest.approx(peak, rel=1e-12)
    first = sum(free["stage_layers"][:1])
    assert not costs.fits(1, first, free["stage_layers"][1])  # the time-optimal stage 1


def test_when_nothing_fits_the_time_optimal_split_is_taken() -> None:
    """Stages of 100 MB hold no block: the split is the time-optimal one, and the memory check
    reports the devices over capacity."""
    free = simulate(parse_scenario(doc([A100, H100]))).summary
    tiny = [with_gpu(g, memory="100MB") for g in (A100, H100)]
    summary = simulate(parse_scenario(doc(tiny))).summary
    assert summary["stage_layers"] == free["stage_layers"]
    assert not summary["stage_balance"]["fits"] and not summary["memory"]["fits"]


def test_each_device_is_checked_against_its_own_memory() -> None:
    """H100 80 GB then A100 40 GB, tp 8 x dp 2: every GPU needs the same 44 GB, which fits
    the H100s only; the check names the A100s (``fullest_device``, the warning), not the first
    device with the peak."""
    document = {
        **doc([H100, with_gpu(A100, preset="a100-sxm4-40gb")], stages="even"),
        "model": {
            "transformer": {"layers": 40, "hidden": 8192, "heads": 64, "seq": 2048, "vocab": 32000}
        },
        "training": {
            "global_batch": 16,
            "micro_batch": 1,
            "iterations": 1,
            "precision": "bf16",
            "recompute": "none",  # auto would recompute until the A100s fit
        },
        "parallelism": {"tp": 8, "dp": 2, "sequence_parallel": False},  # 44 GB as written
        "data_parallel": {"workers": "*/gpu*"},
    }
    del document["pipeline"]
    memory = memory_block(prepare(parse_scenario(document)))
    rows = memory.per_device
    assert rows["rack0/node0/gpu3"].fits and rows["rack0/node0/gpu3"].capacity_bytes == 80e9
    assert not rows["rack0/node1/gpu3"].fits and rows["rack0/node1/gpu3"].capacity_bytes == 40e9
    assert 40e9 < rows["rack0/node1/gpu3"].peak_bytes == rows["rack0/node0/gpu3"].peak_bytes
    assert memory.devices_over_capacity == 8 and not memory.fits
    assert memory.peak_device == "rack0/node0/gpu0" and memory.fullest_device == "rack0/node1/gpu0"
    assert "rack0/node1/gpu0 needs" in over_capacity_message(memory)


# --------------------------------------------------------------------------- placement by type


@pytest.mark.parametrize(
    "order,one_type",
    [(["tp", "dp", "pp"], "stage"), (["tp", "pp", "dp"], "replica")],
)
def test_order_puts_each_stage_or_each_replica_on_one_type(order: list[str], one_type: str) -> None:
    """2 A100 + 2 H100 nodes, tp 4 x pp 2 x dp 4: with [tp, dp, pp] a stage's groups (every
    replica's) are one type; with [tp, pp, dp] (the default) a replica's stages are."""
    topology = build_topology(parse_scenario(doc([A100, A100, H100, H100])).cluster)
    workers = tuple(d.name for d in topology.devices.values() if d.kind == "gpu")
    placement = Placement(dp=4, tp=4, pp=2, order=tuple(order), workers=workers)
    grid = placement.grid()

    def kinds(devices: list[str]) -> set[str]:
        return {topology.devices[x].type for x in devices}

    stages = [kinds([x for d in range(4) for x in grid[d][s]]) for s in range(2)]
    replicas = [kinds([x for s in range(2) for x in grid[d][s]]) for d in range(4)]
    homogeneous = stages if one_type == "stage" else replicas
    mixed = replicas if one_type == "stage" else stages
    assert all(len(k) == 1 for k in homogeneous)
    assert all(len(k) == 2 for k in mixed)


# --------------------------------------------------------------------------- refused


BAD = [
    (
        lambda d: d["pipeline"].update(stage_layers=[7, 7]),
        "pipeline.stages",
        "one of the two",
    ),
    (lambda d: d["pipeline"].update(stages="fastest"), "pipeline.stages", "balanced"),
    (lambda d: d["model"]["transformer"].update(layers=1), "parallelism.pp", "pp x chunks <= 1"),
    (
        lambda d: (
            d["parallelism"].update(pp=1, tp=16, allow_cross_node_tp=True),
            d["data_parallel"].update(workers="*/gpu*"),
        ),
        "parallelism.tp",
        "one GPU type",
    ),
]


@pytest.mark.parametrize("change,path,allowed", BAD, ids=["both", "unknown", "blocks", "tp"])
def test_bad_input_names_its_key(change: Any, path: str, allowed: str) -> None:
    document = doc([A100, H100])
    change(document)
    with pytest.raises(ScenarioError) as raised:
        prepare(parse_scenario(document))
    problems = {p.path: p for p in raised.value.problems}
    assert path in problems, problems
    assert allowed in (problems[path].allowed or "")


def test_a_tensor_group_across_types_is_exit_2_naming_devices_and_types(
    tmp_path: Any, capsys: Any
) -> None:
    """A custom-width group over an A100 node and an H100 node (allow_cross_node_tp): exit 2
    at parallelism.tp, naming both types and the devices of each."""
    document = doc([A100, H100], workers="*/gpu[0-3]")
    document["parallelism"] = {"pp": 1, "tp": 8, "allow_cross_node_tp": True}
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "parallelism.tp" in err
    assert "4 x a100-sxm4-80gb (rack0/node0/gpu0 .. rack0/node0/gpu3)" in err
    assert "4 x h100-sxm5-80gb (rack0/node1/gpu0 .. rack0/node1/gpu3)" in err
    within = copy.deepcopy(document)
    within["parallelism"] = {"pp": 2, "tp": 4}  # one group per node: one type each
    path.write_text(yaml.safe_dump(within))
    assert main(["validate", str(path)]) == 0
    assert "stages [" in capsys.readouterr().out


def test_describe_says_how_the_split_was_chosen() -> None:
    strategy = prepare(parse_scenario(doc([A100, H100]))).strategy
    text = strategy.describe()
    assert "(balanced on the stages' devices: slowest stage" in text
    assert "even split" in text
    even = prepare(parse_scenario(doc([A100, H100], stages="even"))).strategy
    assert "balanced" not in even.describe()
