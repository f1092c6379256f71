"""Gantt rows folded: simulated workers only, identical rows drawn once and marked ``x N``."""

from __future__ import annotations

from clustersim.outputs.fold import fold_rows, simulated_workers
from clustersim.outputs.gantt import gantt_data, gantt_figure
from clustersim.records import Record

from .test_report import pipeline_records


def test_identical_replicas_fold_into_one_row_marked_x_n() -> None:
    """Two replicas with the same boxes: one row per stage, standing for 2 devices."""
    records, summary = pipeline_records(stages=3, dp=2, skew=0.0)
    fig = gantt_figure(records, summary)
    data = fig.gantt_data
    assert data.rows == ["d0s0", "d0s1", "d0s2"]
    assert data.counts == [2, 2, 2]
    assert "identical rows drawn once" in data.title
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert all(tick.endswith(f"{device} x 2") for device, tick in zip(data.rows, ticks))
    assert len(data.boxes) == len(records) / 2


def test_rows_that_differ_are_not_folded() -> None:
    records, summary = pipeline_records(stages=2, dp=2, skew=1e-6)
    data = gantt_data(records, summary)
    assert data.rows == ["d0s0", "d1s0", "d0s1", "d1s1"] and data.counts == []


def test_one_replica_mode_draws_only_the_simulated_workers() -> None:
    """Devices of replicas not simulated (only an analytical all-reduce record) are no rows;
    each simulated row stands for its identical twins times the replicas."""
    records, summary = pipeline_records(stages=2, dp=2, skew=0.0)
    phantom = [Record(f"other{i}", "collective", "allreduce", 0.0, 1e-3) for i in range(6)]
    workers = sorted({r.resource for r in records})
    summary |= {"workers": workers, "workers_simulated": 4, "workers_total": 16}
    data = gantt_data(records + phantom, summary)
    assert data.rows == ["d0s0", "d0s1"]
    assert data.counts == [8, 8]  # 2 identical rows x 4 replicas each
    assert "1 simulated replica of 4" in data.title


def test_simulated_workers_is_empty_when_every_replica_runs() -> None:
    assert simulated_workers({"workers": ["a"], "workers_simulated": 1, "workers_total": 1}) == (
        set(),
        1,
    )


def test_fold_compares_times_to_the_nanosecond() -> None:
    a = Record("a", "compute", "fwd", 0.0, 1.0)
    b = Record("b", "compute", "fwd", 0.0, 1.0 + 1e-12)
    c = Record("c", "compute", "fwd", 0.0, 1.0 + 1e-6)
    assert fold_rows(["a", "b", "c"], [a, b, c]) == (["a", "c"], [2, 1])


def test_gpt3_175b_one_replica_gantt_has_no_phantom_rows() -> None:
    """GPT-3 175B on 1,024 GPUs, one replica simulated: the 8 stages, each row standing for
    its 8 tensor-parallel ranks x 16 replicas, and no row of a replica not simulated (those
    were 98.7% idle)."""
    from clustersim import simulate

    from .conftest import SCENARIOS

    result = simulate(SCENARIOS / "megatron" / "gpt3_175b_1024.yaml")
    data = gantt_data(result.records, result.summary)
    assert data.groups == [f"stage {s}" for s in range(8)]
    assert data.counts == [128] * 8 and sum(data.counts) == result.summary["workers_total"]
    assert set(data.rows) <= set(result.summary["workers"])
    assert all(b is not None and b < 0.2 for b in data.bubble)
