"""The hardware catalog (clustersim/hardware, docs/hardware.md): every preset loads and
validates, every number has its source (in the data file and in docs/hardware.md), presets
expand with deep-merge overrides wherever a device is accepted, unknown names are refused with
the key path and a hint, ``clustersim list gpus|nodes`` print them, and node presets build the
links their sources give.  Pricing by precision: tests/test_hardware_pricing.py; curves:
tests/test_hardware_curves.py."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import units
from clustersim.cli import main
from clustersim.hardware import GPUS, NODES, PRECISIONS, find
from clustersim.hardware.catalog import HERE, NAME
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

from .conftest import ROOT

DOC = (ROOT / "docs" / "hardware.md").read_text(encoding="utf-8")
REFERENCES = yaml.safe_load((HERE / "references.yaml").read_text(encoding="utf-8"))


def collective(node: dict[str, Any], nodes: int = 2) -> dict[str, Any]:
    """A two-tier scenario of ``nodes`` nodes (one rack) running one small all-reduce."""
    return {
        "name": "catalog",
        "cluster": {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": node},
        "workload": {"collective": "allreduce", "bytes": "1MB"},
    }


def flat(device: dict[str, Any], precision: str | None = None) -> dict[str, Any]:
    """A switch of 2 devices, training a small layer list at ``precision`` (none: a collective)."""
    doc: dict[str, Any] = {
        "name": "flat",
        "cluster": {
            "kind": "switch",
            "devices": 2,
            "device": device,
            "link": {"bandwidth": "100GB/s", "latency": "1us"},
        },
    }
    if precision is None:
        doc["workload"] = {"collective": "allreduce", "bytes": "1MB"}
    else:
        doc["model"] = {"layers": [{"name": "l", "params": 1e6, "flops": 1e12, "repeat": 4}]}
        doc["training"] = {"global_batch": 8, "iterations": 1, "precision": precision}
    return doc


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- the files


def test_the_catalog_has_the_gpus_and_nodes_of_the_issue() -> None:
    """At least the GPUs and node kinds issue 28 names, each findable by its short alias."""
    for name in (
        "v100-sxm2-32gb",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h100-pcie",
        "h200-sxm-141gb",
        "b200",
        "mi250x",
        "mi300x",
    ):
        assert name in GPUS
    for name in ("dgx-1-v100", "dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72"):
        assert name in NODES
    assert "mi300x-platform" in NODES
    assert GPUS.get("h100-sxm") is GPUS.get("h100-sxm5-80gb")
    assert all(NAME.match(n) for n in [*GPUS.names(), *NODES.names(), *GPUS.aliases()])


@pytest.mark.parametrize("name", sorted(GPUS.names()))
def test_every_gpu_preset_validates_at_each_of_its_precisions(name: str) -> None:
    """Each GPU validates in a flat cluster and is priced at exactly its peak of every
    precision it lists (and at its 16-bit peak in a scenario without training)."""
    preset = GPUS.get(name)
    peaks = preset.spec["peaks"]
    assert set(peaks) <= set(PRECISIONS) and ("bf16" in peaks or "fp16" in peaks)
    for precision in peaks:
        device = parse_scenario(flat({"preset": name}, precision)).cluster.device
        assert device.flops_per_s == units.parse_flop_rate(peaks[precision])
        assert device.efficiency == preset.spec["efficiency"]
        assert device.memory_bytes == units.parse_size(preset.spec["memory"])
        assert device.compute.curve is not None
    workload = parse_scenario(flat({"preset": name})).cluster.device
    assert workload.flops_per_s == units.parse_flop_rate(peaks.get("bf16", peaks.get("fp16")))


@pytest.mark.parametrize("name", sorted(NODES.names()))
def test_every_node_preset_builds(name: str) -> None:
    """Each node kind validates and builds (GB200 NVL72: a rack of its 18-tray domain)."""
    preset = NODES.get(name)
    domain = preset.spec.get("nvlink_domain", 1)
    scenario = parse_scenario(collective({"preset": name}, nodes=max(domain, 2)))
    node = scenario.cluster.node
    assert node.preset == name and node.gpu.preset == preset.spec["gpu"]["preset"]
    topology = build_topology(scenario.cluster)
    gpus = [d for d in topology.devices.values() if d.kind == "gpu"]
    assert len(gpus) == node.gpus * max(domain, 2)


def _presets() -> list[Any]:
    return [
        pytest.param(p, id=p.name) for p in [*GPUS.entries().values(), *NODES.entries().values()]
    ]


@pytest.mark.parametrize("preset", _presets())
def test_every_number_has_a_source_in_the_file_and_in_the_docs(preset: Any) -> None:
    """No value of a built-in file lacks a source; every source is a reference; and
    docs/hardware.md's section of the preset has a row with each value and its source."""
    assert preset.unsourced == ()
    assert set(preset.sources.values()) <= set(REFERENCES)
    section = _doc_section(preset.name)
    raw = yaml.safe_load((ROOT / preset.file).read_text(encoding="utf-8"))
    for path, source in preset.sources.items():
        value = _raw_value(raw, path)
        text = _shown(value)
        rows = [line for line in section if text in line and f"`{source}`" in line]
        assert rows, f"{preset.name}: no row of docs/hardware.md shows {path} = {text} ({source})"


