"""``replicas_exact``: when one replica per class is exactly every replica (issue 43).

One replica per class (``simulate_replicas: one``) leaves out the own flows of the replicas
not played -- their pipeline sends and tensor-parallel collectives.  It is exactly every
replica with the same (analytical) data-parallel collectives when no link can carry own
flows of two replicas, every replica's own flows are laid out as its played replica's, and
the data-parallel collectives are rings; otherwise an approximation.  The summary says
which (``replicas_exact``, ``replicas_inexact_reason``) and ``clustersim run`` prints it.

Held here: the fast search (it skips pairs inside a node, or inside a rack's switch, whose
nodes hold one replica) finds what following every own flow's every route finds, over
layouts that are exact and layouts that are not (replicas interleaved over racks, GPUs of
two replicas behind one NIC or PCIe switch); exact layouts give every replica's summary to
1e-12, and inexact ones (a shared uplink, a replica straddling racks) do not; a tree may
not stand in; every node of the catalog, in two- and three-tier racks, routes the pairs the
search skips on links no other pair takes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import parse_scenario, simulate
from clustersim.api import prepare
from clustersim.cli import main
from clustersim.scenario import parse_scenario as parse
from clustersim.strategies.hybrid.replica_classes import (
    SharedOwnLink,
    inexact_reason,
    own_pairs,
    shared_own_link,
)
from clustersim.topology import build_topology

from .test_replica_classes import assert_same, job, one_and_every

NIC = {"bandwidth": "200Gb/s"}
NODES = Path(__file__).resolve().parent.parent / "clustersim" / "hardware" / "nodes"

LAYOUTS: dict[str, tuple[dict[str, Any], dict[str, Any], str | None]] = {
    # name: (cluster, parallelism, the shared link's start or None when exact)
    "two replicas a node": (
        {"kind": "two_tier", "racks": 2, "nodes_per_rack": 2, "node": {"preset": "dgx-a100"}},
        {"tp": 2, "pp": 2, "dp": 8},
        None,
    ),
    "stages on two racks, a replica's racks its own": (
        {"kind": "two_tier", "racks": 4, "nodes_per_rack": 1, "node": {"preset": "dgx-a100"}},
        {"tp": 8, "pp": 2, "dp": 2},
        None,
    ),
    "stages on two racks, replicas interleaved": (
        {
            "kind": "two_tier",
            "racks": 2,
            "nodes_per_rack": 2,
            "node": {"preset": "dgx-a100"},
            "rack_uplink": {"oversubscription": 2},
        },
        {"tp": 8, "pp": 2, "dp": 2, "order": ["tp", "dp", "pp"]},
        "rack0/tor->spine",
    ),
    "two replicas behind one NIC": (
        {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 2,
            "node": {"preset": "dgx-a100", "nics": 4},
        },
        {"tp": 1, "pp": 2, "dp": 8, "order": ["tp", "dp", "pp"]},
        "rack0/node0/",
    ),
    "tensor groups of two replicas across one PCIe switch": (
        {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {"gpus": 8, "nics": 4, "pcie": {"bandwidth": "32GB/s"}, "nic": NIC},
        },
        {"tp": 2, "pp": 1, "dp": 4, "order": ["dp", "tp", "pp"]},
        "rack0/node0/pcie0->rack0/node0/root",
    ),
    "one GPU of a stage a node, two spines": (
        {
            "kind": "two_tier",
            "racks": 2,
            "nodes_per_rack": 4,
            "spines": 2,
            "node": {"preset": "dgx-a100", "gpus": 2, "nics": 2},
        },
        {"tp": 2, "pp": 2, "dp": 4, "order": ["tp", "dp", "pp"]},
        "rack0/tor->spine",
    ),
}


def layout(name: str) -> dict[str, Any]:
    cluster, parallelism, _ = LAYOUTS[name]
    doc = job(parallelism["dp"], [])
    doc["cluster"] = cluster
    doc["parallelism"].update(parallelism)
    return doc


def every_route(strategy: Any) -> SharedOwnLink | None:
    """The reference search: every own flow's every equal-cost route, no pair skipped."""
    owner: dict[int, int] = {}
    for d in range(strategy.dp):
        for a, b in own_pairs(strategy, d):
            for route in strategy.topology.routes(a, b):
                for link in route.links:
                    first = owner.setdefault(link.index, d)
                    if first != d:
                        return SharedOwnLink(link.name, first, d)
    return None


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_search_finds_what_following_every_route_finds(name: str) -> None:
    strategy = prepare(parse_scenario(layout(name))).strategy
    found = shared_own_link(strategy)
    assert found == every_route(strategy)
    shared = LAYOUTS[name][2]
    if shared is None:
        assert found is None
    else:
        assert found is not None and found.link.startswith(shared), found
        assert found.first < found.second


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_reason_names_the_shared_link(name: str) -> None:
    reason = inexact_reason(prepare(parse_scenario(layout(name))).strategy)
    shared = LAYOUTS[name][2]
    if shared is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith("own flows of two replicas can share ")
        assert shared in reason


