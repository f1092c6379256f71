"""Records carry their phase; timeline.csv writes it and reads it back (old files too)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import clustersim
from clustersim.outputs.timeline import read_timeline, timeline_csv
from clustersim.records import PHASES, TIMELINE_COLUMNS, Record, phase_of

ROOT = Path(__file__).resolve().parent.parent


def test_a_data_parallel_run_records_every_phase(tmp_path: Path) -> None:
    result = clustersim.simulate(ROOT / "scenarios/data_parallel/overlap.yaml")
    phases = Counter(phase_of(r) for r in result.records)
    assert set(phases) == {"forward", "backward", "optimizer", "communication"}
    for r in result.records:
        assert r.phase in PHASES  # set where the record was made, not guessed from its label
        assert (r.phase == "communication") == (r.kind in ("transfer", "collective"))
    layers = len(
        clustersim.prepare(ROOT / "scenarios/data_parallel/overlap.yaml").strategy.model.layers
    )
    assert phases["forward"] == phases["backward"] > 0 and phases["forward"] % layers == 0
    path = tmp_path / "timeline.csv"
    path.write_text(timeline_csv(result.records))
    assert path.read_text().splitlines()[0].split(",") == list(TIMELINE_COLUMNS)
    back = read_timeline(path)
    assert Counter(r.phase for r in back) == phases


def test_an_older_timeline_without_phases_still_reads(tmp_path: Path) -> None:
    """Runs written before the phase column: the phase comes from the kind and the label."""
    path = tmp_path / "timeline.csv"
    header = ",".join(c for c in TIMELINE_COLUMNS if c != "phase")
    rows = [
        "gpu0,compute,fwd l1,0,1,0,10,,,0,,,",
        "gpu0,compute,bwd l1,1,3,0,20,,,0,,,",
        "gpu0,compute,recompute l1,3,4,0,10,,,0,,,",
        "gpu0,transfer,send,4,5,100,0,gpu0,gpu1,0,,,",
        "gpu0,compute,optimizer,5,6,8,0,,,0,,,",
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    back = read_timeline(path)
    assert [r.phase for r in back] == [""] * 5
    assert [phase_of(r) for r in back] == [
        "forward",
        "backward",
        "recompute",
        "communication",
        "",
    ]
    assert phase_of(Record("gpu0", "compute", "fwd x", 0.0, 1.0, phase="optimizer")) == "optimizer"


def test_every_training_strategy_books_its_phases() -> None:
    """Compute of the hybrid, ZeRO and parameter-server strategies carries a phase too
    (a parameter server's aggregation is the only compute that is none of them)."""
    for name in ("pipeline/1f1b_m8", "zero/gpt3_1.3b_stage2", "parameter_server/async"):
        records = clustersim.simulate(ROOT / f"scenarios/{name}.yaml").records
        phases = Counter(r.phase for r in records if r.kind == "compute")
        assert phases["forward"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0, name
        unset = {r.label.split()[0] for r in records if r.kind == "compute" and not r.phase}
        assert unset <= {"aggregate"}, (name, unset)


def test_numpy_floats_write_as_plain_floats() -> None:
    """A record timed with numpy.float64 (a float subclass) writes the same cells as with
    floats: integral values without a fraction, others in shortest repr."""
    import numpy as np

    plain = Record("gpu0", "compute", "fwd", 0.0, 1.5, 0.0, 2e9)
    numpy = Record("gpu0", "compute", "fwd", np.float64(0.0), np.float64(1.5), 0.0, np.float64(2e9))
    assert numpy.csv_row() == plain.csv_row()
    assert plain.csv_row()[3:7] == ["0", "1.5", "0", "2000000000"]
