"""Tests of clustersim.scenario: YAML in, validated scenario or clear problems out."""

from __future__ import annotations

import copy
import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustersim.errors import Problem, ScenarioError
from clustersim.scenario import (
    CLUSTER_KINDS,
    CustomCluster,
    FixedStraggler,
    FlatCluster,
    Invalid,
    LinkStraggler,
    LognormalSlowdown,
    RandomStraggler,
    Scenario,
    TwoTierCluster,
    load_scenario,
    parse_scenario,
    scenario_json_schema,
    validate_model,
)

TWO_TIER_YAML = """\
name: ps-vs-ring-4to1
seed: 1
cluster:
  racks: 4
  nodes_per_rack: 4
  node:
    gpus: 8
    gpu: {flops: 312TFLOPS, efficiency: 0.5, memory: 80GB, memory_bandwidth: 2TB/s}
    cpu: {flops: 2TFLOPS, memory: 1TB}
    pcie: {bandwidth: 32GB/s, latency: 1us}
    nvlink: {bandwidth: 300GB/s, latency: 1us}
    nic: {bandwidth: 100Gb/s, latency: 2us}
  rack_uplink: {oversubscription: 4}
  spines: 1
stragglers:
  - {devices: "rack0/node1/*", slowdown: 1.5}
  - {random: {fraction: 0.05, slowdown: {dist: lognormal, sigma: 0.3}}}
  - {links: "rack0/tor->*", bandwidth_factor: 0.5, start: 1ms, end: 2ms}
workload:
  collective: {collective: allreduce, algorithm: ring, bytes: 160MB, group: all}
"""

TAG_NAMES = {
    *CLUSTER_KINDS,
    "lognormal",
    "exponential",
    "uniform",
    "fixed straggler",
    "random straggler",
    "link straggler",
}
"""Union member tags, which must never show in a key path."""


def two_tier_doc() -> dict[str, Any]:
    """A valid two-tier scenario document, as a fresh dict."""
    return {
        "name": "t",
        "cluster": {
            "node": {
                "gpus": 4,
                "pcie": {"bandwidth": "16GB/s"},
                "nic": {"bandwidth": "100Gb/s"},
            }
        },
        "workload": {"program": []},
    }


def with_cluster(cluster: Any, **top: Any) -> dict[str, Any]:
    """A scenario document around ``cluster``."""
    return {"name": "t", "cluster": cluster, "workload": {"program": []}, **top}


def problems(doc: Any) -> list[Problem]:
    """The problems :func:`parse_scenario` finds in ``doc`` (fails if there are none)."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc)
    return info.value.problems


def rendered(doc: Any) -> str:
    """The error text :func:`parse_scenario` gives for ``doc``."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc)
    return str(info.value)


