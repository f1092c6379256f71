"""tests/record_slow_tests.py, what ``make slow-tests`` runs: the slow list from the full
suite's durations, then the quick loop's slow tests added with their full-suite seconds."""

from __future__ import annotations

from pathlib import Path

from .record_slow_tests import add, listed, main

FULL = """\
============================= slowest durations =============================
12.00s call     tests/test_a.py::test_makes_the_shared_run
0.40s setup    tests/test_a.py::test_makes_the_shared_run
0.90s call     tests/test_b.py::test_just_under
0.20s call     tests/test_c.py::test_reads_the_shared_run
"""
QUICK = """\
0.95s call     tests/test_b.py::test_just_under
11.50s call     tests/test_c.py::test_reads_the_shared_run
3.00s call     tests/test_d.py::test_only_in_the_quick_report
"""


def test_full_then_quick(tmp_path: Path) -> None:
    """Phases add up (12.4 s); under a second is not slow; the quick loop adds what is slow
    there with its full-suite seconds (0.2 s: it runs after the test making its run), or its
    quick seconds when the full report lacks it; slowest first."""
    full, quick, out = tmp_path / "full.txt", tmp_path / "quick.txt", tmp_path / "slow.txt"
    full.write_text(FULL)
    quick.write_text(QUICK)
    assert main(str(full), str(out)) == 0
    assert listed(out.read_text()) == [(12.4, "tests/test_a.py::test_makes_the_shared_run")]
    assert add(str(quick), str(full), str(out)) == 0
    assert listed(out.read_text()) == [
        (12.4, "tests/test_a.py::test_makes_the_shared_run"),
        (3.0, "tests/test_d.py::test_only_in_the_quick_report"),
        (0.2, "tests/test_c.py::test_reads_the_shared_run"),
    ]
    assert out.read_text().startswith("# Tests measured at 1 s or more")
    assert add(str(quick), str(full), str(out)) == 0  # again: nothing new
    assert len(listed(out.read_text())) == 3


def test_a_remeasured_list_keeps_what_the_quick_loop_added(tmp_path: Path) -> None:
    """A new full-suite report keeps the tests the quick loop added (still named in it, with
    its seconds: they would be slow in the quick loop again) and drops one it no longer
    names (removed or renamed)."""
    full, out = tmp_path / "full.txt", tmp_path / "slow.txt"
    out.write_text(
        "# old list\n"
        "  12.40 tests/test_a.py::test_makes_the_shared_run\n"
        "   3.00 tests/test_d.py::test_only_in_the_quick_report\n"
        "   0.20 tests/test_c.py::test_reads_the_shared_run\n"
    )
    full.write_text(FULL.replace("0.20s call     tests/test_c", "0.30s call     tests/test_c"))
    assert main(str(full), str(out)) == 0
    assert listed(out.read_text()) == [
        (12.4, "tests/test_a.py::test_makes_the_shared_run"),
        (0.3, "tests/test_c.py::test_reads_the_shared_run"),
    ]
