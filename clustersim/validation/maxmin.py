"""Reference max-min fair sharing cases: small networks whose max-min fair rates are solved
by hand (progressive filling), the same examples ``tests/test_rate_solver.py`` holds the
solver to, plus N1's contended uplink seen as rates.  Each case gives the flows' routes (as
link indices) and the links' capacities, and expects every flow's rate."""

from __future__ import annotations

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


CASES = tuple(_case(*row) for row in REFERENCE)
