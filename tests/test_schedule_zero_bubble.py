"""Zero-bubble pipeline schedules: ZB-H1 and ZB-V (backward split into B and W).

Sources: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 3.1
(ZB-H1: bubble (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F + T_B + T_W), the peak
memory of 1F1B); Qi et al., "Pipeline Parallelism with Controllable Memory", 2024 (ZB-V:
two chunks per device in a V, 1F1B's peak memory, no bubble when T_F = T_B = T_W and
there are enough micro-batches).  The reference simulation setup is tests/test_pipeline.py's
(one 1 GFLOP layer per virtual stage, 100 TFLOP/s, 100 samples per micro-batch).
"""

from __future__ import annotations

import pytest

from clustersim.errors import ScenarioError
from clustersim.outputs.gantt import COLOURS, box_kind
from clustersim.parallel.schedules import (
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    FORWARD,
    Op,
    ideal_timeline,
    make_schedule,
)
from clustersim.records import Record
from clustersim.strategies.hybrid import split_backward
from clustersim.strategies.hybrid.stages import peak_stored

from .test_pipeline import doc, run

SWEEP = [(p, m) for p in (2, 3, 4, 8) for m in sorted({p, p + 1, 2 * p, 3 * p + 1, 32})]
TIMES = [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (2.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.5, 1.0, 0.75)]
"""(T_F, T_B, T_W) with T_W <= T_F, T_B, where the paper's ZB-H1 bubble formula holds."""


def spans(schedule: object, times: dict) -> list[tuple[float, float]]:
    """(first start, last end) of each device in an ideal timeline."""
    out = []
    for s in range(schedule.stages):  # type: ignore[attr-defined]
        mine = [t for (d, _), t in times.items() if d == s]
        out.append((min(a for a, _ in mine), max(b for _, b in mine)))
    return out


@pytest.mark.parametrize("name", ["zb-h1", "zb-v"])
@pytest.mark.parametrize("p, m", SWEEP)
def test_every_op_once_f_before_b_before_w(name: str, p: int, m: int) -> None:
    schedule = make_schedule(name, p, m)
    v = schedule.chunks
    for s in range(p):
        ops = schedule.operations(s)
        kinds = (FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)
        expected = {Op(k, j, c) for k in kinds for j in range(m) for c in range(v)}
        assert len(ops) == len(expected) and set(ops) == expected
        for j in range(m):
            for c in range(v):
                f, b, w = (ops.index(Op(k, j, c)) for k in kinds)
                assert f < b < w


@pytest.mark.parametrize("p, m", SWEEP)
@pytest.mark.parametrize("t_f, t_b, t_w", TIMES)
def test_zb_h1_bubble_is_the_papers(p: int, m: int, t_f: float, t_b: float, t_w: float) -> None:
    """Qi et al. 2024 Sec. 3.1: ZB-H1's iteration is m (T_F + T_B + T_W) plus a bubble of
    (p - 1)(T_F + T_B - T_W); 1F1B's bubble is (p - 1)(T_F + T_B + T_W) (no deadlock
    either, or ideal_timeline would raise)."""
    zb = ideal_timeline(make_schedule("zb-h1", p, m), t_f, t_b, t_w)
    one = ideal_timeline(make_schedule("1f1b", p, m), t_f, t_b, t_w)
    busy = m * (t_f + t_b + t_w)
    zb_bubble = max(end for _, end in zb.values()) - busy
    one_bubble = max(end for _, end in one.values()) - busy
    assert zb_bubble == pytest.approx((p - 1) * (t_f + t_b - t_w), abs=1e-9)
    assert one_bubble == pytest.approx((p - 1) * (t_f + t_b + t_w), abs=1e-9)
    if t_f == t_b == t_w:
        assert zb_bubble == pytest.approx(one_bubble / 3, abs=1e-9)
        assert make_schedule("zb-h1", p, m).theoretical_bubble() == pytest.approx(
            zb_bubble / (zb_bubble + busy), abs=1e-12
        )


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_zb_v_has_no_bubble_with_enough_micro_batches(p: int) -> None:
    """ZB-V at T_F = T_B = T_W (per chunk T/2, T one micro-batch through the device):
    every device works without a gap from its first op to its last once m >= 2p - 1;
    with fewer, device 0 idles (2p - 1 - m) T and the others no more (the theoretical
    bubble takes device 0's);
    the iteration ends (p - 1) T/2 after the first device's busy time (the forward
    reaching the last device)."""
    t = 1.0
    for m in range(p, 4 * p + 1):
        schedule = make_schedule("zb-v", p, m)
        times = ideal_timeline(schedule, t / 2, t / 2, t / 2)
        gap = max(0, 2 * p - 1 - m) * t
        idle = [last - first - 3 * m * t for first, last in spans(schedule, times)]
        assert idle[0] == pytest.approx(gap, abs=1e-9)
        assert max(idle) == pytest.approx(gap, abs=1e-9) and min(idle) >= -1e-9
        if m >= 2 * p - 1:
            makespan = max(end for _, end in times.values())
            assert makespan == pytest.approx(3 * m * t + (p - 1) * t / 2, abs=1e-9)
        assert schedule.theoretical_bubble() == pytest.approx(gap / (gap + 3 * m * t))


