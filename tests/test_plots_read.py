"""Plots that read: titles inside the canvas, every PNG with an SVG beside it (the same
bytes on every run), and plan.png's relative throughput on a zoomed axis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from clustersim.api import simulate
from clustersim.cli import main
from clustersim.outputs.figures import svg_beside, wrap_to_width
from clustersim.outputs.gantt import gantt_figure
from clustersim.outputs.plots import links_figure, memory_figure
from clustersim.studies import collective_sweep, plan, sweep

from .conftest import SCENARIOS

LONG_TITLE = (
    "a-very-long-scenario-name-that-a-user-might-write for the oversubscribed uplink "
    "study, two racks, 4:1 spine, run 2026-11-24"
)
assert len(LONG_TITLE) >= 120


def outcome(index: int, throughput: float, fits: bool | None) -> plan.Outcome:
    """A plan outcome that ran, with ``throughput`` samples/s."""
    point = plan.Point(dp=2, tp=index + 1, pp=1, micro_batch=1, micro_batches=4, zero=0)
    return plan.Outcome(
        candidate=plan.Candidate(index=index, point=point, doc={}),
        iteration_time_s=64 / throughput,
        throughput_samples_per_s=throughput,
        fits=fits,
    )


def ranked_outcomes() -> list[plan.Outcome]:
    """Close candidates (within 4% of each other), one of which does not fit."""
    return plan.rank([outcome(0, 1000.0, True), outcome(1, 1040.0, False), outcome(2, 990.0, None)])


def collective_rows() -> list[dict]:
    return [
        {"algorithm": a, "bytes": size, "busbw_GBps": gbps * scale}
        for a, scale in (("ring", 1.0), ("tree", 0.5))
        for size, gbps in ((1e6, 10.0), (4e6, 20.0), (16e6, 25.0))
    ]


def compare_rows(models: tuple[str, ...]) -> list[dict]:
    return [
        {"scenario": f"{m}-{s}", "model": m, "r": r, "t": r * (2 if s == "ps" else 1)}
        for m in models
        for s in ("ring", "ps")
        for r in (1, 2, 4)
    ]


def pipeline_figures(title: str) -> list[Figure]:
    """The Gantt chart and the memory plot of a shipped 1F1B run."""
    result = simulate(SCENARIOS / "pipeline" / "1f1b_m8.yaml")
    memory = memory_figure(result.summary)
    assert memory is not None
    return [gantt_figure(result.records, result.summary, title=title), memory]


def links_rows() -> list[dict]:
    return [
        {"link": f"node{i}->spine-with-a-long-name", "utilisation": i / 10, "busy_fraction": 0.5}
        | {"bytes": 1e6 * i}
        for i in range(1, 8)
    ]


FIGURES: dict[str, Callable[[str], list[Figure]]] = {
    "gantt and memory": pipeline_figures,
    "links": lambda title: [links_figure(links_rows())],
    "compare, one panel": lambda title: [
        sweep.plot_figure(compare_rows(("bert",)), ["r"], "t", title)
    ],
    "compare, two panels": lambda title: [
        sweep.plot_figure(compare_rows(("bert", "resnet")), ["r"], "t", title)
    ],
    "plan": lambda title: [plan.plot_figure(ranked_outcomes(), title)],
    "collective --plot": lambda title: [collective_sweep.plot_figure(collective_rows(), title)],
}
"""Every figure clustersim draws, each given a title."""


def texts_outside(fig: Figure) -> list[str]:
    """Titles and axis labels whose drawn extent leaves the figure (after layout)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
    outside = []
    for text in texts:
        if not text.get_text() or not text.get_visible():
            continue
        extent = text.get_window_extent(renderer)
        if not (
            extent.x0 >= box.x0 - 0.5
            and extent.x1 <= box.x1 + 0.5
            and extent.y0 >= box.y0 - 0.5
            and extent.y1 <= box.y1 + 0.5
        ):
            outside.append(text.get_text())
    return outside


@pytest.mark.parametrize("title", ["short title", LONG_TITLE])
@pytest.mark.parametrize("name", list(FIGURES))
def test_titles_and_axis_labels_lie_inside_the_figure(name: str, title: str) -> None:
    """After layout, each title and axis label is drawn wholly inside the canvas, even with a
    120-character title (it is wrapped onto several lines instead)."""
    for fig in FIGURES[name](title):
        assert texts_outside(fig) == []


def test_a_long_title_is_wrapped_not_cut() -> None:
    """A title wider than the figure becomes several lines holding the same words."""
    fig = collective_sweep.plot_figure(collective_rows(), LONG_TITLE)
    shown = fig.axes[0].get_title()
    assert "\n" in shown
    assert shown.split() == LONG_TITLE.split()


def test_wrap_to_width_breaks_long_words_too() -> None:
    """A line without spaces is cut inside the word; a line that fits is left alone."""
    word = "x" * 400
    wrapped = wrap_to_width(word, 300.0, 12.0)
    assert wrapped.replace("\n", "") == word and wrapped.count("\n") >= 2
    assert wrap_to_width("short", 300.0, 12.0) == "short"


def test_svg_beside_names_the_pair() -> None:
    """X.png -> X.png and X.svg; X.svg -> X.png and X.svg."""
    assert svg_beside("a/b.png") == (Path("a/b.png"), Path("a/b.svg"))
    assert svg_beside("a/b.svg") == (Path("a/b.png"), Path("a/b.svg"))


