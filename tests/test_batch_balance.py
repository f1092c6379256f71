"""Batch shares on mixed hardware (``data_parallel.balance``; clustersim/parallel/batch_shares.py,
the data_parallel and zero strategies).

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

# Dense bf16 peaks and efficiency of the catalog's GPUs: A100 SXM4 312 TFLOP/s (lockwood-a100),
# H100 SXM5 989 TFLOP/s (bekman-tflops), efficiency 0.754 both (megatron-calibration,
# h100-calibration): clustersim/hardware/gpus/a100-sxm4-80gb.yaml, h100-sxm5-80gb.yaml.
A100_RATE = 312e12 * 0.754
H100_RATE = 989e12 * 0.754
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


def test_parameter_servers_refuse_a_balance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = flat_job(64, "speed")
    doc["data_parallel"]["sync"] = "ps"
    code, err = _exit(doc, tmp_path, capsys)
    assert code == 2 and ": data_parallel.balance: " in err and "does not read this key" in err