@pytest.mark.parametrize("p, m", SWEEP)
def test_peak_memory_is_1f1b_peak(p: int, m: int) -> None:
    """Both papers: the peak activation memory of ZB-H1 and ZB-V is 1F1B's (p micro-batches
    of a whole device on its first stage), counting a micro-batch as held until its W."""
    one = max(peak_stored(make_schedule("1f1b", p, m).operations(s))[0] for s in range(p))
    assert one == min(p, m)
    held_for_w = split_backward.HELD_FOR_W
    try:
        split_backward.HELD_FOR_W = 1.0
        for name, chunk_bytes in (("zb-h1", 1.0), ("zb-v", 0.5)):
            schedule = make_schedule(name, p, m)
            peaks = [
                split_backward.peak_activation_bytes(
                    schedule.operations(s), lambda c, b=chunk_bytes: b
                )
                for s in range(p)
            ]
            assert max(peaks) == pytest.approx(one)
    finally:
        split_backward.HELD_FOR_W = held_for_w


def test_b_frees_part_and_w_the_rest() -> None:
    """With B keeping HELD_FOR_W of a micro-batch, ZB-H1's peak falls below 1F1B's count."""
    schedule = make_schedule("zb-h1", 4, 8)
    peak = split_backward.peak_activation_bytes(schedule.operations(3), lambda c: 1.0)
    # last stage: F0 B0 F1 B1 ... with W three behind: 1 + 3 x HELD_FOR_W at most
    assert peak == pytest.approx(1 + 3 * split_backward.HELD_FOR_W)


def zb_doc(name: str, p: int, m: int, iterations: int = 3) -> dict:
    """The reference setup with parameters, so W has FLOPs: T_F = T_B = T_W = 1 ms per layer."""
    chunks = 2 if name == "zb-v" else 1
    document = doc(p, m, name, chunks=chunks, iterations=iterations, params=1)
    return document


@pytest.mark.parametrize("name", ["zb-h1", "zb-v"])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 13)])
def test_simulation_matches_ideal_timeline(name: str, p: int, m: int) -> None:
    """Free communication: the first iteration is the ideal timeline's makespan (B and W
    each half of the 2 ms backward); ZB-V's later iterations are m (T_F + T_B + T_W) (no
    flush barrier between stages, so the start-up skew is paid once)."""
    schedule = make_schedule(name, p, m)
    layer = 1e-3  # one layer, one chunk
    ideal = ideal_timeline(schedule, layer, layer, layer)
    makespan = max(end for _, end in ideal.values())
    summary = run(zb_doc(name, p, m)).summary
    times = summary["iteration_times_s"]
    assert times[0] == pytest.approx(makespan, rel=1e-6)
    per_device = 3 * schedule.chunks * layer  # F + B + W of one micro-batch on a device
    if name == "zb-v" and m >= 2 * p - 1:
        assert times[-1] == pytest.approx(m * per_device, rel=1e-6)
    if name == "zb-h1":
        assert times[-1] == pytest.approx(m * per_device + (p - 1) * layer, rel=1e-6)
    assert summary["theoretical_bubble_fraction"] == schedule.theoretical_bubble()
    assert summary["activation_memory"]["0"]["peak_microbatches"] <= schedule.chunks * min(p, m)


def test_records_are_b_and_w_with_their_flops() -> None:
    """B and W records, 1 ms each (half of a 2 ms backward), drawn in two colours."""
    result = run(zb_doc("zb-h1", 2, 4, iterations=1))
    computes = [r for r in result.records if r.kind == "compute" and r.label != "optimizer"]
    labels = {r.label for r in computes}
    assert labels == {"fwd", "bwd_input", "bwd_weight"}
    for r in computes:
        assert r.end_s - r.start_s == pytest.approx(1e-3, rel=1e-6)
    kinds = {box_kind(r) for r in computes}
    assert kinds == {"forward", "backward_input", "backward_weight"}
    colours = {COLOURS[k] for k in kinds}
    assert len(colours) == 3


def test_box_kind_of_an_unsplit_backward_is_unchanged() -> None:
    record = Record(kind="compute", resource="gpu0", start_s=0, end_s=1, label="bwd")
    assert box_kind(record) == "backward"


def test_zb_v_places_chunks_in_a_v() -> None:
    schedule = make_schedule("zb-v", 4, 8)
    assert [schedule.virtual_stage(s, 1) for s in range(4)] == [7, 6, 5, 4]
    assert [schedule.device_of(k) for k in range(8)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1)
    ]  # fmt: skip


def test_zb_v_needs_two_chunks() -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(4, 8, "zb-v", chunks=3))
    problem = info.value.problems[0]
    assert problem.path == "pipeline.chunks" and "2" in problem.allowed


def test_zb_v_sends_between_the_devices_of_the_v() -> None:
    """Transfers of ZB-V go to the device holding the next virtual stage: activations
    down the devices on chunk 0, none between stage 3's two chunks (same device), back up
    on chunk 1; tagged with the sending device stage."""
    document = doc(4, 8, "zb-v", chunks=2, activations="1MB", iterations=1, params=1)
    records = run(document).records
    pairs = {(r.src, r.dst) for r in records if r.kind == "transfer" and r.label == "activation"}
    names = sorted({r.resource for r in records if r.kind == "compute"})
    down = {(names[s], names[s + 1]) for s in range(3)}
    up = {(names[s + 1], names[s]) for s in range(3)}
    assert pairs == down | up