def _doc_section(name: str) -> list[str]:
    """The lines of docs/hardware.md under the heading naming ``name`` (to the next heading)."""
    lines = DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and f"`{name}`" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def _raw_value(raw: dict[str, Any], path: str) -> Any:
    node: Any = raw
    for part in path.split("."):
        node = node[part]
    return node["value"]


def _shown(value: Any) -> str:
    """How docs/hardware.md writes a value: as in the file (pairs: their count)."""
    if isinstance(value, list):
        return f"{len(value)} pairs"
    return str(value)


def test_every_reference_is_cited_and_listed_in_the_docs() -> None:
    """references.yaml holds only cited sources, and docs/hardware.md lists each one."""
    cited = {s for p in _presets() for s in p.values[0].sources.values()}
    assert cited == set(REFERENCES)
    for source in REFERENCES:
        assert re.search(rf"^\| `{re.escape(source)}` \|", DOC, re.M), source


def test_node_links_agree_with_their_gpus() -> None:
    """A node's GPU-to-GPU bandwidth per GPU is its GPU's, per direction: the NVSwitch
    bandwidth, or the sum over a GPU's links of a mesh (V100: 6 x 25 GB/s; MI300X: 7 x 64)."""
    for preset in NODES.entries().values():
        gpu = GPUS.get(preset.spec["gpu"]["preset"])
        per_gpu = units.parse_bandwidth(next(iter(gpu.interconnect.values())))
        nvlink = preset.spec["nvlink"]
        link = units.parse_bandwidth(nvlink["bandwidth"])
        if "pairs" not in nvlink:
            assert link == per_gpu, preset.name
            continue
        links = [0] * preset.spec["gpus"]
        for a, b, *n in nvlink["pairs"]:
            links[a] += n[0] if n else 1
            links[b] += n[0] if n else 1
        assert {count * link for count in links} == {per_gpu}, preset.name


# --------------------------------------------------------------------------- overrides


def test_keys_beside_a_node_preset_override_it_deeply() -> None:
    """``nic: {bandwidth}`` beside the preset keeps the preset's NIC latency; ``gpu:
    {memory}`` keeps the rest of the GPU; ``nvlink: null`` removes the NVSwitch."""
    node = {"preset": "dgx-h100", "nic": {"bandwidth": "200Gb/s"}, "gpu": {"memory": "94GB"}}
    spec = parse_scenario(collective(node)).cluster.node
    assert spec.nic.bandwidth_Bps == 25e9 and spec.nic.latency_s == 2e-6
    assert spec.nics == 8 and spec.gpus == 8 and spec.nvlink.bandwidth_Bps == 450e9
    assert spec.gpu.memory_bytes == 94e9 and spec.gpu.memory_bandwidth_Bps == 3.35e12
    assert spec.gpu.peaks["bf16"] == 989e12
    assert parse_scenario(collective({**node, "nvlink": None})).cluster.node.nvlink is None


def test_a_gpu_preset_beside_a_node_preset_replaces_the_gpu() -> None:
    """``node: {preset: dgx-h100, gpu: {preset: h200}}`` has H200s: none of the H100's values
    stay behind."""
    node = {"preset": "dgx-h100", "gpu": {"preset": "h200"}}
    gpu = parse_scenario(collective(node)).cluster.node.gpu
    assert gpu.preset == "h200-sxm-141gb"
    assert (gpu.memory_bytes, gpu.memory_bandwidth_Bps) == (141e9, 4.8e12)


def test_the_preset_key_works_wherever_a_device_is_accepted() -> None:
    """A flat cluster's ``device``, a custom cluster's ``devices`` and a node's ``gpu`` take
    the same preset, with the same values, and keys beside it."""
    custom = {
        "name": "custom",
        "cluster": {
            "kind": "custom",
            "devices": [
                {"name": "a", "preset": "mi300x"},
                {"name": "b", "preset": "mi300x", "memory": "96GB"},
            ],
            "links": [{"src": "a", "dst": "b", "bandwidth": "64GB/s"}],
        },
        "workload": {"collective": "allreduce", "bytes": "1MB"},
    }
    a, b = parse_scenario(custom).cluster.devices
    device = parse_scenario(flat({"preset": "mi300x"})).cluster.device
    node = parse_scenario(collective({"preset": "mi300x-platform", "cpu": {"preset": "mi300x"}}))
    gpu, cpu = node.cluster.node.gpu, node.cluster.node.cpu
    assert a.flops_per_s == device.flops_per_s == gpu.flops_per_s == cpu.flops_per_s == 1307.4e12
    assert (a.name, a.memory_bytes, b.memory_bytes) == ("a", 192e9, 96e9)


