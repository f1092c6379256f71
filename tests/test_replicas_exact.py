"""``replicas_exact``: when one replica per class is exactly every replica (issue 43).

One replica per class (``simulate_replicas: one``) leaves out the own flows of the replicas
not played -- their pipeline sends and tensor-parallel collectives.  Where no link can
carry own flows of two replicas, those flows load only links no played flow crosses, and
one replica per class is exactly every replica with the same (analytical) data-parallel
collectives; where a link can, it is an approximation.  The summary says which
(``replicas_exact``, ``replicas_shared_link``) and ``clustersim run`` prints it.

Held here: the fast search (it skips pairs inside nodes that hold one replica) finds what
following every own flow's every route finds, over layouts that are exact and layouts that
are not (replicas interleaved over racks, GPUs of two replicas behind one NIC); exact
layouts give every replica's summary to 1e-12 and an inexact one does not; every node of
the catalog routes its own pairs inside itself (what the skip relies on).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import parse_scenario
from clustersim.api import prepare
from clustersim.cli import main
from clustersim.scenario import parse_scenario as parse
from clustersim.strategies.hybrid.replica_classes import (
    SharedOwnLink,
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


@pytest.mark.parametrize("name", [n for n, (_, _, shared) in LAYOUTS.items() if shared is None])
def test_exact_layouts_give_every_replicas_summary(name: str) -> None:
    one, every, _ = one_and_every(layout(name))
    assert one["replicas_exact"] is True and "replicas_shared_link" not in one
    assert_same(one, every)
    assert "replicas_exact" not in every  # every replica played: nothing to say


def test_an_inexact_layout_names_its_link_and_differs_from_every_replica() -> None:
    """Replicas interleaved over two racks: their pipeline sends share rack 0's uplinks, the
    replica not played does not load them, and the iteration comes out faster than with
    every replica (487.8 against 487.9 ms when written)."""
    doc = layout("stages on two racks, replicas interleaved")
    doc["training"]["global_batch"] = 64  # 16 micro-batches a replica: sends meet
    one, every, _ = one_and_every(doc)
    assert one["replicas_exact"] is False
    assert one["replicas_shared_link"].startswith("rack0/tor->spine")
    assert one["replicas_shared_link"].endswith("(replicas 0 and 1)")
    assert one["iteration_time_s"] < every["iteration_time_s"] * (1 - 1e-6)


@pytest.mark.parametrize("preset", sorted(p.stem for p in NODES.glob("*.yaml")))
def test_every_catalog_node_routes_its_own_pairs_on_links_no_other_pair_takes(
    preset: str,
) -> None:
    """What the search's skip relies on: no route between two devices outside a node uses a
    link of a route between two of its devices (two racks of two nodes, or of one NVLink
    domain where the node has one)."""
    found = re.search(r"nvlink_domain: \{value: (\d+)", (NODES / f"{preset}.yaml").read_text())
    domain = int(found.group(1)) if found else 2
    cluster = {"kind": "two_tier", "racks": 2, "nodes_per_rack": domain, "node": {"preset": preset}}
    doc = {"name": "nodes", "cluster": cluster, "workload": {"program": []}}
    topology = build_topology(parse(doc).cluster)
    node_of = {name: device.node for name, device in topology.devices.items()}
    assert None not in node_of.values()
    inside: dict[str, set[int]] = {}
    between: dict[int, set[tuple[str, str]]] = {}  # link -> the nodes of pairs across nodes
    for a in node_of:
        for b in node_of:
            if a == b:
                continue
            links = {link.index for route in topology.routes(a, b) for link in route.links}
            if node_of[a] == node_of[b]:
                inside.setdefault(node_of[a], set()).update(links)
            else:
                for link in links:
                    between.setdefault(link, set()).add((node_of[a], node_of[b]))
    assert len(inside) == 2 * domain
    for node, links in inside.items():
        for link in links:  # a pair across nodes uses it only with an end in this node
            for ends in between.get(link, ()):
                assert node in ends, (preset, node, topology.links[link].name, ends)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("two replicas a node", "exactly every replica with the same collectives"),
        ("stages on two racks, replicas interleaved", "approximate: own flows of two replicas"),
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
