"""Batch shares on mixed hardware (``data_parallel.balance``; clustersim/parallel/batch_shares.py,
the data_parallel and zero strategies, strategies/hybrid/replica_batches.py).

Held to: Hamilton's largest-remainder apportionment (explicit weights); brute-force min-max
search (the speed balancer's whole-unit shares); the harmonic-mean rate of workers that end
their compute together (per-sample times from the catalog's peaks x efficiencies, not from
the simulator); the synchronous rule that without balancing the slow type sets the pace;
and exit 2 with the key path for what cannot be balanced.
"""

from __future__ import annotations

import copy
import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare, simulate
from clustersim.cli import main
from clustersim.parallel.batch_shares import (
    RankClass,
    balanced_shares,
    even_shares,
    weighted_shares,
)
from clustersim.scenario import parse_scenario
from clustersim.studies import plan

# Dense bf16 peaks and efficiency of the catalog's GPUs: A100 SXM4 312 TFLOP/s (lockwood-a100),
# H100 SXM5 989 TFLOP/s (bekman-tflops), efficiency 0.754 and 0.68 (megatron-calibration,
# h100-calibration): clustersim/hardware/gpus/a100-sxm4-80gb.yaml, h100-sxm5-80gb.yaml.
A100_RATE = 312e12 * 0.754
H100_RATE = 989e12 * 0.68
LAYER_FLOPS, LAYERS = 4e10, 2
"""Forward FLOPs per sample of each layer; the backward is given as twice that."""
SAMPLE_FLOPS = LAYERS * 3 * LAYER_FLOPS
"""Forward and backward FLOPs of one sample through the model."""


def cluster(a100: int = 1, h100: int = 1) -> dict[str, Any]:
    """``a100`` DGX A100 nodes, then ``h100`` DGX H100 nodes, one per rack."""
    groups = [{"preset": "dgx-a100", "count": a100}, {"preset": "dgx-h100", "count": h100}]
    return {
        "kind": "two_tier",
        "racks": a100 + h100,
        "nodes_per_rack": 1,
        "rack_uplink": {"oversubscription": 1},
        "node_groups": [g for g in groups if g["count"]],
    }


def flat_job(batch: int, balance: Any = "even", a100: int = 1, h100: int = 1) -> dict[str, Any]:
    """Data parallelism of a list of layers (priced FLOPs / (peak x efficiency): the flat
    model), with a negligible optimizer step (1,000 parameters per layer)."""
    layer = {"params": 1e3, "flops": LAYER_FLOPS, "backward_flops": 2 * LAYER_FLOPS}
    return {
        "name": "balance",
        "cluster": cluster(a100, h100),
        "model": {"layers": [{"name": f"l{i}", **layer} for i in range(LAYERS)]},
        "training": {"global_batch": batch, "iterations": 2, "precision": "bf16"},
        "data_parallel": {"balance": balance},
        "network": {"model": "analytical"},
    }


SMALL_TRANSFORMER = {"layers": 4, "hidden": 1024, "heads": 16, "seq": 1024, "vocab": 32000}


def transformer_job(batch: int, balance: Any = "even", a100: int = 1, h100: int = 1) -> dict:
    """Data parallelism of a small transformer, priced by the roofline compute model."""
    doc = flat_job(batch, balance, a100, h100)
    doc["model"] = {"transformer": dict(SMALL_TRANSFORMER)}
    doc["training"]["optimizer"] = "adam"
    return doc


def hybrid_job(balance: Any = "even", a100: int = 1, h100: int = 1, **keys: Any) -> dict:
    """tp 4 x pp 2 x dp (1 per node) of a transformer, 96 samples in micro-batches of one."""
    doc = transformer_job(96, balance, a100, h100)
    doc["model"]["transformer"]["layers"] = 8
    doc["training"]["micro_batch"] = 1
    doc["parallelism"] = {"tp": 4, "pp": 2, **keys}
    return doc


def compute_per_iteration(result: Any, iteration: int = 1) -> dict[str, float]:
    """Per device: seconds of forward and backward compute in ``iteration`` (from the records)."""
    out: dict[str, float] = {}
    for r in result.records:
        if r.iteration == iteration and r.phase in ("forward", "backward") and r.kind == "compute":
            out[r.resource] = out.get(r.resource, 0.0) + r.end_s - r.start_s
    return out


# --------------------------------------------------------------------------- the arithmetic


