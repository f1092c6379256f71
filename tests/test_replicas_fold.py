"""``simulate_replicas: all`` played as one replica per class where that is every replica
(issue 43 item 1).

With the analytical network on 4,096 GPUs or more, ``all`` plays one replica of each class
of alike replicas when :func:`~clustersim.strategies.hybrid.replica_classes.inexact_reason`
finds nothing (own flows on links of their own, laid out alike, data-parallel rings) and no
failure is scheduled; the summary is every replica's: each device and link not played
carries the figures of the one in its place on the played replica.

The reference is every replica played.  Here the threshold is lowered to fold small
clusters, and every summary key (but the engine's counters and ``played_replicas``) and
every row of the link table must equal every replica's to 1e-12, over exact layouts, slow
nodes and random stragglers (several classes); layouts that are not exact, the flow
network, scheduled failures are played replica by replica as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import parse_scenario, simulate
from clustersim.api import prepare
from clustersim.outputs.modes import FOLD_AT
from clustersim.strategies.hybrid import replica_classes

from .test_replica_classes import job
from .test_replicas_exact import LAYOUTS, layout, straddling

ENGINE = {"records", "flows_completed", "estimated_events", "estimated_memory_bytes"}
"""What the engine did: fewer events and records when fewer replicas are played."""


def flat(value: Any, path: str = "") -> dict[str, Any]:
    """A summary as dotted keys (lists of dicts and of lists numbered)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flat(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        out = {}
        for i, item in enumerate(value):
            out.update(flat(item, f"{path}[{i}]"))
        return out
    return {path: value}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


def folded_and_every(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The runs of ``doc`` under ``all`` with the analytical network, folded (threshold 1)
    and replica by replica (threshold as shipped: the clusters here are smaller)."""
    doc["parallelism"]["simulate_replicas"] = "all"
    doc["network"] = {"model": "analytical"}
    every = simulate(parse_scenario(doc))
    monkeypatch.setattr(replica_classes, "FOLD_ALL_AT", 1)
    return simulate(parse_scenario(doc)), every


def assert_every_replicas(folded: Any, every: Any) -> None:
    a, b = flat(folded.summary), flat(every.summary)
    assert set(a) - set(b) == {"played_replicas"}
    assert set(b) <= set(a)
    keys = [k for k in a if k != "played_replicas"]
    assert keys == list(b)  # the same keys in the same order (summary.json's)
    for key in keys:
        if key.startswith("engine.") and key.split(".")[1] in ENGINE:
            continue
        assert same(a[key], b[key]), (key, a[key], b[key])
    rows_a, rows_b = list(folded.links), list(every.links)
    assert [r["link"] for r in rows_a] == [r["link"] for r in rows_b]
    for x, y in zip(rows_a, rows_b, strict=True):
        assert all(same(x[c], y[c]) for c in y), (x, y)


def slow_node(dp: int) -> dict[str, Any]:
    return job(dp, [{"devices": "rack1/node0/gpu*", "slowdown": 1.3}])


def random_stragglers() -> dict[str, Any]:
    spec = {"fraction": 0.1, "slowdown": {"dist": "lognormal", "sigma": 0.3}}
    return job(16, [{"random": spec}])


def three_interleaved(doc: dict[str, Any]) -> dict[str, Any]:
    doc["training"]["iterations"] = 3
    doc["pipeline"] = {"schedule": "interleaved", "chunks": 2}
    return doc


EXACT = {
    **{
        name: (lambda name=name: layout(name))
        for name, (_, _, shared) in LAYOUTS.items()
        if not shared
    },
    "a slow node (two classes)": lambda: slow_node(8),
    "random stragglers (several classes)": random_stragglers,
    "a slow node, three iterations, interleaved": lambda: three_interleaved(slow_node(8)),
}


@pytest.mark.parametrize("name", EXACT)
def test_folded_all_is_every_replica(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    folded, every = folded_and_every(EXACT[name](), monkeypatch)
    played = folded.summary["played_replicas"]
    assert played < folded.summary["dp"] and "played_replicas" not in every.summary
    assert len(folded.records) < len(every.records)
    assert_every_replicas(folded, every)


@pytest.mark.parametrize(
    "make",
    [
        lambda: layout("stages on two racks, replicas interleaved"),
        lambda: layout("two replicas behind one NIC"),
        straddling,
    ],
    ids=["shared uplink", "shared NIC", "straddling replica"],
)
def test_layouts_that_are_not_exact_play_every_replica(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = make()
    doc["parallelism"]["simulate_replicas"] = "all"
    doc["network"] = {"model": "analytical"}
    monkeypatch.setattr(replica_classes, "FOLD_ALL_AT", 1)
    strategy = prepare(parse_scenario(doc)).strategy
    assert not strategy.folded and strategy.played == list(range(strategy.dp))
    assert "played_replicas" not in simulate(parse_scenario(doc)).summary


def test_the_flow_network_and_failures_play_every_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per send, the collectives are the replicas' own flows; a failure reroutes some."""
    monkeypatch.setattr(replica_classes, "FOLD_ALL_AT", 1)
    doc = layout("two replicas a node")
    doc["parallelism"]["simulate_replicas"] = "all"
    doc["network"] = {"model": "flow"}
    assert not prepare(parse_scenario(doc)).strategy.folded
    doc["network"] = {"model": "analytical"}
    assert prepare(parse_scenario(doc)).strategy.folded
    doc["failures"] = [{"links": "rack0/tor->spine0", "at": "1ms"}]
    assert not prepare(parse_scenario(doc)).strategy.folded


def test_folding_starts_where_run_folders_fold() -> None:
    """From 4,096 GPUs a run folder keeps one replica's records by default either way."""
    assert replica_classes.FOLD_ALL_AT == FOLD_AT == 4096


def test_every_replica_of_the_16k_scenario_is_played_as_one(tmp_path: Path) -> None:
    """GPT-3 175B on 16,384 GPUs, every replica with the analytical network: one replica
    played for the 256 (6.8 s and 0.3 GB for the whole run on 2 cores when written; every
    replica played one by one took minutes and gigabytes, bench/bench_scale.py)."""
    root = Path(__file__).resolve().parent.parent
    path = root / "scenarios" / "scale" / "gpt3_175b_16k.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["parallelism"]["simulate_replicas"] = "all"
    doc["network"] = {"model": "analytical"}
    strategy = prepare(parse_scenario(doc, str(path))).strategy
    assert strategy.folded and strategy.played == [0] and strategy.dp == 256
    assert ", 1 of 256 replicas played for all," in strategy.describe()  # validate's line
