"""``clustersim calibrate nccl-tests``: the command end to end (node file, plot, table, the
same bytes twice) and its refusals (exit 2, one message naming the file, line and what is
allowed, never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.calibrate import format_log, predict
from clustersim.calibrate.figures import FIGURES, working_spec
from clustersim.calibrate.holdout import Point
from clustersim.calibrate.logs import NcclInfo, Row, Run
from clustersim.cli import main
from clustersim.hardware import find

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
SIZES = [4**k for k in range(6, 17)]


@pytest.fixture(scope="module")
def one_node_log(tmp_path_factory) -> Path:
    """A one-node all_reduce_perf log of clustersim's flow times at NVLink 250 GB/s."""
    spec = working_spec(find("dgx-a100", "node").spec)
    spec = next(f for f in FIGURES if f.key == "nvlink.bandwidth").put(spec, 250.0)
    rows = [Row(size, 1.0, 0.0, i) for i, size in enumerate(SIZES)]
    run = Run("generated", 1, "all_reduce", {"box": 8}, (), rows, NcclInfo())
    times = predict(spec, [Point(run, row, False) for row in rows], "flow")
    text = format_log("all_reduce", 1, 8, [(s, p.time_s) for s, p in zip(SIZES, times)], 1.75)
    path = tmp_path_factory.mktemp("logs") / "box_all_reduce.log"
    path.write_text(text)
    return path


def test_help_lists_calibrate_and_its_sources(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "calibrate" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "nccl-tests" in capsys.readouterr().out


def test_end_to_end_writes_the_node_file_and_the_plot_the_same_twice(
    one_node_log, tmp_path, capsys
) -> None:
    """Exit 0; the table, the errors and the figures on stdout; my_node.yaml and
    my_node.png written (no temporary file left); a second run writes the same bytes."""
    out = tmp_path / "my_node.yaml"
    argv = ["calibrate", "nccl-tests", str(one_node_log), "-o", str(out), "-q"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "held-out points:" in text and "NVLink bandwidth per GPU and direction" in text
    assert f"wrote {out}" in text
    assert "not fitted" not in text
    assert "kept: clustersim prices a ring's latency" in text  # said once, not "kept: kept:"
    assert "kept: kept" not in text
    first = (out.read_bytes(), out.with_suffix(".png").read_bytes())
    assert b"from dgx-a100: clustersim prices a ring's latency" in first[0]
    assert b"source: nccl-tests-fit" in first[0]
    assert first[1].startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_node.png", "my_node.yaml"]
    assert main(argv) == 0
    assert (out.read_bytes(), out.with_suffix(".png").read_bytes()) == first


def test_an_output_in_a_folder_not_made_yet_is_written_there(one_node_log, tmp_path) -> None:
    """``-o new/deeper/my_node.yaml``: the folders are made (the output check found them
    makeable before any work), the node file and its plot written into them."""
    out = tmp_path / "new" / "deeper" / "my_node.yaml"
    plot = tmp_path / "plots" / "fit.png"
    argv = ["calibrate", "nccl-tests", str(one_node_log), "-o", str(out), "--plot", str(plot)]
    assert main([*argv, "-q"]) == 0
    assert b"source: nccl-tests-fit" in out.read_bytes()
    assert plot.read_bytes().startswith(b"\x89PNG")


def refused(capsys, *argv: str) -> str:
    assert main(["calibrate", "nccl-tests", *argv]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


def test_refusals_exit_2_with_file_line_and_what_is_allowed(one_node_log, tmp_path, capsys) -> None:
    out = str(tmp_path / "n.yaml")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a log\n")
    assert "not nccl-tests output" in refused(capsys, str(notes), "-o", out)
    one_size = FIXTURES / "oci_a100_roce_1n_10g_all_reduce.log"
    err = refused(capsys, str(one_size), "-o", out)
    assert f"{one_size}: line 3: only one size" in err and "allowed:" in err
    four = tmp_path / "four_all_reduce.log"
    four.write_text(format_log("all_reduce", 1, 4, [(1024, 2e-5), (2**20, 6e-5)], 1.5))
    err = refused(capsys, str(four), "-o", out)
    assert "the run has 4 GPUs per node; the node file dgx-a100 has 8" in err
    sendrecv = tmp_path / "sr.log"
    sendrecv.write_text(format_log("sendrecv", 1, 8, [(1024, 2e-5), (2**20, 6e-5)], 1.0))
    assert "sendrecv_perf: clustersim has no such operation" in refused(
        capsys, str(sendrecv), "-o", out
    )
    assert "--hold-out: cannot read 'most'" in refused(
        capsys, str(one_node_log), "-o", out, "--hold-out", "most"
    )
    assert "--base: unknown node preset 'dgx-a1000'; did you mean 'dgx-a100'?" in refused(
        capsys, str(one_node_log), "-o", out, "--base", "dgx-a1000"
    )
    assert not (tmp_path / "n.yaml").exists()


def test_sendrecv_beside_other_logs_is_read_and_left_out(one_node_log, tmp_path, capsys) -> None:
    sendrecv = tmp_path / "sr.log"
    sendrecv.write_text(format_log("sendrecv", 1, 8, [(1024, 2e-5), (2**20, 6e-5)], 1.0))
    out = tmp_path / "n.yaml"
    argv = ["calibrate", "nccl-tests", str(one_node_log), str(sendrecv), "-o", str(out), "-q"]
    assert main([*argv, "--model", "analytical"]) == 0
    text = capsys.readouterr().out
    assert (
        f"# not fitted: {sendrecv} line 1, sendrecv_perf: clustersim has no such operation" in text
    )
    assert str(sendrecv) not in out.read_text()
