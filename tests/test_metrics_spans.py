"""clustersim.metrics.spans: every device's unions at once, the sweep's sums to the last bit."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.metrics import spans
from clustersim.records import Record

from .test_metrics import _union_by_sweep as _sweep

_INTERVAL = st.tuples(
    st.integers(0, 7),
    st.one_of(st.integers(0, 20).map(lambda i: i / 10), st.floats(0, 10)),
    st.one_of(st.just(0.0), st.integers(0, 10).map(lambda i: i / 10), st.floats(0, 3)),
    st.booleans(),
).map(lambda p: (p[0], p[1], p[1] + p[2], p[3]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_INTERVAL, max_size=80))
def test_unions_of_all_devices_are_each_devices_sweep(intervals) -> None:
    """Per device: compute, communication and either, as the sweep of its own intervals."""
    names = [f"gpu{i}" for i in range(8)]
    found = spans.DeviceSpans.of(
        names,
        [d for d, _, _, _ in intervals],
        [a for _, a, _, _ in intervals],
        [b for _, _, b, _ in intervals],
        [c for _, _, _, c in intervals],
    ).busy()
    for i, name in enumerate(names):
        mine = [(a, b, c) for d, a, b, c in intervals if d == i]
        assert found[name] == (
            _sweep([(a, b) for a, b, c in mine if c]),
            _sweep([(a, b) for a, b, c in mine if not c]),
            _sweep([(a, b) for a, b, _ in mine]),
        )


def test_sums_in_order_add_one_by_one_on_both_sides_of_the_switch() -> None:
    """Owners with many values, few and one: each sum is the values added in order from 0.0
    (over and under :data:`SEQUENTIAL_BELOW` owners left, the numpy steps and the loop)."""
    rng = random.Random(7)
    owners = 2 * spans.SEQUENTIAL_BELOW + 5
    sizes = [rng.choice((0, 1, 2, 3, 40)) for _ in range(owners)] + [3000]
    values = [[rng.uniform(0, 1) * 10 ** rng.randint(-9, 3) for _ in range(n)] for n in sizes]
    flat = [v for group in values for v in group]
    owner = [i for i, group in enumerate(values) for _ in group]
    got = spans.sums_in_order(np.array(flat), np.array(owner), len(sizes)).tolist()
    expected = []
    for group in values:
        total = 0.0
        for v in group:
            total += v
        expected.append(total)
    assert got == expected


def test_device_spans_count_a_transfer_on_both_ends_once_on_a_loopback() -> None:
    """A transfer is communication for its source and destination; src == dst counts once;
    records of other kinds are left out."""
    records = [
        Record("a", "compute", "c", 0.0, 2.0),
        Record("a", "transfer", "t", 1.0, 4.0, 10.0, 0.0, "a", "b"),
        Record("b", "transfer", "t", 5.0, 6.0, 10.0, 0.0, "b", "b"),
        Record("c", "wait", "w", 0.0, 9.0),
    ]
    found = spans.device_spans(records)
    assert found.names == ["a", "b"]
    assert found.busy() == {"a": (2.0, 3.0, 4.0), "b": (0.0, 4.0, 4.0)}
