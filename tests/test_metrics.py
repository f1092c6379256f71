"""Metrics derived from records: interval unions, per-device breakdown, canonical JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.metrics import (
    breakdown,
    canonical_json,
    canonical_value,
    device_breakdown,
    union_length,
)
from clustersim.metrics.spans import DeviceSpans
from clustersim.outputs.timeline import timeline_csv
from clustersim.records import Record


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0.0),
        ([(0, 1)], 1.0),
        ([(0, 1), (1, 2)], 2.0),
        ([(0, 2), (1, 3)], 3.0),
        ([(0, 5), (1, 2), (3, 4)], 5.0),
        ([(4, 6), (0, 1)], 3.0),
    ],
)
def test_union_length(intervals, expected) -> None:
    """Overlapping intervals count once."""
    assert union_length(intervals) == pytest.approx(expected)


def _union_by_sweep(intervals: list[tuple[float, float]]) -> float:
    """The sequential sweep over the intervals in sorted order, one period at a time."""
    total, start, end = 0.0, None, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        elif b > end:
            end = b
    return total if end is None else total + (end - start)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 20).map(lambda i: i / 10), st.floats(0, 10)),
            st.one_of(st.just(0.0), st.integers(0, 10).map(lambda i: i / 10), st.floats(0, 3)),
        ).map(lambda p: (p[0], p[0] + p[1])),
        max_size=50,
    )
)
def test_vectorised_union_is_the_sweep_to_the_last_bit(intervals) -> None:
    """The numpy union (issue 42: the breakdown of a million records) gives the sequential
    sweep's sum exactly, ties, touching and empty intervals included, so no summary moves."""
    swept = _union_by_sweep(intervals)
    assert union_length(intervals) == swept
    starts, ends = [a for a, _ in intervals], [b for _, b in intervals]
    assert breakdown._union(starts, ends) == swept  # the sweep below SMALL intervals
    assert breakdown._union(starts * 3, ends * 3) == _union_by_sweep(intervals * 3)


_INTERVALS = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 20).map(lambda i: i / 10), st.floats(0, 10)),
        st.one_of(st.just(0.0), st.integers(0, 10).map(lambda i: i / 10), st.floats(0, 3)),
    ).map(lambda p: (p[0], p[0] + p[1])),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    _INTERVALS,
    _INTERVALS,
    st.lists(st.integers(0, 13).map(lambda i: i / 1.3), min_size=1, max_size=4),
    st.integers(1, 3),
)
def test_busy_in_windows_is_the_clipped_sweep(computes, comms, cuts, copies) -> None:
    """Per window, compute and busy seconds are the sweep of the intervals clipped to it
    (the per-iteration bubble of every training family), on both sides of SMALL."""
    computes, comms = computes * copies, comms * copies  # copies: over SMALL intervals
    bounds = sorted({0.0, *cuts, 14.0})
    windows = list(zip(bounds, bounds[1:]))
    one_device = DeviceSpans.of(
        ["device"],
        [0] * (len(computes) + len(comms)),
        [a for a, _ in computes + comms],
        [b for _, b in computes + comms],
        [True] * len(computes) + [False] * len(comms),
    )

    def clipped(spans, lo, hi):
        return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]

    expected = [
        (
            _union_by_sweep(clipped(computes, lo, hi)),
            _union_by_sweep(clipped(computes, lo, hi) + clipped(comms, lo, hi)),
        )
        for lo, hi in windows
    ]
    found = [(compute[0], busy[0]) for compute, busy in one_device.busy_in_windows(windows)]
    assert found == expected


def test_breakdown_counts_transfers_on_both_ends() -> None:
    """A transfer is communication time for its source and its destination."""
    records = [
        Record("a", "compute", "c", 0.0, 2.0),
        Record("a", "transfer", "t", 1.0, 4.0, 10.0, 0.0, "a", "b"),
    ]
    out = device_breakdown(records, 5.0, ["a", "b", "c"])
    assert out["a"] == pytest.approx(
        {"compute_s": 2.0, "communication_s": 3.0, "exposed_communication_s": 2.0, "idle_s": 1.0}
    )
    assert out["b"] == pytest.approx(
        {"compute_s": 0.0, "communication_s": 3.0, "exposed_communication_s": 3.0, "idle_s": 2.0}
    )
    assert "c" not in out


def test_canonical_json_rounds_and_keeps_order() -> None:
    """Floats are rounded to 12 significant digits; key order is kept."""
    text = canonical_json({"b": 0.1 + 0.2, "a": [1.0 / 3.0]})
    assert list(json.loads(text)) == ["b", "a"]
    assert json.loads(text)["b"] == 0.3
    assert text.endswith("\n")


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 0.1 + 0.2, 1e300, -5e-324])
    | st.text(max_size=6)
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(
            st.text(max_size=4) | st.integers(-3, 3) | st.booleans(), inner, max_size=4
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _JSON_VALUES, max_size=5))
def test_canonical_json_is_json_dumps_of_the_rounded_summary(summary: dict) -> None:
    """The one-pass writer gives json.dumps's text (indent 2, not ASCII-escaped) of the
    rounded value, byte for byte: zeros of both signs, repeated floats (each formatted
    once), non-finite floats, tuples, non-string keys and empty containers included."""
    expected = json.dumps(canonical_value(summary), indent=2, ensure_ascii=False) + "\n"
    assert canonical_json(summary) == expected
    doubled = {"a": summary, "b": summary}  # every float seen a second time
    assert canonical_json(doubled) == (
        json.dumps(canonical_value(doubled), indent=2, ensure_ascii=False) + "\n"
    )


def test_timeline_csv_is_sorted_and_blank_for_missing_tags() -> None:
    """Rows come in start order; tags that do not apply are empty cells."""
    text = timeline_csv(
        [Record("x", "compute", "late", 2.0, 3.0), Record("y", "compute", "early", 0.0, 1.5)]
    )
    lines = text.splitlines()
    assert lines[1].startswith("y,compute,early,0,1.5,0,0,,,,,,")
    assert lines[2].split(",")[2] == "late"
