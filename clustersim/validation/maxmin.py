"""Reference max-min fair sharing cases: small networks whose max-min fair rates are solved
by hand (progressive filling), the same examples ``tests/test_rate_solver.py`` holds the
solver to, plus N1's contended uplink seen as rates.  Each case gives the flows' routes (as
link indices) and the links' capacities, and expects every flow's rate."""

from __future__ import annotations

import math
import random

from ..network import max_min_rates
from .case import Case, Tolerance

FAMILY = "maxmin"
HAND = "max-min fairness (Bertsekas & Gallager, Data Networks), solved by hand"
REFERENCE = (
    # id, title, flows (links each crosses), link capacities, expected rates, unit of both
    ("MM1", "parking lot, equal capacities",
     ((0, 1, 2), (0,), (1,), (2,)), (1.0, 1.0, 1.0), (0.5, 0.5, 0.5, 0.5), "B/s"),
    ("MM2", "parking lot, capacities 1, 2, 3",
     ((0, 1, 2), (0,), (1,), (2,)), (1.0, 2.0, 3.0), (0.5, 0.5, 1.5, 2.5), "B/s"),
    ("MM3", "parking lot, two short flows on link 1",
     ((0, 1, 2), (0,), (1,), (1,), (2,)), (1.0, 2.0, 3.0), (0.5, 0.5, 0.75, 0.75, 2.5), "B/s"),
    ("MM4", "two levels: A on 0, B on 0 and 1, C on 1",
     ((0,), (0, 1), (1,)), (1.0, 10.0), (0.5, 0.5, 9.5), "B/s"),
    ("MM5", "a flow crossing a link twice counts once",
     ((0, 0, 1), (1,)), (2.0, 5.0), (2.0, 3.0), "B/s"),
    ("MM6", "N1: two 10 Gb/s NIC flows through one 10 Gb/s uplink",
     ((0, 2, 3), (1, 2, 4)), (10.0,) * 5, (5.0, 5.0), "Gb/s"),
)  # fmt: skip


def _case(
    cid: str,
    title: str,
    flows: tuple[tuple[int, ...], ...],
    capacities: tuple[float, ...],
    expected: tuple[float, ...],
    unit: str,
) -> Case:
    return Case(
        cid,
        FAMILY,
        title,
        HAND,
        expected,
        unit,
        Tolerance(rel=1e-12),
        lambda: tuple(max_min_rates([list(f) for f in flows], list(capacities))),
        f"max_min_rates over {len(flows)} flows, {len(capacities)} links",
    )


PLATFORMS = 444
"""Seeded random platforms the bottleneck certificate is checked on."""
SLACK = 1e-9
"""Relative slack of the certificate's comparisons (floating-point sums of rates)."""
CERTIFICATE = (
    "Bertsekas & Gallager, Data Networks, 6.5.2: rates are max-min fair iff feasible and "
    "every flow has a saturated bottleneck link on which its rate is the largest"
)


def random_platform(seed: int) -> tuple[list[list[int]], list[float]]:
    """Platform ``seed``: 2-400 links (capacities with ties, zeros, 1.25e10 and inf) and
    1-300 flows over 0-5 distinct links each."""
    rng = random.Random(seed)
    n_links = rng.randint(2, 400)
    caps = [
        rng.choice([0.0, 1.0, 2.0, 2.0, 3.0, 0.7, 1.25e10, math.inf])
        * rng.choice([1.0, 1.0, 1.1, 1.0 / 3.0])
        for _ in range(n_links)
    ]
    flows = [
        rng.sample(range(n_links), rng.randint(0, min(5, n_links)))
        for _ in range(rng.randint(1, 300))
    ]
    return flows, caps


def is_max_min_fair(flows: list[list[int]], caps: list[float], rates: list[float]) -> bool:
    """The bottleneck certificate (:data:`CERTIFICATE`); a flow crossing no link, or only
    links of infinite capacity, must have an infinite rate."""
    loads = [0.0] * len(caps)
    largest = [0.0] * len(caps)
    for links, rate in zip(flows, rates):
        for link in set(links):
            loads[link] += rate
            largest[link] = max(largest[link], rate)
    if any(load > cap * (1 + SLACK) for load, cap in zip(loads, caps)):
        return False
    for links, rate in zip(flows, rates):
        finite = [link for link in set(links) if math.isfinite(caps[link])]
        if not finite:
            if rate != math.inf:
                return False
            continue
        if not any(
            loads[link] >= caps[link] * (1 - SLACK) and rate >= largest[link] * (1 - SLACK)
            for link in finite
        ):
            return False
    return True


def _certified() -> float:
    """How many of the :data:`PLATFORMS` random platforms' solved rates pass the certificate."""
    passed = 0
    for seed in range(PLATFORMS):
        flows, caps = random_platform(seed)
        passed += is_max_min_fair(flows, caps, max_min_rates(flows, caps))
    return float(passed)


CASES = tuple(_case(*row) for row in REFERENCE) + (
    Case(
        "MM-444",
        FAMILY,
        f"bottleneck certificate on {PLATFORMS} seeded random platforms",
        CERTIFICATE,
        float(PLATFORMS),
        "platforms",
        Tolerance(),
        _certified,
        f"max_min_rates on random_platform(0 .. {PLATFORMS - 1})",
    ),
)