def write(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> Path:
    """``text`` written to a file in ``tmp_path``."""
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- valid scenarios


def test_two_tier_scenario_parses_to_si_numbers(tmp_path: Path) -> None:
    """The design document's two-tier scenario comes out in SI units."""
    scenario = load_scenario(write(tmp_path, TWO_TIER_YAML))
    cluster = scenario.cluster
    assert isinstance(cluster, TwoTierCluster)
    assert (cluster.racks, cluster.nodes_per_rack, cluster.spines) == (4, 4, 1)
    node = cluster.node
    assert node.gpu.flops_per_s == 3.12e14
    assert node.gpu.efficiency == 0.5
    assert node.gpu.memory_bytes == 8e10
    assert node.gpu.memory_bandwidth_Bps == 2e12
    assert node.pcie.bandwidth_Bps == 3.2e10
    assert node.pcie.latency_s == pytest.approx(1e-6)
    assert node.nvlink is not None and node.nvlink.bandwidth_Bps == 3e11
    assert node.nvlink.pairs is None
    assert node.nic.bandwidth_Bps == 1.25e10
    assert node.nic.latency_s == pytest.approx(2e-6)
    assert cluster.rack_uplink.oversubscription == 4
    assert cluster.rack_uplink.bandwidth_Bps is None


def test_cpu_keys_not_given_take_cpu_defaults(tmp_path: Path) -> None:
    """A CPU that gives only some keys gets the CPU defaults (not the GPU's) for the rest."""
    cpu = load_scenario(write(tmp_path, TWO_TIER_YAML)).cluster.node.cpu
    assert cpu.flops_per_s == 2e12
    assert cpu.memory_bytes == 1e12
    assert cpu.memory_bandwidth_Bps == 2e11


def test_stragglers_of_all_three_forms(tmp_path: Path) -> None:
    """Fixed, random and link stragglers are told apart by their keys."""
    fixed, random, link = load_scenario(write(tmp_path, TWO_TIER_YAML)).stragglers
    assert isinstance(fixed, FixedStraggler) and fixed.slowdown == 1.5
    assert isinstance(random, RandomStraggler)
    assert random.random.devices == "*" and random.random.fraction == 0.05
    assert isinstance(random.random.slowdown, LognormalSlowdown)
    assert random.random.slowdown.mu == 0.0
    assert isinstance(link, LinkStraggler)
    assert (link.start_s, link.end_s) == pytest.approx((1e-3, 2e-3))


def test_scenario_top_level_fields(tmp_path: Path) -> None:
    """Name, seed, workload and source come through."""
    path = write(tmp_path, TWO_TIER_YAML)
    scenario = load_scenario(path)
    assert scenario.name == "ps-vs-ring-4to1"
    assert scenario.seed == 1
    assert scenario.description == ""
    assert scenario.workload["collective"]["bytes"] == "160MB"
    assert scenario.source == str(path)


def test_defaults_of_a_minimal_two_tier_cluster() -> None:
    """Kind, racks, uplink, spines, routing, GPU and CPU all have defaults."""
    scenario = parse_scenario(two_tier_doc())
    cluster = scenario.cluster
    assert isinstance(cluster, TwoTierCluster) and cluster.kind == "two_tier"
    assert (cluster.racks, cluster.nodes_per_rack, cluster.spines) == (1, 1, 1)
    assert cluster.rack_uplink.oversubscription == 1
    assert cluster.rack_uplink.latency_s == 0
    assert cluster.spine_routing == "ecmp"
    assert cluster.node.gpu.flops_per_s == 3.12e14 and cluster.node.gpu.memory_bytes == 8e10
    assert cluster.node.cpu.flops_per_s == 2e12 and cluster.node.cpu.memory_bytes == 1e12
    assert cluster.node.nvlink is None
    assert scenario.seed == 0 and scenario.stragglers == [] and scenario.source == ""


def test_uplink_given_as_bandwidth() -> None:
    """A rack uplink may be a bandwidth instead of a ratio."""
    doc = two_tier_doc()
    doc["cluster"]["rack_uplink"] = {"bandwidth": "400Gb/s", "latency": "1us"}
    uplink = parse_scenario(doc).cluster.rack_uplink
    assert uplink.bandwidth_Bps == 5e10 and uplink.oversubscription is None


def test_nvlink_pairs_are_kept() -> None:
    """Explicit NVLink pairs come through as tuples."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["nvlink"] = {"bandwidth": "300GB/s", "pairs": [[0, 1], [2, 3]]}
    assert parse_scenario(doc).cluster.node.nvlink.pairs == [(0, 1), (2, 3)]


def test_node_without_gpus() -> None:
    """A node may have no GPU (only a CPU and a NIC)."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["gpus"] = 0
    assert parse_scenario(doc).cluster.node.gpus == 0


@pytest.mark.parametrize("kind", ["switch", "ring", "fully_connected"])
def test_flat_kinds(kind: str) -> None:
    """Each flat kind parses, with GPU device defaults."""
    cluster = parse_scenario(
        with_cluster(
            {"kind": kind, "devices": 4, "link": {"bandwidth": "25GB/s", "latency": "5us"}}
        )
    ).cluster
    assert isinstance(cluster, FlatCluster) and cluster.kind == kind
    assert cluster.devices == 4 and cluster.device_kind == "gpu"
    assert cluster.link.bandwidth_Bps == 2.5e10 and cluster.link.latency_s == pytest.approx(5e-6)
    assert cluster.device.flops_per_s == 3.12e14 and cluster.bidirectional


def test_flat_cpu_devices_take_cpu_defaults() -> None:
    """``device_kind: cpu`` switches the device defaults to a CPU's."""
    cluster = parse_scenario(
        with_cluster(
            {
                "kind": "switch",
                "devices": 2,
                "device_kind": "cpu",
                "device": {"efficiency": 0.5},
                "link": {"bandwidth": "1GB/s"},
            }
        )
    ).cluster
    assert cluster.device.flops_per_s == 2e12
    assert cluster.device.memory_bandwidth_Bps == 2e11
    assert cluster.device.efficiency == 0.5


def test_one_way_ring() -> None:
    """A ring may be one-way."""
    cluster = parse_scenario(
        with_cluster(
            {"kind": "ring", "devices": 3, "link": {"bandwidth": "1GB/s"}, "bidirectional": False}
        )
    ).cluster
    assert cluster.bidirectional is False


def test_one_way_is_for_rings_only() -> None:
    """``bidirectional: false`` on a switch is refused at its key."""
    text = rendered(
        with_cluster(
            {"kind": "switch", "devices": 3, "link": {"bandwidth": "1GB/s"}, "bidirectional": False}
        )
    )
    assert "cluster.bidirectional: only a ring can be one-way" in text


def custom_cluster(**changes: Any) -> dict[str, Any]:
    """A custom cluster: two GPUs and a CPU on a switch."""
    cluster: dict[str, Any] = {
        "kind": "custom",
        "devices": [
            {"name": "g0"},
            {"name": "g1", "flops": "100TFLOPS"},
            {"name": "host", "kind": "cpu"},
        ],
        "switches": ["sw"],
        "links": [
            {"src": "g0", "dst": "sw", "bandwidth": "50GB/s", "latency": "1us"},
            {"src": "g1", "dst": "sw", "bandwidth": "50GB/s"},
            {"src": "host", "dst": "sw", "bandwidth": "16GB/s", "duplex": False},
        ],
    }
    cluster.update(changes)
    return cluster


def test_custom_cluster() -> None:
    """A custom cluster keeps its devices, switches and links, in SI units."""
    cluster = parse_scenario(with_cluster(custom_cluster())).cluster
    assert isinstance(cluster, CustomCluster)
    assert [d.name for d in cluster.devices] == ["g0", "g1", "host"]
    assert cluster.devices[1].flops_per_s == 1e14
    assert cluster.devices[2].kind == "cpu" and cluster.devices[2].memory_bytes == 1e12
    assert cluster.switches == ["sw"]
    assert cluster.links[0].bandwidth_Bps == 5e10 and cluster.links[0].latency_s == pytest.approx(
        1e-6
    )
    assert cluster.links[0].duplex and not cluster.links[2].duplex


def test_custom_link_to_unknown_device() -> None:
    """A link end that names nothing is refused at its key path, with a hint."""
    cluster = custom_cluster()
    cluster["links"][1]["dst"] = "sww"
    assert "cluster.links[1].dst: unknown device or switch 'sww'; did you mean 'sw'?" in rendered(
        with_cluster(cluster)
    )


def test_custom_duplicate_names() -> None:
    """Two devices (or a device and a switch) may not share a name."""
    cluster = custom_cluster(switches=["g0"])
    assert "cluster.switches[0]: name 'g0' is used twice" in rendered(with_cluster(cluster))


def test_custom_link_to_itself() -> None:
    """A link from a device to itself is refused."""
    cluster = custom_cluster()
    cluster["links"][0]["dst"] = "g0"
    assert "cluster.links[0]: a link cannot join 'g0' to itself" in rendered(with_cluster(cluster))


def test_scenarios_are_immutable() -> None:
    """Validated scenarios cannot be changed by accident."""
    scenario = parse_scenario(two_tier_doc())
    with pytest.raises(Exception, match="frozen"):
        scenario.seed = 3  # type: ignore[misc]


def test_model_copy_keeps_the_source(tmp_path: Path) -> None:
    """A copy with a new seed still knows its file."""
    path = write(tmp_path, TWO_TIER_YAML)
    copied = load_scenario(path).model_copy(update={"seed": 9})
    assert copied.source == str(path) and copied.seed == 9


# ----------------------------------------------------------------------------- error messages


def test_unit_error_has_key_path_message_and_allowed_units() -> None:
    """A size given for a bandwidth names the key, the mistake and the units allowed."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["nic"]["bandwidth"] = "100Gb"
    (problem,) = problems(doc)
    assert problem.path == "cluster.node.nic.bandwidth"
    assert problem.message == "'100Gb' is a size, expected a bandwidth such as 100Gb/s or 12.5GB/s"
    assert "b/s" in problem.allowed


def test_bare_number_for_a_unit_field() -> None:
    """A bandwidth without a unit is refused at its key path."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["pcie"]["bandwidth"] = 16
    assert "cluster.node.pcie.bandwidth: 16 has no unit" in rendered(doc)


def test_zero_latency_needs_no_unit() -> None:
    """``latency: 0`` is fine."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["pcie"]["latency"] = 0
    assert parse_scenario(doc).cluster.node.pcie.latency_s == 0


def test_unknown_key_did_you_mean_and_allowed_keys() -> None:
    """A misspelt key gets a hint and the list of keys allowed there."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["nicc"] = {"bandwidth": "1GB/s"}
    text = rendered(doc)
    assert "cluster.node.nicc: unknown key; did you mean 'nic'?" in text
    assert "(allowed: gpus, gpu, cpu, pcie, nvlink, nic, nvlink_domain, nics, preset)" in text


def test_unknown_key_without_close_match() -> None:
    """An unknown key with nothing close just says so."""
    doc = two_tier_doc()
    doc["zzz"] = "blue"
    (problem,) = problems(doc)
    assert (problem.path, problem.message) == ("zzz", "unknown key")
    assert (
        problem.allowed
        == "name, seed, description, cluster, stragglers, failures, recovery, checkpoint, network, model, training, data_parallel, parallelism, pipeline, zero, workload, engine, jobs"
    )


def test_python_field_names_are_not_offered_as_keys() -> None:
    """The allowed keys are the YAML names (``bandwidth``), not ``bandwidth_Bps``."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["pcie"]["bandwith"] = "1GB/s"
    (problem,) = problems(doc)
    assert problem.message == "unknown key; did you mean 'bandwidth'?"
    assert problem.allowed == "bandwidth, latency"


def test_source_is_not_a_yaml_key() -> None:
    """``source`` is set by the loader, never by the document."""
    doc = two_tier_doc()
    doc["source"] = "elsewhere.yaml"
    assert "source: unknown key" in rendered(doc)


def test_missing_required_key() -> None:
    """A missing required key is named by its full path."""
    doc = two_tier_doc()
    del doc["cluster"]["node"]["nic"]
    (problem,) = problems(doc)
    assert (problem.path, problem.message) == ("cluster.node.nic", "required key missing")


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        (("cluster", "racks"), 0, "cluster.racks: must be at least 1, got 0"),
        (("cluster", "racks"), 2.5, "cluster.racks: must be a whole number, got 2.5"),
        (("cluster", "racks"), True, "cluster.racks: must be a whole number, got true"),
        (("cluster", "racks"), "4", "cluster.racks: must be a whole number, got '4'"),
        (
            ("cluster", "node", "gpu"),
            {"efficiency": 0},
            "cluster.node.gpu.efficiency: must be greater than 0, got 0",
        ),
        (
            ("cluster", "node", "gpu"),
            {"efficiency": 1.5},
            "cluster.node.gpu.efficiency: must be at most 1, got 1.5",
        ),
        (
            ("cluster", "node", "gpu"),
            {"efficiency": "high"},
            "cluster.node.gpu.efficiency: must be a number, got 'high'",
        ),
        (("cluster", "node", "gpu"), {"efficiency": math.nan}, "must be a finite number"),
        (
            ("cluster", "node", "gpu"),
            "A100",
            "cluster.node.gpu: must be a mapping of keys to values, got 'A100'",
        ),
        (("name",), 2024, "name: must be text, got 2024"),
        (("name",), "", "name: must not be empty"),
        (("seed",), -1, "seed: must be at least 0, got -1"),
        (("stragglers",), {"devices": "*"}, "stragglers: must be a list, got a mapping"),
        (("workload",), {}, "workload: must not be empty"),
        (("workload",), ["program"], "workload: must be a mapping of keys to values, got a list"),
    ],
)
def test_plain_english_messages(where: tuple[str, ...], value: Any, expected: str) -> None:
    """Common mistakes get messages written for people, at their key path."""
    doc = two_tier_doc()
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert expected in rendered(doc)


def test_literal_choice_with_hint_and_choices() -> None:
    """A value outside a fixed set gets a hint and the choices."""
    doc = two_tier_doc()
    doc["cluster"]["spine_routing"] = "ecmpp"
    (problem,) = problems(doc)
    assert problem.path == "cluster.spine_routing"
    assert problem.message == "unknown value 'ecmpp'; did you mean 'ecmp'?"
    assert problem.allowed == "ecmp, split"


def test_unknown_kind_lists_the_kinds() -> None:
    """An unknown cluster kind is reported at ``cluster.kind`` with every registered fabric
    allowed (the other keys are not judged: they would be a plugin fabric's own)."""
    (problem,) = problems(with_cluster({"kind": "torus", "devices": 4}))
    assert problem.path == "cluster.kind"
    assert problem.message == "unknown cluster kind 'torus'"
    assert problem.allowed == (
        "two_tier, three_tier, rail_optimized, switch, ring, fully_connected, custom"
    )


def test_misspelt_kind_gets_a_hint() -> None:
    """A near miss of a kind is suggested."""
    assert "cluster.kind: unknown cluster kind 'rign'; did you mean 'ring'?" in rendered(
        with_cluster({"kind": "rign"})
    )


def test_cluster_that_is_not_a_mapping() -> None:
    """A cluster given as text is refused plainly."""
    (problem,) = problems(with_cluster("big"))
    assert (problem.path, problem.message) == (
        "cluster",
        "must be a mapping of keys to values, got 'big'",
    )


def test_uplink_with_both_ratio_and_bandwidth() -> None:
    """Oversubscription and bandwidth together are refused: which one wins would be a guess."""
    doc = two_tier_doc()
    doc["cluster"]["rack_uplink"] = {"oversubscription": 4, "bandwidth": "400Gb/s"}
    (problem,) = problems(doc)
    assert problem.path == "cluster.rack_uplink"
    assert "both oversubscription and bandwidth given; give exactly one" in problem.message
    assert "oversubscription" in problem.allowed and "bandwidth" in problem.allowed


def test_uplink_with_neither_ratio_nor_bandwidth() -> None:
    """An uplink given with neither is refused too."""
    doc = two_tier_doc()
    doc["cluster"]["rack_uplink"] = {"latency": "1us"}
    assert "cluster.rack_uplink: neither oversubscription nor bandwidth given" in rendered(doc)


@pytest.mark.parametrize(
    ("pair", "message", "allowed"),
    [
        ([3, 3], "a GPU cannot be paired with itself: [3, 3]", ""),
        ([1, 9], "GPU index out of range in [1, 9]", "0 to 3"),
        ([1, 0], "pair [1, 0] already listed at pairs[0]", ""),
    ],
)
def test_nvlink_pair_problems_at_their_index(pair: list[int], message: str, allowed: str) -> None:
    """Bad NVLink pairs are reported at ``cluster.node.nvlink.pairs[i]``."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["nvlink"] = {"bandwidth": "300GB/s", "pairs": [[0, 1], [2, 3], pair]}
    (problem,) = problems(doc)
    assert problem == Problem("cluster.node.nvlink.pairs[2]", message, allowed)


def test_nvlink_pair_of_wrong_length() -> None:
    """A pair has two entries (two GPUs) or three (and its number of links)."""
    doc = two_tier_doc()
    pairs = [[0, 1, 2], [3], [0, 2, 3, 1]]
    doc["cluster"]["node"]["nvlink"] = {"bandwidth": "300GB/s", "pairs": pairs}
    text = rendered(doc)
    assert "pairs[0]" not in text
    wrong = "must have 2 items (two GPU indices) or 3 (and a link count), got"
    assert f"cluster.node.nvlink.pairs[1]: {wrong} 1" in text
    assert f"cluster.node.nvlink.pairs[2]: {wrong} 4" in text
    doc["cluster"]["node"]["nvlink"]["pairs"] = [[0, 1, 2], [1, 2, 0]]
    assert "cluster.node.nvlink.pairs[1][2]: 0 links (allowed: 1 or more)" in rendered(doc)


def test_straggler_matching_no_form_lists_the_three_forms() -> None:
    """A straggler with none of the keys of any form is told the three forms."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"devices": "*", "slowdown": 2}, {"slow": 2}]
    (problem,) = problems(doc)
    assert problem.path == "stragglers[1]"
    assert problem.message == "matches none of the three straggler forms"
    assert "{devices: GLOB, slowdown: FACTOR}" in problem.allowed
    assert "{random:" in problem.allowed and "{links: GLOB" in problem.allowed


def test_fixed_straggler_slowdown_must_be_positive() -> None:
    """``stragglers[i].slowdown`` must be from 1e-6 to 1e6 (so above 0), range stated."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"devices": "*", "slowdown": 2}, {"devices": "*", "slowdown": -3}]
    assert (
        "stragglers[1].slowdown: must be at least 1e-06, got -3 "
        "(allowed: at least 1e-06 and at most 1e+06)"
    ) in rendered(doc)


def test_random_straggler_path_keeps_the_random_key_once() -> None:
    """The ``random`` key shows once in the path; the union tag of the same name does not."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"random": {"slowdown": {"dist": "lognormall", "sigma": 1}}}]
    (problem,) = problems(doc)
    assert problem.path == "stragglers[0].random.slowdown.dist"
    assert problem.message == "unknown dist 'lognormall'; did you mean 'lognormal'?"
    assert problem.allowed == "lognormal, exponential, uniform"


def test_random_straggler_without_dist() -> None:
    """A slowdown distribution needs ``dist``."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"random": {"slowdown": {"sigma": 1}}}]
    (problem,) = problems(doc)
    assert (problem.path, problem.message) == (
        "stragglers[0].random.slowdown.dist",
        "required key missing",
    )


def test_uniform_slowdown_bounds_in_order() -> None:
    """``high`` may not be below ``low``."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"random": {"slowdown": {"dist": "uniform", "low": 2, "high": 1}}}]
    assert "stragglers[0].random.slowdown.high: must be at least low (2), got 1" in rendered(doc)


def test_link_straggler_window_in_order() -> None:
    """A link degradation must end after it starts."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"links": "*", "bandwidth_factor": 0.5, "start": "2s", "end": "1s"}]
    assert "stragglers[0].end: must be later than start" in rendered(doc)


def test_link_straggler_mixed_with_fixed_keys() -> None:
    """Keys of another form inside a link straggler are unknown keys there."""
    doc = two_tier_doc()
    doc["stragglers"] = [{"links": "*", "bandwidth_factor": 0.5, "slowdown": 2}]
    (problem,) = problems(doc)
    assert (problem.path, problem.message) == ("stragglers[0].slowdown", "unknown key")
    assert problem.allowed == "links, bandwidth_factor, start, end"


def test_all_problems_reported_together_in_document_order() -> None:
    """Every problem is reported at once, in the order of the document."""
    doc = {
        "name": "",
        "cluster": {
            "racks": 0,
            "node": {"gpus": 4, "pcie": {"bandwidth": "16GB"}, "nicc": {}},
            "spine_routing": "all",
        },
        "stragglers": [{"devices": "*", "slowdown": 0}],
    }
    paths = [p.path for p in problems(doc)]
    assert paths == [
        "name",
        "cluster.racks",
        "cluster.node.pcie.bandwidth",
        "cluster.node.nicc",
        "cluster.node.nic",
        "cluster.spine_routing",
        "stragglers[0].slowdown",
    ]  # "nothing to run" (no workload, no model) is checked once the keys themselves are valid


def test_problems_are_not_repeated() -> None:
    """No problem is listed twice."""
    doc = two_tier_doc()
    doc["cluster"]["node"]["gpu"] = {"flops": "1GB"}
    doc["cluster"]["node"]["cpu"] = {"flops": "1GB"}
    found = problems(doc)
    assert len(found) == len(set(found)) == 2


def test_no_pydantic_jargon_reaches_the_user() -> None:
    """Messages carry no pydantic wording, error types or URLs."""
    doc = {
        "name": 5,
        "seed": "x",
        "cluster": {
            "racks": "x",
            "node": {"gpus": [], "gpu": {"flops": 1}, "pcie": 3, "nvlink": {"pairs": "x"}},
        },
        "stragglers": [3, {"random": 3}, {"links": 3}],
        "workload": 3,
    }
    text = rendered(doc)
    for jargon in (
        "Input should",
        "type=",
        "pydantic",
        "errors.pydantic.dev",
        "Field required",
        "Value error",
    ):
        assert jargon not in text


def test_key_paths_never_hold_tags_or_validator_labels() -> None:
    """No path shows a union tag, a class name or a ``function-after`` label."""
    docs = [
        with_cluster({"kind": "ring", "devices": 0, "link": {}}),
        with_cluster(custom_cluster(devices=[{"name": ""}], links=[{"src": 1}])),
        with_cluster(
            {"kind": "fully_connected", "devices": "x", "device": {"memory": "1s"}, "link": 1}
        ),
        {
            **two_tier_doc(),
            "stragglers": [{"random": {"slowdown": {"dist": "exponential", "scale": 0}}}],
        },
    ]
    for doc in docs:
        for problem in problems(doc):
            parts = problem.path.replace("[", ".[").split(".")
            assert not TAG_NAMES & set(parts), problem.path
            assert "function" not in problem.path and "Cluster" not in problem.path, problem.path


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text("xyz_09", max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _key_paths(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside ``doc``."""
    out = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _key_paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _key_paths(value, (*path, i))
    return out


@settings(max_examples=150, deadline=None)
@given(data=st.data(), value=JSON_VALUES)
def test_any_corruption_gives_a_scenario_error_or_a_scenario(
    data: st.DataObject, value: Any
) -> None:
    """Whatever value replaces whatever part of a valid document, the outcome is a
    :class:`Scenario` or a :class:`ScenarioError` whose paths hold no tags."""
    doc = copy.deepcopy(_FULL_DOC)
    where = data.draw(st.sampled_from(_key_paths(doc)[1:]))
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    try:
        assert isinstance(parse_scenario(doc), Scenario)
    except ScenarioError as exc:
        assert exc.problems
        for problem in exc.problems:
            parts = set(problem.path.replace("[", ".[").split("."))
            assert not TAG_NAMES & parts, problem.path
            assert "function" not in problem.path
            assert "Input should" not in problem.message


# ----------------------------------------------------------------------------- validate_model


class _Program(BaseModel):
    """A stand-in for a workload plugin's model."""

    model_config = ConfigDict(extra="forbid")
    steps: int = Field(gt=0)
    mode: str = "sync"

    @model_validator(mode="after")
    def _check(self) -> _Program:
        if self.mode == "bad":
            raise Invalid(Problem("mode", "bad mode", "sync, async"))
        return self


def test_validate_model_prefixes_paths_and_names_the_source() -> None:
    """Plugins validate their section with the same messages, under their own path."""
    with pytest.raises(ScenarioError) as info:
        validate_model(_Program, {"steps": 0, "mdoe": "x"}, "workload.program", "s.yaml")
    text = str(info.value)
    assert "s.yaml: workload.program.steps: must be greater than 0, got 0" in text
    assert (
        "s.yaml: workload.program.mdoe: unknown key; did you mean 'mode'? (allowed: steps, mode)"
        in text
    )


def test_validate_model_reports_invalid_from_validators() -> None:
    """:class:`Invalid` raised in a validator is reported at its path below the model."""
    with pytest.raises(ScenarioError) as info:
        validate_model(_Program, {"steps": 1, "mode": "bad"}, "workload.program")
    assert info.value.problems == [Problem("workload.program.mode", "bad mode", "sync, async")]


def test_validate_model_returns_the_model() -> None:
    """Valid data gives the model."""
    assert validate_model(_Program, {"steps": 3}).steps == 3


@pytest.mark.parametrize("doc", [None, [], "name: x", 3])
def test_parse_scenario_needs_a_mapping(doc: Any) -> None:
    """A document that is not a mapping is refused at the top level."""
    (problem,) = problems(doc)
    assert problem.path == "" and "must be a mapping" in problem.message


# ----------------------------------------------------------------------------- loading files


def test_duplicate_yaml_key_names_path_and_lines(tmp_path: Path) -> None:
    """A key given twice is an error (YAML would silently keep the last)."""
    text = TWO_TIER_YAML.replace(
        "    nic: {bandwidth: 100Gb/s, latency: 2us}\n",
        "    nic: {bandwidth: 100Gb/s}\n    nic: {bandwidth: 10Gb/s}\n",
    )
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert f"{path}: cluster.node.nic: duplicate key at line 13 (first at line 12)" in str(
        info.value
    )


def test_duplicate_keys_in_flow_mapping(tmp_path: Path) -> None:
    """Duplicates inside ``{...}`` are found too."""
    path = write(tmp_path, "name: x\ncluster: {racks: 1, racks: 2}\nworkload: {a: 1}\n")
    with pytest.raises(ScenarioError, match=r"cluster\.racks: duplicate key at line 2"):
        load_scenario(path)


def test_anchors_aliases_and_merge_keys_are_fine(tmp_path: Path) -> None:
    """Anchors, aliases and ``<<`` merges work (a merged key may be overridden)."""
    text = (
        "name: x\n"
        "cluster:\n"
        "  node:\n"
        "    pcie: &link {bandwidth: 16GB/s, latency: 1us}\n"
        "    nic: {<<: *link, bandwidth: 100Gb/s}\n"
        "workload: {a: 1}\n"
    )
    node = load_scenario(write(tmp_path, text)).cluster.node
    assert node.nic.bandwidth_Bps == 1.25e10 and node.nic.latency_s == pytest.approx(1e-6)


def test_merged_keys_overridden_deep_inside_are_not_duplicates(tmp_path: Path) -> None:
    """A merge whose anchor is itself built from a merge with an override is fine."""
    text = (
        "name: x\n"
        "defaults:\n"
        "  base: &base {bandwidth: 1GB/s, latency: 1us}\n"
        "  fast: &fast {<<: *base, bandwidth: 2GB/s}\n"
        "cluster:\n"
        "  node: {pcie: {<<: *fast, latency: 2us}, nic: *fast}\n"
        "workload: {a: 1}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, text))
    assert [p.path for p in info.value.problems] == ["defaults"]


def test_same_key_written_two_ways_is_a_duplicate(tmp_path: Path) -> None:
    """Keys are compared as values: ``1`` and ``01`` are the same integer key."""
    with pytest.raises(
        ScenarioError, match=r"workload\.1: duplicate key at line 4 \(first at line 3\)"
    ):
        load_scenario(write(tmp_path, "name: x\nworkload:\n  1: a\n  01: b\n"))


def test_non_utf8_file(tmp_path: Path) -> None:
    """A file that is not UTF-8 is refused, naming the file."""
    path = write(tmp_path, "name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(path) in str(info.value) and "not UTF-8 text" in str(info.value)


def test_utf8_with_byte_order_mark(tmp_path: Path) -> None:
    """A UTF-8 byte order mark is accepted."""
    path = write(tmp_path, "\ufeff".encode() + TWO_TIER_YAML.encode())
    assert load_scenario(path).name == "ps-vs-ring-4to1"


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    """An empty file is refused, naming the file."""
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError, match="empty") as info:
        load_scenario(path)
    assert info.value.source == str(path)


def test_missing_file(tmp_path: Path) -> None:
    """A missing file is a ScenarioError naming it."""
    path = tmp_path / "nope.yaml"
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}: <top level>: file not found"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    """A directory is not a scenario: refused before it is opened, saying what it is."""
    with pytest.raises(ScenarioError, match="is a folder, not a scenario file"):
        load_scenario(tmp_path)


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    """A YAML syntax error says where."""
    path = write(tmp_path, "name: x\ncluster: [\n  a: b: c\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert f"{path}: <top level>: invalid YAML at line 3, column 7" in str(info.value)


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just text\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    """A list or a scalar at the top is refused."""
    with pytest.raises(ScenarioError, match="a scenario must be a mapping"):
        load_scenario(write(tmp_path, text))


def test_several_documents_are_refused(tmp_path: Path) -> None:
    """One file, one scenario."""
    with pytest.raises(ScenarioError, match="single document"):
        load_scenario(write(tmp_path, "a: 1\n---\nb: 2\n"))


def test_python_tags_are_refused(tmp_path: Path) -> None:
    """Loading is safe: no Python objects from YAML tags."""
    with pytest.raises(ScenarioError, match="invalid YAML at line 1"):
        load_scenario(write(tmp_path, "name: !!python/object/apply:os.system [echo hi]\n"))


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    """A 'billion laughs' document is refused before it is expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    path = write(tmp_path, "\n".join(lines) + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioError, match="expands to more than"):
            load_scenario(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6  # bytes: the expansion (10^10 items) would need hundreds of GB


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    """A structure that contains itself is refused."""
    with pytest.raises(ScenarioError, match="recursive alias"):
        load_scenario(write(tmp_path, "a: &a [1, *a]\n"))


def test_validation_errors_name_the_file(tmp_path: Path) -> None:
    """Problems found after loading carry the file name."""
    path = write(tmp_path, TWO_TIER_YAML.replace("spines: 1", "spines: 0"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}: cluster.spines: must be at least 1, got 0"


# ----------------------------------------------------------------------------- JSON Schema


def test_schema_is_json_with_dialect_and_title() -> None:
    """The schema is plain JSON (no NaN or inf) and says its dialect."""
    schema = scenario_json_schema()
    json.dumps(schema, allow_nan=False)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "clustersim scenario"


def test_schema_uses_yaml_key_names() -> None:
    """Properties are named as in YAML; ``source`` is not one."""
    schema = scenario_json_schema()
    assert set(schema["properties"]) == {
        "name",
        "seed",
        "description",
        "cluster",
        "stragglers",
        "failures",
        "recovery",
        "checkpoint",
        "network",
        "engine",
        "model",
        "training",
        "data_parallel",
        "parallelism",
        "pipeline",
        "zero",
        "workload",
        "jobs",
    }
    link = schema["$defs"]["LinkSpec"]["properties"]
    assert set(link) == {"bandwidth", "latency"}
    assert schema["$defs"]["LinkSpec"]["additionalProperties"] is False


def test_schema_unit_fields_are_patterned_strings_with_examples() -> None:
    """Unit fields are strings matching a unit pattern, with examples."""
    bandwidth = scenario_json_schema()["$defs"]["LinkSpec"]["properties"]["bandwidth"]
    assert bandwidth["anyOf"][0]["type"] == "string" and "pattern" in bandwidth["anyOf"][0]
    assert "100Gb/s" in bandwidth["examples"]


def test_schema_workload_is_one_of_the_given_plugins() -> None:
    """With workload schemas, ``workload`` is exactly one of them, each with its key required."""
    program = {"type": "object", "properties": {"program": {"type": "array"}}}
    collective = {
        "type": "object",
        "properties": {"collective": {"type": "string"}, "bytes": {}},
        "required": ["bytes"],
    }
    schema = scenario_json_schema({"program": program, "collective": collective})
    alternatives = schema["properties"]["workload"]["oneOf"]
    assert [a["required"] for a in alternatives] == [["program"], ["collective", "bytes"]]
    assert alternatives[0]["properties"]["program"] == {"type": "array"}
    json.dumps(schema, allow_nan=False)


def test_schema_moves_plugin_definitions_to_the_top() -> None:
    """A plugin schema's ``$defs`` move to the top; clashing names are renamed."""
    plugin = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"link": {"$ref": "#/$defs/LinkSpec"}},
        "$defs": {"LinkSpec": {"type": "string"}},
    }
    schema = scenario_json_schema({"program": plugin})
    sub = schema["properties"]["workload"]["oneOf"][0]
    assert "$defs" not in sub and "$schema" not in sub
    ref = sub["properties"]["link"]["$ref"]
    assert ref == "#/$defs/program.LinkSpec"
    assert schema["$defs"]["program.LinkSpec"] == {"type": "string"}
    assert schema["$defs"]["LinkSpec"]["type"] == "object"


def test_schema_without_plugins_requires_a_nonempty_mapping() -> None:
    """Without workload schemas, ``workload`` is any non-empty mapping (or absent: training)."""
    workload = scenario_json_schema()["properties"]["workload"]
    mapping = next(alt for alt in workload["anyOf"] if alt.get("type") == "object")
    assert mapping["minProperties"] == 1


_FULL_DOC: dict[str, Any] = {
    "name": "full",
    "seed": 2,
    "cluster": {
        "racks": 2,
        "nodes_per_rack": 2,
        "node": {
            "gpus": 4,
            "gpu": {"flops": "312TFLOPS", "efficiency": 0.5},
            "cpu": {"memory": "1TB"},
            "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
            "nvlink": {"bandwidth": "300GB/s", "pairs": [[0, 1], [2, 3]]},
            "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
        },
        "rack_uplink": {"oversubscription": 2},
        "spines": 2,
        "spine_routing": "split",
    },
    "stragglers": [
        {"devices": "rack0/*", "slowdown": 1.5},
        {"random": {"fraction": 0.5, "slowdown": {"dist": "uniform", "low": 1, "high": 2}}},
        {"links": "*", "bandwidth_factor": 0.5, "start": "1ms", "end": "2ms"},
    ],
    "workload": {"program": [{"id": "a"}]},
}
"""A valid document using most of the format, for the corruption test."""


def test_full_document_is_valid() -> None:
    """The corruption test starts from a valid document."""
    assert parse_scenario(copy.deepcopy(_FULL_DOC)).cluster.spine_routing == "split"


def test_scenario_needs_a_workload_or_training() -> None:
    """A scenario without workload and without model/training says what to give."""
    doc = {"name": "x", "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "1GB/s"}}}
    with pytest.raises(ScenarioError, match="nothing to run"):
        parse_scenario(doc)


def test_training_needs_model_and_training() -> None:
    """A training scenario needs both model and training."""
    doc = {
        "name": "x",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "1GB/s"}},
        "model": {"preset": "resnet50"},
    }
    with pytest.raises(ScenarioError, match="training: required key missing"):
        parse_scenario(doc)


def test_workload_and_training_exclude_each_other() -> None:
    """Giving a workload and a model at once is an error at workload."""
    doc = {
        "name": "x",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "1GB/s"}},
        "model": {"preset": "resnet50"},
        "training": {"global_batch": 8},
        "workload": {"program": []},
    }
    with pytest.raises(ScenarioError, match="workload: a scenario runs either"):
        parse_scenario(doc)


