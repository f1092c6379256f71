"""Mixed clusters (``cluster.node_groups``, clustersim/scenario/node_groups.py): racked clusters
whose nodes are of several kinds.

Held to: the catalog's own numbers (each GPU keeps its preset's peak, memory and NIC); the
uplinks' definition (a rack's uplink = its nodes' NIC bandwidth / oversubscription, summed
over the nodes that are really in it); the synchronous data-parallel rule that the slowest
worker sets the pace (an unbalanced mixed job runs at the slow type's iteration time); and
exit 2 with key paths for what cannot be built.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from clustersim.api import simulate
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.scenario.node_groups import mean_gpu_hour_price
from clustersim.topology import build_topology

# DGX A100: 8 x 200 Gb/s HDR NICs; DGX H100: 8 x 400 Gb/s NDR NICs
# (clustersim/hardware/nodes/dgx-a100.yaml, dgx-h100.yaml and their sources).
HDR_BPS, NDR_BPS = 200e9 / 8, 400e9 / 8
A100_BF16, H100_BF16 = 312e12, 989e12  # dense peaks (hardware/gpus/*.yaml: bekman-tflops)


def mixed(kind: str = "two_tier", a100: int = 2, h100: int = 2, **keys: Any) -> dict[str, Any]:
    """A cluster section of ``a100`` DGX A100 then ``h100`` DGX H100 nodes, 2 per rack."""
    groups = [{"preset": "dgx-a100", "count": a100}, {"preset": "dgx-h100", "count": h100}]
    groups = [g for g in groups if g["count"]]
    nodes = a100 + h100
    shape = {
        "two_tier": {"racks": nodes // 2, "nodes_per_rack": 2},
        "three_tier": {"pods": nodes // 2, "racks_per_pod": 1, "nodes_per_rack": 2},
        "rail_optimized": {"groups": nodes // 2, "nodes_per_group": 2},
    }[kind]
    return {"kind": kind, **shape, "node_groups": groups, **keys}


def scenario(cluster: dict[str, Any], **sections: Any) -> dict[str, Any]:
    return {
        "name": "mixed",
        "cluster": cluster,
        "model": {"layers": [{"name": f"l{i}", "params": 1e6, "flops": 4e10} for i in range(4)]},
        "training": {"global_batch": 64, "iterations": 2, "precision": "bf16"},
        "data_parallel": {"sync": "allreduce"},
        "network": {"model": "analytical"},
        **sections,
    }


@pytest.mark.parametrize("kind", ["two_tier", "three_tier", "rail_optimized"])
@pytest.mark.parametrize("a100,h100", [(2, 2), (4, 2), (2, 4)])
def test_nodes_take_their_groups_kinds_in_build_order(kind: str, a100: int, h100: int) -> None:
    spec = parse_scenario(scenario(mixed(kind, a100, h100)))
    topology = build_topology(spec.cluster)
    nodes = sorted({d.node for d in topology.devices.values() if d.kind == "gpu"}, key=_order)
    assert len(nodes) == a100 + h100
    for i, node in enumerate(nodes):
        gpus = [d for d in topology.devices.values() if d.node == node and d.kind == "gpu"]
        assert len(gpus) == 8
        want = ("a100-sxm4-80gb", A100_BF16) if i < a100 else ("h100-sxm5-80gb", H100_BF16)
        assert {(g.type, g.flops_per_s) for g in gpus} == {want}
    assert topology.gpu_types() == {"a100-sxm4-80gb": 8 * a100, "h100-sxm5-80gb": 8 * h100}
    assert topology.describe()["gpu_types"] == topology.gpu_types()


def _order(node: str) -> tuple[int, ...]:
    """Build order of a node name (``rack3/node1``, ``pod2/rack0/node1``, ``group1/node0``)."""
    return tuple(int("".join(c for c in part if c.isdigit())) for part in node.split("/"))


@pytest.mark.parametrize("ratio", [1.0, 2.0, 4.0])
def test_rack_uplinks_carry_the_nics_of_their_own_nodes(ratio: float) -> None:
    """Rack r's uplink = (its nodes x 8 NICs x their line rate) / oversubscription, per spine."""
    cluster = mixed("two_tier", 2, 4, rack_uplink={"oversubscription": ratio}, spines=2)
    links = {
        link.name: link for link in build_topology(parse_scenario(scenario(cluster)).cluster).links
    }
    for rack, nic in [(0, HDR_BPS), (1, NDR_BPS), (2, NDR_BPS)]:
        up = links[f"rack{rack}/tor->spine1"]
        assert up.bandwidth_Bps == pytest.approx(2 * 8 * nic / ratio / 2, rel=1e-12)
        assert links[f"rack{rack}/node0/nic3->rack{rack}/tor"].bandwidth_Bps == nic