@pytest.mark.parametrize("total", [1, 7, 64, 100, 1001])
@pytest.mark.parametrize(
    "weights", [[1.0], [1, 1, 1], [1, 3.17, 3.17, 1], [0.1, 0.2, 0.7], [5, 1e-3, 2, 2, 2]]
)
def test_weighted_shares_are_hamiltons_largest_remainders(total: int, weights: list) -> None:
    """Each rank the floor or the ceiling of its exact quota, the ceilings to the largest
    remainders (ties to the lower rank), adding up to the total."""
    shares = weighted_shares(total, weights)
    quotas = [Fraction(total) * Fraction(w) / sum(Fraction(x) for x in weights) for w in weights]
    assert sum(shares) == total
    up = [i for i, (s, q) in enumerate(zip(shares, quotas, strict=True)) if s > q]
    down = [i for i in range(len(shares)) if i not in up]
    for i, (s, q) in enumerate(zip(shares, quotas, strict=True)):
        assert s in (math.floor(q), math.ceil(q)), i
    remainder = [q - math.floor(q) for q in quotas]
    for i, j in itertools.product(up, down):
        if shares[j] != quotas[j]:
            assert (remainder[i], -i) > (remainder[j], -j)


def _brute_min_max(total: int, seconds: list, minimum: int) -> float:
    """The smallest possible largest time over every way to give ranks >= minimum units."""
    best = math.inf
    for split in itertools.product(range(minimum, total + 1), repeat=len(seconds)):
        if sum(split) == total:
            best = min(best, max(f(n) for f, n in zip(seconds, split, strict=True)))
    return best


@pytest.mark.parametrize("total", [3, 5, 8, 13])
@pytest.mark.parametrize(
    "kinds",
    [
        (lambda n: 1.0 * n, lambda n: 3.17 * n),  # linear (flat compute model)
        (lambda n: 0.5 + n, lambda n: 0.1 + 0.4 * n),  # a fixed part (the optimizer step)
        (lambda n: n / (1 + 0.2 / n), lambda n: 2 * n**0.8),  # roofline-like, not linear
        (lambda n: 4.0 * (n + 1), lambda n: 1.0 * (n + 1)),  # (m + p - 1) t: a pipeline
    ],
)
def test_speed_shares_are_min_max_optimal_in_whole_units(total: int, kinds: tuple) -> None:
    """The speed balancer's largest time equals the brute-force minimum over every split
    (two ranks of each of two classes, at least one unit each)."""
    classes = [RankClass((0, 2), kinds[0]), RankClass((1, 3), kinds[1])]
    if total < 4:
        with pytest.raises(ValueError):
            balanced_shares(total, classes)
        return
    shares = balanced_shares(total, classes)
    per_rank = [kinds[0], kinds[1], kinds[0], kinds[1]]
    assert sum(shares) == total and min(shares) >= 1
    got = max(f(n) for f, n in zip(per_rank, shares, strict=True))
    assert got == pytest.approx(_brute_min_max(total, per_rank, 1), rel=1e-12)


@pytest.mark.parametrize("total,ranks", [(8, 8), (13, 8), (64, 16), (16_387, 16_384)])
def test_speed_shares_of_one_speed_are_the_even_split(total: int, ranks: int) -> None:
    shares = balanced_shares(total, [RankClass(tuple(range(ranks)), lambda n: 2.0 * n)])
    assert shares == even_shares(total, ranks)


# --------------------------------------------------------------------------- data parallel