@pytest.mark.parametrize("name", [n for n, (_, _, shared) in LAYOUTS.items() if shared is None])
def test_exact_layouts_give_every_replicas_summary(name: str) -> None:
    one, every, _ = one_and_every(layout(name))
    assert one["replicas_exact"] is True and "replicas_inexact_reason" not in one
    assert_same(one, every)
    assert "replicas_exact" not in every  # every replica played: nothing to say
    # every device's times too: a device not played has those of the one standing for it
    assert list(one["devices"]) == list(every["devices"])
    for device, row in every["devices"].items():
        for key, value in row.items():
            assert one["devices"][device][key] == pytest.approx(value, rel=1e-12, abs=1e-15)


def straddling() -> dict[str, Any]:
    """Three nodes a rack, pp 2 of a node each: replica 1 has a stage on each rack."""
    doc = job(3, [])
    doc["cluster"] = {
        "kind": "two_tier",
        "racks": 2,
        "nodes_per_rack": 3,
        "node": {"preset": "dgx-a100"},
        "rack_uplink": {"oversubscription": 4},
    }
    doc["parallelism"].update(tp=8, pp=2, dp=3)
    doc["training"]["global_batch"] = 96
    return doc


def test_a_replica_laid_out_otherwise_than_its_played_one_is_named() -> None:
    """Replica 1 straddles the racks (its pipeline sends go over the spine) while replica 0,
    which stands for it, stays in rack 0: no link is shared, yet one replica is not every
    replica, and the reason says so."""
    one, every, strategy = one_and_every(straddling())
    assert shared_own_link(strategy) is None
    assert one["replicas_exact"] is False
    assert one["replicas_inexact_reason"] == "replica 1's own flows are not laid out as replica 0's"
    assert one["iteration_time_s"] < every["iteration_time_s"] * (1 - 1e-6)


@pytest.mark.parametrize(
    ("zero", "algorithm", "exact"),
    [(1, "auto", True), (0, "ring", True), (0, "auto", False), (0, "double_tree", False)],
)
def test_data_parallel_collectives_must_be_rings(zero: int, algorithm: str, exact: bool) -> None:
    """The distributed optimizer's reduce-scatters and gathers run as rings under auto; an
    all-reduce under auto may run as a double tree, whose ranks load their links unevenly."""
    doc = layout("two replicas a node")
    doc["zero"] = {"stage": zero}
    doc["data_parallel"] = {"allreduce": {"algorithm": algorithm}}
    reason = inexact_reason(prepare(parse_scenario(doc)).strategy)
    if exact:
        assert reason is None
    else:
        assert reason is not None and f"all-reduce ({algorithm})" in reason.replace(
            "allreduce", "all-reduce"
        )


def test_an_inexact_layout_names_its_link_and_differs_from_every_replica() -> None:
    """Replicas interleaved over two racks: their pipeline sends share rack 0's uplinks, the
    replica not played does not load them, and the iteration comes out faster than with
    every replica (487.8 against 487.9 ms when written)."""
    doc = layout("stages on two racks, replicas interleaved")
    doc["training"]["global_batch"] = 64  # 16 micro-batches a replica: sends meet
    one, every, _ = one_and_every(doc)
    assert one["replicas_exact"] is False
    reason = one["replicas_inexact_reason"]
    assert reason.startswith("own flows of two replicas can share rack0/tor->spine")
    assert reason.endswith("(replicas 0 and 1)")
    assert one["iteration_time_s"] < every["iteration_time_s"] * (1 - 1e-6)


