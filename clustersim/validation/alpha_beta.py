"""The alpha-beta formulas of ring all-reduce (cases R1-R3 of ``shared/validation/cases.md``):
R1 runs ``scenarios/collectives/ring_allreduce_r1.yaml``; R2 builds rings of n GPUs in code
(as ``tests/test_collectives_ring.py`` does) and runs them at flow level."""

from __future__ import annotations

from typing import Any

from ..api import simulate
from ..scenario import parse_scenario
from .case import Case, Tolerance, Value, scenario

FAMILY = "alpha-beta"
D2L = "d2l, Parameter Servers, ring synchronisation"
FORMULA = "d2l, ring synchronisation, generalised (cases.md R2): 2(n-1)/n S/B + 2(n-1) a"
R2_SIZE_B = 64e6
R2_BANDWIDTH_BPS = 25e9
R2_LATENCY_S = 3e-6
R2_DEVICES = (2, 4, 8, 16, 64)


def _r1(key: str) -> Value:
    return simulate(scenario("collectives", "ring_allreduce_r1.yaml")).summary[key]


def ring_document(n: int) -> dict[str, Any]:
    """A ring all-reduce of 64 MB over ``n`` GPUs in a ring of 25 GB/s, 3 us hops."""
    return {
        "name": f"r2-ring-{n}",
        "cluster": {
            "kind": "ring",
            "devices": n,
            "link": {"bandwidth": "25GB/s", "latency": "3us"},
        },
        "workload": {"collective": "allreduce", "algorithm": "ring", "bytes": "64MB"},
        "network": {"protocol": "none", "channels": 1},  # the textbook's ring
    }


def r2_expected_s(n: int) -> float:
    return 2 * (n - 1) / n * R2_SIZE_B / R2_BANDWIDTH_BPS + 2 * (n - 1) * R2_LATENCY_S


def _r2_case(n: int) -> Case:
    return Case(
        f"R2-n{n}",
        FAMILY,
        f"ring all-reduce, {n} GPUs, 64 MB, 25 GB/s, 3 us hops",
        FORMULA,
        r2_expected_s(n),
        "s",
        Tolerance(rel=5e-3),
        lambda: simulate(parse_scenario(ring_document(n))).summary["time_s"],
        f"ring of {n} GPUs built in code, flow model",
    )


CASES = (
    Case(
        "R1",
        FAMILY,
        "8-GPU ring all-reduce of 160 MB, 54 GB/s hops",
        D2L,
        2 * 7 / 8 * 160e6 / 54e9,
        "s",
        Tolerance(rel=5e-3),
        lambda: _r1("time_s"),
        "scenarios/collectives/ring_allreduce_r1.yaml",
    ),
    Case(
        "R3",
        FAMILY,
        "bytes each GPU sends in R1: 2(n-1)/n S",
        D2L,
        2 * 7 / 8 * 160e6,
        "B",
        Tolerance(rel=1e-12),
        lambda: _r1("bytes_sent_per_device"),
        "scenarios/collectives/ring_allreduce_r1.yaml",
    ),
    *(_r2_case(n) for n in R2_DEVICES),
)
