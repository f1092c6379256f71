"""Sparse embeddings on parameter servers: the expected unique rows a batch touches, the
bytes a worker pushes, the hot server of range sharding, and the refusals.

Expected values come from outside the code under test: a Monte Carlo of i.i.d. lookups
(numpy, fixed seed), the closed form of uniform access ``rows (1 - (1 - 1/rows)^L)``,
the limits ``U(1) = 1`` and ``U(L) -> rows``, and a plain Python sum of
``1 - (1 - p_i)^L`` over the rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from clustersim import simulate
from clustersim.cli import main
from clustersim.model.embedding import (
    harmonic,
    shard_sizes,
    unique_rows,
    unique_rows_by_shard,
)
from clustersim.scenario import parse_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "parameter_server"
BYTES = 4  # fp32
SGD = 12.0  # bytes per parameter of an sgd update


def by_hand(rows: int, s: float, lookups: float) -> float:
    """sum_i 1 - (1 - p_i)^L in plain Python (p_i = i^-s / H)."""
    weights = [i**-s for i in range(1, rows + 1)]
    h = math.fsum(weights)
    return math.fsum(1 - (1 - w / h) ** lookups for w in weights)


# ------------------------------------------------------------------ the formula


@pytest.mark.parametrize(
    ("rows", "s", "lookups"),
    [(50, 0.0, 30), (200, 0.8, 100), (1000, 1.05, 500), (1000, 1.5, 2000), (5000, 1.2, 300)],
)
def test_unique_rows_match_a_monte_carlo(rows: int, s: float, lookups: int) -> None:
    """2000 batches of i.i.d. lookups (seed 17): the formula lies within 4 standard errors
    of the mean count of distinct rows."""
    p = np.arange(1, rows + 1, dtype=float) ** -s
    p /= p.sum()
    rng = np.random.default_rng(17)
    draws = rng.choice(rows, size=(2000, lookups), p=p)
    counts = np.array([len(np.unique(d)) for d in draws])
    error = counts.std(ddof=1) / math.sqrt(len(counts))
    assert abs(unique_rows(rows, s, lookups) - counts.mean()) <= 4 * error + 1e-9


@pytest.mark.parametrize(("rows", "s", "lookups"), [(7, 0.5, 3), (300, 1.05, 40), (2000, 2.0, 9)])
def test_unique_rows_equal_the_plain_sum(rows: int, s: float, lookups: int) -> None:
    assert unique_rows(rows, s, lookups) == pytest.approx(by_hand(rows, s, lookups), rel=1e-12)


@pytest.mark.parametrize("rows", [1, 2, 1000, 10**9])
@pytest.mark.parametrize("lookups", [1, 2.5, 64, 10**6])
def test_uniform_is_the_closed_form(rows: int, lookups: float) -> None:
    """rows (1 - (1 - 1/rows)^L), and s = 0 is uniform; the plain form loses about
    rows x 1e-16 of its digits to cancellation, hence the tolerance."""
    want = rows * (1 - (1 - 1 / rows) ** lookups)
    assert unique_rows(rows, 0.0, lookups) == pytest.approx(want, rel=max(1e-9, 1e-15 * rows))


@pytest.mark.parametrize("s", [0.0, 0.5, 1.05, 3.0])
@pytest.mark.parametrize("rows", [1, 10, 100_000, 50_000_000])
def test_one_lookup_touches_one_row(rows: int, s: float) -> None:
    assert unique_rows(rows, s, 1) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(("rows", "s"), [(10, 1.0), (100, 0.5), (50, 2.0)])
def test_endless_lookups_touch_every_row(rows: int, s: float) -> None:
    """L = 1e9 lookups: every row (each has p >= 1 / (50^2 H) > 1e-4)."""
    assert unique_rows(rows, s, 1e9) == pytest.approx(rows, rel=1e-12)


def test_unique_rows_grow_with_lookups_and_fall_with_skew() -> None:
    """More lookups touch more rows; a more skewed distribution repeats more."""
    assert unique_rows(10**6, 1.0, 1000) < unique_rows(10**6, 1.0, 2000)
    assert unique_rows(10**6, 1.2, 1000) < unique_rows(10**6, 0.8, 1000) < 1000


@pytest.mark.parametrize("sharding", ["spread", "range"])
@pytest.mark.parametrize("shards", [1, 3, 8])
def test_shards_add_up_to_the_table(sharding: str, shards: int) -> None:
    parts = unique_rows_by_shard(100_003, 1.05, 5000, shards, sharding)
    assert math.fsum(parts) == pytest.approx(unique_rows(100_003, 1.05, 5000), rel=1e-12)
    assert sum(shard_sizes(100_003, shards, sharding)) == 100_003


def test_range_shards_are_contiguous_and_spread_shards_interleave() -> None:
    """7 rows on 3 shards: range 2, 2, 3 rows (floor(j 7 / 3)); spread 3, 2, 2 (r mod 3).
    Shard sums by hand: range shard 0 holds ranks 1-2, spread shard 0 ranks 1, 4, 7."""
    assert shard_sizes(7, 3, "range") == [2, 2, 3]
    assert shard_sizes(7, 3, "spread") == [3, 2, 2]
    h = math.fsum(i**-1.0 for i in range(1, 8))

    def hit(i: int) -> float:
        return 1 - (1 - i**-1.0 / h) ** 5

    assert unique_rows_by_shard(7, 1.0, 5, 3, "range")[0] == pytest.approx(hit(1) + hit(2))
    assert unique_rows_by_shard(7, 1.0, 5, 3, "spread")[0] == pytest.approx(
        hit(1) + hit(4) + hit(7)
    )


# ------------------------------------------------------------------ the approximation


@pytest.mark.parametrize("s", [0.5, 1.0, 1.05, 2.0])
@pytest.mark.parametrize("lookups", [1, 1e3, 1e5, 1e7])
def test_the_tail_approximation_matches_the_exact_sum(s: float, lookups: float) -> None:
    """5M rows, approximated after 100k ranks vs summed term by term: range shards within
    1e-9 relative; spread shards within 1 row each (a residue class of a decreasing sum);
    H within 1e-12."""
    kw = {"exact_rows": 1000, "head_rows": 100_000}
    for sharding, tolerance in (("range", None), ("spread", 1.0)):
        exact = unique_rows_by_shard(5_000_000, s, lookups, 3, sharding)
        approx = unique_rows_by_shard(5_000_000, s, lookups, 3, sharding, **kw)
        if tolerance is None:
            assert approx == pytest.approx(exact, rel=1e-9)
        else:
            assert max(abs(a - e) for a, e in zip(approx, exact, strict=True)) <= tolerance
    assert harmonic(5_000_000, s, **kw) == pytest.approx(harmonic(5_000_000, s), rel=1e-12)


def test_a_trillion_row_table_runs() -> None:
    """1e12 rows (the approximation): a million lookups touch fewer rows, but most."""
    rows = unique_rows(10**12, 1.05, 1e6)
    assert 0.3e6 < rows < 1e6


# ------------------------------------------------------------------ a parameter-server run


def emb_doc(
    lookups: int = 4,
    s: float = 1.05,
    sharding: str = "hash",
    mode: str = "sync",
    workers: int = 4,
    servers: int = 4,
    rows: int = 100_000,
    tables: int = 1,
    dense: float = 0,
) -> dict[str, Any]:
    """``workers`` one-GPU nodes, 32 samples each, push to ``servers`` dedicated servers."""
    return {
        "name": "emb",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": workers + servers,
            "node": {
                "gpus": 1,
                "gpu": {"flops": "100TFLOPS", "memory_bandwidth": "1TB/s"},
                "cpu": {"memory_bandwidth": "100GB/s"},
                "pcie": {"bandwidth": "32GB/s"},
                "nic": {"bandwidth": "10GB/s"},
            },
        },
        "model": {
            "layers": [{"name": "mlp", "params": dense, "flops": 1e6}],
            "embedding": {
                "rows": rows,
                "dim": 16,
                "lookups_per_sample": lookups,
                "distribution": {"zipf": s} if s else "uniform",
                "tables": tables,
            },
        },
        "training": {"global_batch": 32 * workers, "iterations": 2},
        "data_parallel": {
            "sync": "ps",
            "ps": {
                "placement": "dedicated",
                "servers": servers,
                "mode": mode,
                "sharding": sharding,
            },
        },
    }


def _run(doc: dict[str, Any]) -> Any:
    return simulate(parse_scenario(doc))


@pytest.mark.parametrize("lookups", [1, 4, 26])
@pytest.mark.parametrize("s", [0.0, 0.8, 1.2])
def test_a_worker_pushes_the_rows_its_batch_touches(lookups: int, s: float) -> None:
    """Per worker and iteration, the embedding pushes carry tables x U(32 x lookups) x 16
    values of 4 bytes (rel 1e-9), the summary says so, and pulls bring back as many."""
    result = _run(emb_doc(lookups=lookups, s=s, tables=2))
    want = 2 * unique_rows(100_000, s, 32 * lookups) * 16 * BYTES
    worker = result.summary["workers"][0]
    for op, end in (("push", "src"), ("pull", "dst")):
        moved = sum(
            r.bytes
            for r in result.records
            if r.kind == "transfer"
            and r.op == op
            and getattr(r, end) == worker
            and r.iteration == 0
        )
        assert moved == pytest.approx(want, rel=1e-9), op
    assert result.summary["embedding_push_bytes_per_worker"] == pytest.approx(want, rel=1e-9)
    rows = result.summary["embedding_rows_touched_per_worker"]
    assert rows == pytest.approx(2 * unique_rows(100_000, s, 32 * lookups), rel=1e-12)


@pytest.mark.parametrize(("mode", "pushes"), [("sync", 4), ("backup", 3), ("async", 1), ("ssp", 1)])
def test_an_update_changes_the_union_of_the_rows_it_applies(mode: str, pushes: int) -> None:
    """Sync: an update of the table changes U(4 x 32 x 4) rows (the 4 workers' union);
    backup with backup_k 3: U(3 x 32 x 4); async and ssp apply each push alone:
    U(32 x 4).  Bytes: rows x 16 values x 12 (sgd), rel 1e-9."""
    doc = emb_doc(mode=mode)
    if mode == "backup":
        doc["data_parallel"]["ps"].update(backup_k=3, backup_cancel=False)
    result = _run(doc)
    update = [r for r in result.records if r.op == "ps_update" and "embedding" in r.label]
    per_update = math.fsum(r.bytes for r in update) / (len(update) / 4)  # 4 shards
    want = unique_rows(100_000, 1.05, pushes * 32 * 4) * 16 * SGD
    assert per_update == pytest.approx(want, rel=1e-9)
    assert result.summary["embedding_rows_updated"] * 16 * SGD == pytest.approx(want, rel=1e-9)


def test_the_embedding_forward_is_a_memory_bound_gather() -> None:
    """fwd embedding: 32 samples x 4 lookups x 16 values x 4 bytes over 1 TB/s."""
    result = _run(emb_doc())
    fwd = next(r for r in result.records if r.label == "fwd embedding")
    assert fwd.bytes == 32 * 4 * 16 * 4
    assert fwd.end_s - fwd.start_s == pytest.approx(fwd.bytes / 1e12, rel=1e-9)


@pytest.mark.parametrize("servers", [2, 4])
@pytest.mark.parametrize("s", [0.8, 1.05, 1.3])
def test_range_sharding_makes_server_0_hot_by_the_formula(s: float, servers: int) -> None:
    """Only the table moves (the dense layer has no parameters): range gives the first
    server U_0(L) / U(L) of the bytes; hash spreads rows mod S, near 1 / S."""
    lookups = 32 * 4
    ranged = _run(emb_doc(s=s, sharding="range", servers=servers)).summary
    share = unique_rows_by_shard(100_000, s, lookups, servers, "range")[0]
    assert ranged["busiest_server"] == "rack0/node4/cpu"  # the first server
    assert ranged["busiest_server_share"] == pytest.approx(
        share / unique_rows(100_000, s, lookups), rel=1e-9
    )
    assert ranged["busiest_server_share"] > 1.5 / servers
    hashed = _run(emb_doc(s=s, sharding="hash", servers=servers)).summary
    assert hashed["busiest_server_share"] == pytest.approx(1 / servers, abs=0.01)
    assert hashed["iteration_time_s"] < ranged["iteration_time_s"]


def test_keys_are_one_shard_per_server_then_the_dense_layers() -> None:
    """3 servers: embedding[0..2] on servers 0..2 (100_000 rows: 33_334, 33_333, 33_333
    x 16), then the dense layer's keys as without the table: its 3e5 parameters are all
    the dense model, above 1e5 a server, so three keys of 1e5."""
    summary = _run(emb_doc(servers=3, dense=3e5)).summary
    keys = summary["keys"]
    names = ["embedding[0]", "embedding[1]", "embedding[2]", "mlp[0]", "mlp[1]", "mlp[2]"]
    assert [k["name"] for k in keys] == names
    assert [k["params"] for k in keys[3:]] == [1e5, 1e5, 1e5]
    assert [k["params"] for k in keys[:3]] == [33_334 * 16, 33_333 * 16, 33_333 * 16]
    servers = [f"rack0/node{4 + j}/cpu" for j in range(3)]
    assert [k["server"] for k in keys[:3]] == servers


def test_a_summary_without_an_embedding_has_no_embedding_keys() -> None:
    doc = emb_doc()
    del doc["model"]["embedding"]
    doc["model"]["layers"][0]["params"] = 1e6
    summary = _run(doc).summary
    assert not [k for k in summary if k.startswith("embedding")]


def test_allreduce_treats_the_table_as_a_dense_layer() -> None:
    """Naive DDP: the table's whole gradient (100_000 x 16 x 4 bytes) is all-reduced."""
    doc = emb_doc()
    doc["data_parallel"] = {"sync": "allreduce"}
    summary = _run(doc).summary
    assert summary["model"]["params"] == 100_000 * 16


def test_the_example_scenario_numbers() -> None:
    """embedding_zipf.yaml: the header's numbers (rel 1e-3); balanced spreads the rows."""
    doc = yaml.safe_load((SCENARIO / "embedding_zipf.yaml").read_text())
    summary = _run(doc).summary
    lookups = 1024 * 26
    rows = summary["embedding_rows_touched_per_worker"]
    assert rows == pytest.approx(unique_rows(10_000_000, 1.05, lookups), rel=1e-12)
    assert rows == pytest.approx(11_950, rel=1e-3)
    assert summary["embedding_push_bytes_per_worker"] == pytest.approx(3.06e6, rel=1e-3)
    assert summary["embedding_rows_updated"] == pytest.approx(71_194, rel=1e-3)
    hot = unique_rows_by_shard(10_000_000, 1.05, lookups, 4, "range")[0]
    assert hot / rows == pytest.approx(0.877, rel=1e-3)
    assert summary["busiest_server_share"] == pytest.approx(0.654, rel=1e-3)
    doc["data_parallel"]["ps"]["sharding"] = "balanced"
    balanced = _run(doc).summary
    assert balanced["busiest_server_share"] == pytest.approx(0.274, rel=1e-2)
    assert balanced["iteration_time_s"] < 0.5 * summary["iteration_time_s"]


# ------------------------------------------------------------------ refusals


def _cli(args: list[str], capsys: Any) -> tuple[int, str]:
    try:
        code = main(args)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"mode": "geo"}, "data_parallel.ps.mode"),
        ({"hierarchy": ["cpu", "server"]}, "data_parallel.ps.hierarchy"),
        ({"key_distribution": "uniform"}, "data_parallel.ps.key_distribution"),
        ({"global_batch": 130}, "training.global_batch"),
        ({"distribution": "zipf"}, "model.embedding.distribution"),
        ({"distribution": {"zipf": -1}}, "model.embedding.distribution"),
        ({"rows": 0}, "model.embedding.rows"),
        ({"dim": 1.5}, "model.embedding.dim"),
        ({"pipeline": 2}, "model.embedding"),
    ],
)
def test_bad_input_exits_2_naming_the_key(
    change: dict[str, Any], path: str, tmp_path: Path, capsys: Any
) -> None:
    doc = emb_doc()
    for key, value in change.items():
        if key in ("mode", "hierarchy", "key_distribution"):
            doc["data_parallel"]["ps"][key] = value
        elif key == "global_batch":
            doc["training"][key] = value
        elif key == "pipeline":
            doc["data_parallel"] = {"sync": "allreduce"}
            doc["parallelism"] = {"pp": value}
        else:
            doc["model"]["embedding"][key] = value
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(doc))
    code, err = _cli(["run", str(file), "-o", str(tmp_path / "out"), "-q"], capsys)
    assert code == 2
    assert path in err and "Traceback" not in err