def racked(kind: str, preset: str) -> tuple[dict[str, Any], int]:
    """Two racks of nodes of ``preset`` (two, or one NVLink domain's where it has one), and
    the nodes a rack."""
    found = re.search(r"nvlink_domain: \{value: (\d+)", (NODES / f"{preset}.yaml").read_text())
    nodes = int(found.group(1)) if found else 2
    cluster: dict[str, Any] = {"kind": kind, "nodes_per_rack": nodes, "node": {"preset": preset}}
    cluster.update({"racks": 2} if kind == "two_tier" else {"pods": 1, "racks_per_pod": 2})
    return {"name": "nodes", "cluster": cluster, "workload": {"program": []}}, nodes


@pytest.mark.parametrize("kind", ["two_tier", "three_tier"])
@pytest.mark.parametrize("preset", sorted(p.stem for p in NODES.glob("*.yaml")))
def test_pairs_in_a_node_or_a_rack_take_links_no_pair_outside_their_nodes_takes(
    preset: str, kind: str
) -> None:
    """What the search's skips rely on: a route between two devices of one node, or of two
    nodes of one rack, uses no link that a pair with no end in those nodes uses."""
    doc, n = racked(kind, preset)
    topology = build_topology(parse(doc).cluster)
    devices = topology.devices
    assert None not in {d.node for d in devices.values()}
    users: dict[int, set[frozenset[str]]] = {}  # link -> the nodes of each pair using it
    skipped: dict[frozenset[str], set[int]] = {}  # the links of the pairs the search skips
    for a, da in devices.items():
        for b, db in devices.items():
            if a == b:
                continue
            nodes = frozenset({da.node, db.node})
            for route in topology.routes(a, b):
                for link in route.links:
                    users.setdefault(link.index, set()).add(nodes)
                    if da.rack == db.rack:
                        skipped.setdefault(nodes, set()).add(link.index)
    assert len(skipped) == 2 * n + n * (n - 1)  # every node, every two nodes of a rack
    for nodes, links in skipped.items():
        for link in links:
            for others in users[link]:
                assert others & nodes, (preset, kind, topology.links[link].name, nodes, others)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("two replicas a node", "replicas  exactly every replica with the same collectives"),
        ("stages on two racks, replicas interleaved", "approximate: own flows of two replicas can"),
    ],
)
def test_the_run_line_says_whether_one_replica_is_exact(
    name: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = layout(name)
    doc["parallelism"]["simulate_replicas"] = "one"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "-o", str(tmp_path / "out")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("replicas"))
    assert says in line


def test_the_shipped_16k_scenario_is_exact() -> None:
    """GPT-3 175B on 16,384 GPUs: each replica on a rack of its own, its pipeline sends
    through that rack's switch ports: one replica is every replica there."""
    root = Path(__file__).resolve().parent.parent
    strategy = prepare(root / "scenarios" / "scale" / "gpt3_175b_16k.yaml").strategy
    assert shared_own_link(strategy) is None


def test_a_device_not_played_has_the_times_of_the_one_standing_for_it() -> None:
    """Before, the devices of the replicas not played showed only the data-parallel
    collectives they joined (no compute): a 16,384-GPU summary listed 16,320 idle GPUs."""
    doc = straddling()
    doc["parallelism"]["simulate_replicas"] = "one"
    strategy = prepare(parse_scenario(doc)).strategy
    stand_ins = strategy.stand_ins()
    assert len(stand_ins) == 2 * 2 * 8  # replicas 1 and 2, two stages of eight GPUs
    devices = simulate(parse_scenario(doc)).summary["devices"]
    for twin, played in stand_ins.items():
        assert devices[twin] == devices[played] and devices[twin]["compute_s"] > 0