def test_training_sections_parse_with_units() -> None:
    """model layers, training and data_parallel parse to SI numbers and defaults."""
    doc = {
        "name": "x",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "1GB/s"}},
        "model": {
            "layers": [
                {"name": "fc", "params": 1e6, "flops": "2MFLOP", "activations": "4KB", "repeat": 3}
            ]
        },
        "training": {"global_batch": 64, "optimizer": "adam"},
        "data_parallel": {"allreduce": {"bucket": "10MB", "overlap": False}},
    }
    s = parse_scenario(doc)
    assert s.model.layers[0].flops == 2e6 and s.model.layers[0].activations == 4e3
    assert s.training.iterations == 3 and s.training.precision == "fp32"
    assert s.data_parallel.sync == "allreduce" and s.data_parallel.allreduce.bucket == 1e7
    assert s.data_parallel.allreduce.overlap is False


TRICKY_YAML = [
    "a: &x {b: 1, c: [1.5e9, 0x10, 0o7, .inf, -.nan, ~, yes, 'no', 2024-01-02]}\nd: *x\n",
    "base: &b {x: 1, y: 2}\nmore:\n  <<: *b\n  y: 3\n",
    's: |\n  two\n  lines\nt: >\n  folded\n  text\nu: "esc\\tape \\u00e9"\n',
    "list:\n- [1, [2, [3, [4]]]]\n- {k: {k: {k: v}}}\n'quoted key': 1\n? complex\n: 2\n",
]