def test_a_users_own_files_relative_to_the_scenario(tmp_path: Path) -> None:
    """``preset: ./my_gpu.yaml`` reads a GPU in the catalog format (sources optional) from
    beside the scenario file; a node file's GPU file is relative to the node file."""
    (tmp_path / "hw").mkdir()
    gpu = {
        "kind": "gpu",
        "name": "my-gpu",
        "spec": {"peaks": {"bf16": "500TFLOPS"}, "memory": "48GB", "memory_bandwidth": "1TB/s"},
    }
    (tmp_path / "hw" / "my_gpu.yaml").write_text(yaml.safe_dump(gpu))
    node = copy.deepcopy(NODES.get("dgx-h100").spec)
    node["gpu"] = {"preset": "./my_gpu.yaml"}
    (tmp_path / "hw" / "my_node.yaml").write_text(yaml.safe_dump({"kind": "node", "spec": node}))
    doc = flat({"preset": "./hw/my_gpu.yaml"}, "bf16")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    from clustersim.scenario import load_scenario

    device = load_scenario(tmp_path / "s.yaml").cluster.device
    assert (device.preset, device.flops_per_s, device.memory_bytes) == ("my-gpu", 5e14, 48e9)
    (tmp_path / "n.yaml").write_text(yaml.safe_dump(collective({"preset": "hw/my_node.yaml"})))
    node_spec = load_scenario(tmp_path / "n.yaml").cluster.node
    assert node_spec.preset == "my_node" and node_spec.gpu.memory_bytes == 48e9


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("where", "name", "hint"),
    [
        ("gpu", "h100-sxm6", "did you mean 'h100-sxm'?"),
        ("node", "dgx-h1000", "did you mean 'dgx-h100'?"),
    ],
)
def test_an_unknown_preset_exits_2_with_the_key_path_and_a_hint(
    where: str, name: str, hint: str, tmp_path: Path, capsys
) -> None:
    """``clustersim validate`` of an unknown GPU or node preset: exit 2, one line naming the
    file, ``cluster.node[.gpu].preset``, the hint and the names allowed."""
    node = {"preset": name} if where == "node" else {"preset": "dgx-h100", "gpu": {"preset": name}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(collective(node)))
    code, _, err = _cli(["validate", str(path)], capsys)
    key = "cluster.node.preset" if where == "node" else "cluster.node.gpu.preset"
    assert code == 2 and f"{path}: {key}: unknown" in err and hint in err
    assert "(clustersim list " in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("kind: node\nspec: {}\n", "kind is 'node'"),
        ("kind: gpu\nspec: {memory: 1GB}\nwhat: 1\n", "unknown key 'what'"),
        ("kind: gpu\nspec: {memory: {value: 1GB, source: nowhere}}\n", "'nowhere' is not among"),
        ("[1, 2", "not YAML"),
        ("kind: gpu\naliases: 5\nspec: {}\n", "aliases a list"),
        (
            "kind: gpu\nspec: {peaks: {bf16: 1TFLOPS}, compute: {curves: {bf16: {mamf: x}}}}\n",
            "a curve is",
        ),
    ],
)
def test_a_bad_preset_file_is_refused_naming_it(
    content: str | None, message: str, tmp_path: Path, capsys
) -> None:
    """A missing file, a node file as a GPU, an unknown key, an unknown source, bad YAML:
    exit 2 at the preset's key path, naming the file."""
    if content is not None:
        (tmp_path / "mine.yaml").write_text(content)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(flat({"preset": "./mine.yaml"})))
    code, _, err = _cli(["validate", str(path)], capsys)
    assert code == 2 and "cluster.device.preset: " in err and "mine.yaml" in err
    assert message in err