# --------------------------------------------------------------------------- PNG and SVG


def test_plan_folder_holds_png_and_svg_the_same_bytes_every_run(tmp_path: Path) -> None:
    """plan -o writes plan.png and plan.svg; two writes give the same bytes."""
    ranked = ranked_outcomes()
    for name in ("one", "two"):
        plan.write_outputs(ranked, tmp_path / name, LONG_TITLE, [])
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(
        ("plan.csv", "plan.md", "plan.png", "plan.svg")
    )
    for name in ("plan.png", "plan.svg"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert (tmp_path / "one" / "plan.svg").read_text().lstrip().startswith("<?xml")


def test_compare_folder_holds_png_and_svg_the_same_bytes_every_run(tmp_path: Path) -> None:
    """compare -o writes compare.png and compare.svg; two runs give the same bytes."""
    n1 = SCENARIOS / "validation" / "n1_oversubscribed_uplink.yaml"
    key = "cluster.rack_uplink.oversubscription"
    for name in ("one", "two"):
        argv = ["compare", str(n1), "--set", f"{key}=1,2", "-j", "1", "-q"]
        assert main([*argv, "-o", str(tmp_path / name)]) == 0
    for name in ("compare.png", "compare.svg"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_collective_plot_writes_svg_beside_png_the_same_bytes_every_run(
    tmp_path: Path, capsys
) -> None:
    """collective --plot X.png writes X.png and X.svg; two runs give the same bytes."""
    args = ["--op", "allreduce", "--bytes", "1MB:4MB:x4", "--devices", "4", "--topology", "ring"]
    for name in ("one", "two"):
        assert main(["collective", *args, "--plot", str(tmp_path / name / "bw.png")]) == 0
    for name in ("bw.png", "bw.svg"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    captured = capsys.readouterr()
    assert "bw.svg" in captured.out + captured.err


def test_svg_keeps_its_labels_as_text(tmp_path: Path) -> None:
    """Every SVG clustersim writes keeps its text as text (svg.fonttype none), not as glyph
    paths: the plan chart's candidate labels and title can be found in the file; the
    reproducible and the plain save alike."""
    from clustersim.outputs.atomic import save_figure

    plan.write_outputs(ranked_outcomes(), tmp_path / "plan", LONG_TITLE, [])
    text = (tmp_path / "plan" / "plan.svg").read_text()
    assert text.count("<text") >= 5
    assert "a-very-long-scenario-name" in text
    assert '<use xlink:href="#DejaVuSans' not in text  # no glyph drawn as a path
    fig = Figure(figsize=(2, 1))
    fig.text(0.1, 0.5, "plain save")
    for reproducible in (True, False):
        out = save_figure(fig, tmp_path / f"fig{reproducible}.svg", reproducible=reproducible)
        assert ">plain save</text>" in out.read_text()


# --------------------------------------------------------------------------- plan.png


def bars(fig: Figure) -> list:
    return list(fig.axes[0].patches)


def test_plan_bars_are_throughput_relative_to_the_best() -> None:
    """Each bar is throughput / best throughput (in %), best first; the best is 100%."""
    ranked = ranked_outcomes()
    best = max(o.throughput_samples_per_s for o in ranked)
    shares = plan.relative_throughput(ranked)
    assert [o for o, _ in shares] == ranked
    for o, share in shares:
        assert abs(share - o.throughput_samples_per_s / best) <= 1e-12
    widths = [p.get_width() for p in bars(plan.plot_figure(ranked))]
    assert widths[0] == 100.0
    for width, (o, _) in zip(widths, shares, strict=True):
        assert abs(width / 100 - o.throughput_samples_per_s / best) <= 1e-12


def test_plan_axis_is_zoomed_for_close_candidates_and_says_so() -> None:
    """Candidates within 5% of each other: the axis starts below the smallest (not at 0),
    and the axis label names the start; widely spread ones keep an axis from 0."""
    ax = plan.plot_figure(ranked_outcomes()).axes[0]
    start = ax.get_xlim()[0]
    smallest = min(p.get_width() for p in ax.patches)
    assert 0 < start < smallest
    assert f"starts at {start:g}%" in ax.get_xlabel()
    spread = plan.rank([outcome(0, 1000.0, True), outcome(1, 100.0, True)])
    ax = plan.plot_figure(spread).axes[0]
    assert ax.get_xlim()[0] == 0 and "starts at" not in ax.get_xlabel()


def test_plan_marks_what_does_not_fit() -> None:
    """The configuration that does not fit is hatched and labelled "does not fit"; the others
    are not; the best that fits is labelled so."""
    ranked = ranked_outcomes()
    fig = plan.plot_figure(ranked)
    labels = [t.get_text() for t in fig.axes[0].texts]
    for o, patch, label in zip(ranked, bars(fig), labels, strict=True):
        assert (o.fits is False) == ("does not fit" in label) == bool(patch.get_hatch())
    best_fit = plan.best_fitting(ranked)
    assert "best that fits" in labels[ranked.index(best_fit)]


def test_the_check_sees_a_cut_title() -> None:
    """The check above is not vacuous: a long title set without wrapping runs off the canvas."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    fig.add_subplot().set_title(LONG_TITLE)
    assert texts_outside(fig) == [LONG_TITLE]