@pytest.mark.parametrize("ratio", [1.0, 3.0])
def test_pod_and_rail_uplinks_sum_their_own_nodes(ratio: float) -> None:
    three = mixed("three_tier", 2, 2, pod_uplink={"oversubscription": ratio}, pods=2)
    links = {x.name: x for x in build_topology(parse_scenario(scenario(three)).cluster).links}
    for pod, nic in [(0, HDR_BPS), (1, NDR_BPS)]:
        assert links[f"pod{pod}/spine0->core0"].bandwidth_Bps == pytest.approx(
            2 * 8 * nic / ratio, rel=1e-12
        )
    rail = mixed("rail_optimized", 2, 2, rail_uplink={"oversubscription": ratio})
    links = {x.name: x for x in build_topology(parse_scenario(scenario(rail)).cluster).links}
    for group, nic in [(0, HDR_BPS), (1, NDR_BPS)]:
        assert links[f"group{group}/rail5->spine0"].bandwidth_Bps == pytest.approx(
            2 * nic / ratio, rel=1e-12
        )


def test_only_the_h100_nodes_reduce_in_their_nvswitch() -> None:
    """NVLink SHARP (NVLS) is an H100 NVSwitch's (hardware/nodes/dgx-h100.yaml), not an A100's."""
    topology = build_topology(parse_scenario(scenario(mixed())).cluster)
    assert sorted(topology.reductions) == ["rack1/node0/nvswitch", "rack1/node1/nvswitch"]


def test_one_group_is_the_same_cluster_as_node() -> None:
    """``node_groups`` of one kind builds what ``node`` builds, link for link."""
    grouped = mixed("two_tier", 4, 0, rack_uplink={"oversubscription": 2})
    plain = {k: v for k, v in grouped.items() if k != "node_groups"}
    plain["node"] = {"preset": "dgx-a100"}
    a = build_topology(parse_scenario(scenario(grouped)).cluster)
    b = build_topology(parse_scenario(scenario(plain)).cluster)
    assert [(x.name, x.bandwidth_Bps, x.latency_s) for x in a.links] == [
        (x.name, x.bandwidth_Bps, x.latency_s) for x in b.links
    ]
    assert a.devices == b.devices


@pytest.mark.parametrize("batch", [64, 128])
def test_unbalanced_the_slow_type_sets_the_pace(batch: int) -> None:
    """Synchronous data parallelism: every worker waits for the all-reduce, so an even split
    over A100s and H100s runs at the all-A100 cluster's iteration time (the compute dominates
    here: 4 layers of 4e10 FLOPs per sample), and the H100s idle for the difference."""
    doc = scenario(mixed("two_tier", 2, 2))
    doc["training"]["global_batch"] = batch
    both = simulate(parse_scenario(doc)).summary
    slow = copy.deepcopy(doc)
    slow["cluster"]["node_groups"] = [{"preset": "dgx-a100", "count": 4}]
    a100 = simulate(parse_scenario(slow)).summary
    assert both["iteration_time_s"] == pytest.approx(a100["iteration_time_s"], rel=0.02)
    devices = both["devices"]
    assert devices["rack0/node0/gpu0"]["type"] == "a100-sxm4-80gb"
    assert devices["rack1/node1/gpu7"]["type"] == "h100-sxm5-80gb"
    assert devices["rack1/node1/gpu7"]["idle_s"] > 2 * devices["rack0/node0/gpu0"]["idle_s"]
    assert both["gpu_types"] == {"a100-sxm4-80gb": 16, "h100-sxm5-80gb": 16}
    assert "gpu_types" not in a100 and "type" not in a100["devices"]["rack0/node0/gpu0"]