def test_peaks_and_curves_take_only_the_precisions(tmp_path: Path, capsys) -> None:
    """A peak or a curve of an unknown precision exits 2 at its key, naming the five."""
    device = {"preset": "h100", "peaks": {"fp4": "9PFLOPS"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(flat(device)))
    code, _, err = _cli(["validate", str(path)], capsys)
    assert code == 2
    assert (
        "cluster.device.peaks.fp4: unknown key 'fp4' (allowed: fp32, tf32, fp16, bf16 or fp8)"
        in err
    )


def test_find_refuses_what_is_not_a_name() -> None:
    """A preset that is not text is not looked up."""
    from clustersim.errors import ScenarioError

    with pytest.raises(ScenarioError, match="unknown GPU preset 5"):
        find(5, "gpu")


# --------------------------------------------------------------------------- listing


def test_list_gpus_and_nodes_print_one_line_each_with_the_key_numbers(capsys) -> None:
    """``clustersim list gpus``: one line per GPU with its dense peaks, memory, bandwidth and
    link per direction; ``clustersim list nodes``: GPUs, links, NICs, PCIe."""
    code, out, _ = _cli(["list", "gpus"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(GPUS)
    h100 = next(line for line in lines if line.startswith("h100-sxm5-80gb "))
    for text in ("bf16 989", "fp8 1979", "tf32 494.5", "80 GB at 3.35 TB/s", "NVLink 450 GB/s"):
        assert text in h100
    code, out, _ = _cli(["list", "nodes"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(NODES)
    dgx = next(line for line in lines if line.startswith("dgx-h100 "))
    assert "8 x h100-sxm5-80gb, NVSwitch 450 GB/s per direction, 8 x 400 Gb/s NICs" in dgx
    dgx1 = next(line for line in lines if line.startswith("dgx-1-v100 "))
    assert "16 GPU pairs, 24 links of 25 GB/s" in dgx1
    p4d = next(line for line in lines if line.startswith("aws-p4d "))
    assert "4 x 100 Gb/s NICs (75 us plugin latency)" in p4d
    assert "plugin latency" not in dgx


# --------------------------------------------------------------------------- links


def test_an_aws_p4d_builds_4_efa_nics_of_100_gbps_each_behind_2_gpus() -> None:
    """Two p4d.24xlarge: per node 4 NIC <-> ToR cables at 12.5 GB/s each way, NIC k on the
    PCIe switch of GPUs 2k and 2k+1 (aws-ofi-nccl's topology file), A100 40GB GPUs, and the
    EFA plugin's 75 us on the topology (NCCL's latencyInter)."""
    topology = build_topology(parse_scenario(collective({"preset": "p4d-24xlarge"})).cluster)
    tor = [link for link in topology.links if link.dst.endswith("/tor")]
    assert len(tor) == 8 and {link.bandwidth_Bps for link in tor} == {12.5e9}
    assert topology.nic_plugin_latency_s == pytest.approx(75e-6)
    node = "rack0/node0"
    assert [topology.nic_of(f"{node}/gpu{i}") for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert topology.device(f"{node}/gpu0").memory_bytes == pytest.approx(40e9, rel=0.1)


def test_a_dgx_h100_builds_8_nics_of_400_gbps_and_450_gbps_nvswitch_links() -> None:
    """Two DGX H100 nodes: per node 8 NIC <-> ToR cables at 50 GB/s each way, 8 GPU <->
    NVSwitch cables at 450 GB/s each way, PCIe at 64 GB/s."""
    topology = build_topology(parse_scenario(collective({"preset": "dgx-h100"})).cluster)
    by_end: dict[str, set[float]] = {}
    for link in topology.links:
        for end in (link.src, link.dst):
            kind = re.sub(r"\d+", "", end.rsplit("/", 1)[-1])
            by_end.setdefault(kind, set()).add(link.bandwidth_Bps)
    tor = [link for link in topology.links if link.dst.endswith("/tor")]
    nvswitch = [link for link in topology.links if link.dst.endswith("/nvswitch")]
    assert len(tor) == 16 and {link.bandwidth_Bps for link in tor} == {50e9}
    assert len(nvswitch) == 16 and {link.bandwidth_Bps for link in nvswitch} == {450e9}
    assert by_end["pcie"] == {64e9}


def test_a_dgx1_has_the_hybrid_cube_mesh_with_doubled_links() -> None:
    """DGX-1: 16 GPU pairs, the doubled ones at 50 GB/s, the others at 25 GB/s per direction
    (GPUInspector.jl's measured 45 and 22.5 GB/s); 6 links, 150 GB/s, per GPU."""
    topology = build_topology(parse_scenario(collective({"preset": "dgx-1"})).cluster)
    pairs = {
        (link.src.rsplit("/", 1)[1], link.dst.rsplit("/", 1)[1]): link.bandwidth_Bps
        for link in topology.links
        if "/gpu" in link.src and "/gpu" in link.dst and "node0/" in link.src
    }
    assert len(pairs) == 32
    assert pairs[("gpu0", "gpu2")] == pairs[("gpu2", "gpu0")] == 50e9
    assert pairs[("gpu0", "gpu1")] == 25e9 and ("gpu0", "gpu5") not in pairs
    for g in range(8):
        assert sum(bw for (a, _), bw in pairs.items() if a == f"gpu{g}") == 150e9