@pytest.mark.parametrize(
    "text",
    [
        *TRICKY_YAML,
        *(
            p.read_text()
            for p in sorted((Path(__file__).parents[1] / "scenarios").glob("**/*.yaml"))
        ),
    ],
    ids=lambda t: t.split("\n", 1)[0][:30],
)
def test_libyaml_and_pyyaml_build_the_same_document(text: str) -> None:
    """A well-formed document is composed by libyaml's parser (ten times faster), every other
    by PyYAML's own: both build the same values, types included (every shipped scenario and
    the YAML features a scenario may use: anchors, merge keys, number forms, block
    scalars, escapes, nested flow collections, complex keys)."""
    from clustersim.scenario import loader

    assert loader._FastLoader is not None, "PyYAML without libyaml: the fast path is off"
    fast, slow = loader._FastLoader(text), loader._Loader(text)
    try:
        got, want = loader._document(fast), loader._document(slow)
    finally:
        fast.dispose()
        slow.dispose()
    assert repr(got) == repr(want)  # repr: nan != nan, and 1 == 1.0 == True
    assert loader._load_yaml(text, "f.yaml") == got or "nan" in text


@pytest.mark.parametrize(
    "text",
    ["a: [1, 2\n", "a: 1\n---\nb: 2\n", "a: !!python/name:os.system x\n", "a: b: c\n"],
)
def test_a_document_libyaml_refuses_is_worded_by_pyyaml(text: str) -> None:
    """Errors keep PyYAML's wording (the line, column and words users have always seen):
    what libyaml cannot read is read again by PyYAML's composer, which says why."""
    from clustersim.scenario import loader

    slow = loader._Loader(text)
    with pytest.raises(yaml.YAMLError) as pyyaml:
        loader._document(slow)
    slow.dispose()
    with pytest.raises(ScenarioError) as ours:
        loader._load_yaml(text, "f.yaml")
    assert str(ours.value) == str(ScenarioError(loader._yaml_problem(pyyaml.value), "f.yaml"))