@pytest.mark.parametrize(
    "prices,cluster_price,want",
    [
        ((1.5, 3.0), None, (16 * 1.5 + 16 * 3.0) / 32),
        ((None, 3.0), 2.0, 2.5),
        ((None, 3.0), None, None),
    ],
)
def test_a_gpu_hour_costs_the_mean_of_the_groups_prices(
    prices: tuple[float | None, ...], cluster_price: float | None, want: float | None
) -> None:
    cluster = mixed()
    for group, price in zip(cluster["node_groups"], prices, strict=True):
        if price is not None:
            group["gpu_hour_price"] = price
    if cluster_price is not None:
        cluster["gpu_hour_price"] = cluster_price
    got = mean_gpu_hour_price(parse_scenario(scenario(cluster)).cluster)
    assert got == (pytest.approx(want) if want is not None else None)


BAD = [
    (lambda c: c["node_groups"][1].update(count=3), "cluster.node_groups", "adding up to 4"),
    (lambda c: c["node_groups"][1].update(preset="dgx-z100"), "cluster.node_groups[1].preset", ""),
    (lambda c: c.update(node={"preset": "dgx-a100"}), "cluster.node", "one of node or node_groups"),
    (lambda c: c["node_groups"][1].update(gpus=4, nics=4), "cluster.node_groups[1].gpus", "8"),
    (
        lambda c: c["node_groups"][0].update(nvlink_domain=2),
        "cluster.node_groups[0].nvlink_domain",
        "1",
    ),
    (lambda c: c["node_groups"][0].pop("count"), "cluster.node_groups[0].count", ""),
    (lambda c: c.update(node_groups=[]), "cluster.node_groups", ""),
]


@pytest.mark.parametrize("change,path,allowed", BAD)
def test_bad_groups_name_their_key(change: Any, path: str, allowed: str) -> None:
    doc = scenario(mixed())
    change(doc["cluster"])
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(doc)
    problems = {p.path: p for p in raised.value.problems}
    assert path in problems, problems
    assert allowed in (problems[path].allowed or "")


def test_cli_reports_the_mix_and_exit_2(tmp_path: Any, capsys: Any) -> None:
    good = tmp_path / "mixed.yaml"
    good.write_text(yaml.safe_dump(scenario(mixed())))
    assert main(["validate", str(good)]) == 0
    assert "mixed: 16 x a100-sxm4-80gb + 16 x h100-sxm5-80gb GPUs" in capsys.readouterr().out
    bad = scenario(mixed())
    bad["cluster"]["node_groups"][0]["preset"] = "dgx-nope"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 2
    assert "cluster.node_groups[0].preset" in capsys.readouterr().err


def test_devices_csv_names_each_devices_type(tmp_path: Any) -> None:
    from clustersim.outputs.devices import device_table

    summary = simulate(parse_scenario(scenario(mixed()))).summary
    header, rows = device_table(summary)
    assert header[:3] == ["device", "type", "compute_s"]
    types = {row[0]: row[1] for row in rows}
    assert types["rack0/node1/gpu2"] == "a100-sxm4-80gb"
    assert types["rack1/node0/gpu5"] == "h100-sxm5-80gb"


def test_the_resolved_scenario_keeps_each_devices_type(tmp_path: Any) -> None:
    """scenario.resolved.yaml writes every preset out (no catalog needed) and keeps the
    types: re-run, it gives the same summary, gpu_types and devices' types included."""
    from clustersim.scenario.presets import expanded_document

    doc = scenario(mixed())
    resolved, notes = expanded_document(doc)
    groups = resolved["cluster"]["node_groups"]
    assert all("preset" not in g and "preset" not in g["gpu"] for g in groups)
    assert [g["gpu"]["type"] for g in groups] == ["a100-sxm4-80gb", "h100-sxm5-80gb"]
    assert len(notes) == 4  # two node presets, two GPU presets
    first = simulate(parse_scenario(doc)).summary
    again = simulate(parse_scenario(resolved)).summary
    assert again["gpu_types"] == first["gpu_types"]
    assert again["iteration_time_s"] == first["iteration_time_s"]
    assert again["devices"] == first["devices"]