@pytest.mark.parametrize("a100,h100", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("batch", [64, 100, 1000])
def test_balanced_mixed_data_parallel_runs_at_the_harmonic_mean_rate(
    a100: int, h100: int, batch: int
) -> None:
    """Balanced by speed, the workers end their compute together: the iteration's compute
    takes global_batch / sum of the workers' rates, T = B / sum_i (1 / t_i) with t_i one
    sample's FLOPs / (peak x efficiency) of worker i -- n workers at n / harmonic mean of
    the t_i.  Whole samples allow no better than T and cost at most one sample of the
    slowest type beyond it: T <= measured <= T + t_A100."""
    t_a, t_h = SAMPLE_FLOPS / A100_RATE, SAMPLE_FLOPS / H100_RATE
    ideal = batch / (8 * a100 / t_a + 8 * h100 / t_h)
    result = simulate(parse_scenario(flat_job(batch, "speed", a100, h100)))
    slowest = max(compute_per_iteration(result).values())
    assert ideal * (1 - 1e-9) <= slowest <= ideal + t_a * (1 + 1e-9)
    even = simulate(parse_scenario(flat_job(batch, "even", a100, h100)))
    assert max(compute_per_iteration(even).values()) == pytest.approx(
        math.ceil(batch / (8 * (a100 + h100))) * t_a, rel=1e-9
    )
    shares = result.summary["batch_shares"]
    assert shares["balance"] == "speed" and shares["unit"] == "sample"
    assert sum(t["samples"] for t in shares["types"].values()) == batch


@pytest.mark.parametrize("batch", [64, 256])
@pytest.mark.parametrize("a100,h100", [(1, 1), (1, 2)])
def test_balanced_is_faster_than_even_and_never_slower_than_the_slow_type(
    batch: int, a100: int, h100: int
) -> None:
    """A transformer under the roofline compute model (time not linear in the samples):
    balanced beats the even split, which runs at the all-A100 cluster's pace, and is never
    slower than that cluster."""
    time = {
        balance: simulate(parse_scenario(transformer_job(batch, balance, a100, h100))).summary[
            "iteration_time_s"
        ]
        for balance in ("even", "speed")
    }
    slow = transformer_job(batch, "even", a100 + h100, 0)
    all_a100 = simulate(parse_scenario(slow)).summary["iteration_time_s"]
    assert time["speed"] < 0.85 * time["even"]
    assert time["speed"] < all_a100
    assert time["even"] == pytest.approx(all_a100, rel=0.02)


def test_explicit_weights_give_exactly_the_shares_asked() -> None:
    """100 samples, A100s weight 1, H100s weight 3: quotas 3.125 and 9.375; the floors give
    96, the 4 left go to the largest remainders, the first four H100s."""
    doc = flat_job(100, {"rack0/*": 1, "rack1/*": 3})
    strategy = prepare(parse_scenario(doc)).strategy
    assert strategy.samples == [3.0] * 8 + [10.0] * 4 + [9.0] * 4
    summary = simulate(parse_scenario(doc)).summary
    assert summary["batch_shares"] == {
        "balance": "weights",
        "unit": "sample",
        "types": {
            "a100-sxm4-80gb": {"ranks": 8, "share_min": 3, "share_max": 3, "samples": 24.0},
            "h100-sxm5-80gb": {"ranks": 8, "share_min": 9, "share_max": 10, "samples": 76.0},
        },
    }
    assert summary["throughput_samples_per_s"] == pytest.approx(
        100 / summary["iteration_time_s"], rel=1e-9
    )


def test_speed_on_one_type_is_the_even_run() -> None:
    """One GPU type: the same shares, the same run; only the ``batch_shares`` key is added."""
    even = simulate(parse_scenario(transformer_job(100, "even", 2, 0))).summary
    speed = simulate(parse_scenario(transformer_job(100, "speed", 2, 0))).summary
    assert speed.pop("batch_shares")["types"] == {
        "a100-sxm4-80gb": {"ranks": 16, "share_min": 6, "share_max": 7, "samples": 100.0}
    }
    assert "batch_shares" not in even
    for key in ("iteration_times_s", "devices", "throughput_samples_per_s"):
        assert speed[key] == even[key]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_balances_the_size_of_each_micro_batch(stage: int) -> None:
    """ZeRO with gradient accumulation keeps m micro-batches on every worker (its
    per-micro-batch collectives need every rank) and balances their sizes: shares are
    multiples of m adding up to the batch, and the run is faster than the even one."""
    doc = transformer_job(128, "speed")
    doc["zero"] = {"stage": stage}
    doc["training"]["micro_batch"] = 2
    strategy = prepare(parse_scenario(doc)).strategy
    m = strategy.micro_batches
    assert m == 128 // (16 * 2) and sum(strategy.samples) == 128
    assert all(n % m == 0 for n in strategy.samples)
    assert strategy.samples[0] < strategy.samples[-1]  # A100 first, H100 last
    even = copy.deepcopy(doc)
    even["data_parallel"]["balance"] = "even"
    balanced = simulate(parse_scenario(doc)).summary["iteration_time_s"]
    assert balanced < simulate(parse_scenario(even)).summary["iteration_time_s"]


# --------------------------------------------------------------------------- the 3D hybrid


def _replica_ends(result: Any, strategy: Any, iteration: int) -> list[float]:
    """When each replica's last backward of ``iteration`` ended (its own clock, before the
    gradient sync every replica waits for)."""
    ends = []
    for d in range(strategy.dp):
        devices = {x for group in strategy.groups[d] for x in group}
        ends.append(
            max(
                r.end_s
                for r in result.records
                if r.resource in devices and r.phase == "backward" and r.iteration == iteration
            )
        )
    return ends


def _microbatch_pace_s(ends: list[float], counts: list[int], stages: int) -> float:
    """The slowest replica's time per micro-batch in its first iteration, as the balancer
    counts it (compute and tensor-parallel collectives): a 1F1B pipeline of p stages takes
    (m + p - 1) micro-batch times for m micro-batches."""
    return max(end / (m + stages - 1) for end, m in zip(ends, counts, strict=True))


@pytest.mark.parametrize("a100,h100", [(1, 1), (1, 2)])
def test_hybrid_replicas_end_together_within_one_micro_batch(a100: int, h100: int) -> None:
    """Balanced by speed, the replicas take different numbers of micro-batches of one size,
    and their iterations end (each on its own clock) within one micro-batch of each other:
    the slowest replica's, its compute and tensor-parallel collectives, as the balancer
    counts it, with 10% for its estimate (the collectives priced alone); the iteration
    still trains global_batch samples, faster than even."""
    doc = hybrid_job("speed", a100, h100)
    result = simulate(parse_scenario(doc))
    strategy = prepare(parse_scenario(doc)).strategy
    counts = strategy.replica_micro_batches
    assert sum(counts) * strategy.micro_batch == 96
    assert counts[0] < counts[-1]
    step = _microbatch_pace_s(_replica_ends(result, strategy, 0), counts, strategy.pp)
    for it in range(2):
        ends = _replica_ends(result, strategy, it)
        assert max(ends) - min(ends) <= 1.1 * step
    summary = result.summary
    assert summary["throughput_samples_per_s"] == pytest.approx(
        96 / summary["iteration_time_s"], rel=1e-9
    )
    even = simulate(parse_scenario(hybrid_job("even", a100, h100))).summary
    assert summary["iteration_time_s"] < 0.9 * even["iteration_time_s"]
    types = summary["batch_shares"]["types"]
    assert sum(t["samples"] for t in types.values()) == 96


def test_hybrid_unbalanced_runs_at_the_slow_types_pace() -> None:
    """Even micro-batch counts: the A100 replica sets the pace of the whole job."""
    mixed = simulate(parse_scenario(hybrid_job("even", 1, 1))).summary
    a100 = simulate(parse_scenario(hybrid_job("even", 2, 0))).summary
    assert mixed["iteration_time_s"] == pytest.approx(a100["iteration_time_s"], rel=0.02)


@pytest.mark.parametrize("balance", ["even", "speed"])
@pytest.mark.parametrize(("a100", "h100"), [(2, 1), (1, 3), (2, 2)])
def test_one_replica_per_class_stands_for_a_mixed_cluster(
    balance: str, a100: int, h100: int
) -> None:
    """``simulate_replicas: one`` on a mixed cluster plays one replica of each class -- the
    first replica of each GPU type and micro-batch count (balanced by speed, each kind gets
    its own count, and the largest remainders may give replicas of one kind counts one
    apart) -- and gives every replica's run: the same iteration times and bubbles, to the
    last digit, when the data-parallel collectives are priced alike (the analytical
    network)."""
    doc = hybrid_job(balance, a100, h100, simulate_replicas="one")
    doc["network"] = {"model": "analytical"}
    strategy = prepare(parse_scenario(doc)).strategy
    kinds = ["a100"] * a100 + ["h100"] * h100
    classes: dict[tuple[str, int], list[int]] = {}
    for replica, kind in enumerate(kinds):
        classes.setdefault((kind, strategy.replica_micro_batches[replica]), []).append(replica)
    assert strategy.played == [members[0] for members in classes.values()]
    assert len(strategy.played) >= (a100 > 0) + (h100 > 0)
    one = simulate(parse_scenario(doc)).summary
    assert [(c["replica"], c["replicas"]) for c in one["replica_classes"]] == [
        (members[0], len(members)) for members in classes.values()
    ]
    doc["parallelism"]["simulate_replicas"] = "all"
    every = simulate(parse_scenario(doc)).summary
    for key in ("iteration_times_s", "bubble_fraction", "idle_fraction", "non_compute_fraction"):
        assert one[key] == pytest.approx(every[key], rel=1e-12, abs=1e-15), key
    same = prepare(parse_scenario(hybrid_job(balance, 2, 0, simulate_replicas="one")))
    assert same.strategy.simulated == 1


def test_hybrid_weights_count_micro_batches_by_largest_remainder() -> None:
    """96 micro-batches, weights 1 : 4 per replica -> quotas 19.2 and 76.8 -> 19 and 77; the
    interleaved schedule counts groups of p = 2: quotas 9.6 and 38.4 groups -> 10 and 38."""
    doc = hybrid_job({"rack0/*": 1, "rack1/*": 4})
    assert prepare(parse_scenario(doc)).strategy.replica_micro_batches == [19, 77]
    doc["pipeline"] = {"schedule": "interleaved", "chunks": 2}
    strategy = prepare(parse_scenario(doc)).strategy
    assert strategy.replica_micro_batches == [20, 76]
    assert simulate(parse_scenario(doc)).summary["batch_shares"]["unit"] == "micro-batch"


def test_plan_lets_one_replica_of_each_class_stand_for_a_mixed_cluster() -> None:
    """``clustersim plan`` sets ``simulate_replicas: one`` on a mixed cluster too: where the
    replicas differ (placed evenly or by replica, each replica a node of its own type), one
    replica of each class is played (:mod:`clustersim.strategies.hybrid.replica_classes`)."""
    options = plan.PlanOptions(tp=(4,), pp=(2,), micro_batch=(1,), zero=(1,))
    for a100, h100, mixed in [(1, 1, True), (2, 0, False)]:
        doc = hybrid_job("speed", a100, h100)
        del doc["parallelism"], doc["training"]["micro_batch"]
        found = plan.enumerate_candidates(doc, "s.yaml", options)
        assert bool(found.gpu_types) is mixed and found.candidates
        for candidate in found.candidates:
            assert candidate.doc["parallelism"]["simulate_replicas"] == "one"


# --------------------------------------------------------------------------- bad input


def _exit(doc: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    capsys.readouterr()
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "balance,path,words",
    [
        ("fastest", "data_parallel.balance", "even, speed or weights"),
        ({"rack0/*": 0, "rack1/*": 1}, "data_parallel.balance.rack0/*", "greater than 0"),
        ({"rack0/*": -2, "rack1/*": 1}, "data_parallel.balance.rack0/*", "greater than 0"),
        ({}, "data_parallel.balance", "empty"),
        ({"rack9/*": 1, "*": 1}, "data_parallel.balance.rack9/*", "no device matches"),
        ({"*/cpu": 1, "*": 1}, "data_parallel.balance.*/cpu", "matches no device of a worker"),
        ({"rack0/*": 1}, "data_parallel.balance", "rack1/node0/gpu0 (worker 8) is matched by no"),
        ({"*": 1, "rack1/*": 2}, "data_parallel.balance.rack1/*", "rack1/node0/gpu0 is matched"),
        ({"rack0/*": 1, "rack1/*": 100}, "data_parallel.balance", "give rack0/node0/gpu0 0"),
    ],
)
def test_bad_balance_is_exit_2_naming_the_key(
    balance: Any, path: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit(flat_job(64, balance), tmp_path, capsys)
    assert code == 2 and "Traceback" not in err
    assert f": {path}: " in err and words in err, err


@pytest.mark.parametrize(
    "change,words",
    [
        ({"data_parallel": {"sync": "ps", "balance": "speed"}}, "does not read this key"),
        ({"pipeline": {"schedule": "pipedream"}}, "the pipedream schedule"),
        ({"training": {"offload": {"optimizer": "cpu"}}}, "training.offload"),
        (
            {
                "data_parallel": {
                    "balance": {"rack0/*/gpu[0-3]": 1, "rack0/*/gpu[4-7]": 2, "rack1/*": 3}
                }
            },
            "the devices of replica 0",
        ),
    ],
)
def test_what_cannot_be_balanced_is_exit_2_at_the_balance(
    change: dict, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = hybrid_job("speed") if "data_parallel" not in change else hybrid_job()
    if change.get("data_parallel", {}).get("sync") == "ps":
        doc = flat_job(64)
    for section, keys in change.items():
        doc[section] = {**doc.get(section, {}), **keys}
    code, err = _exit(doc, tmp_path, capsys)
    assert code == 2 and "Traceback" not in err
    assert ": data_parallel.balance: " in err and words in err, err
