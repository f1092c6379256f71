"""``clustersim import astra-sim``: ASTRA-sim's network YAML, system JSON and Chakra workload
as a clustersim scenario, what maps held to hand counts and alpha-beta formulas, what does
not map said.

Inputs in tests/data/astra_sim/ are written from ASTRA-sim's documented examples (each
file names its source).  ASTRA-sim's units: GB/s per link and direction, ns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import clustersim
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.importers.astra_sim import scenario_from_astra_sim
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

DATA = Path(__file__).parent / "data" / "astra_sim"
SYSTEM = DATA / "system.json"


def network(tmp_path: Path, kinds: list[str], npus: list[int], gbps: list[float], ns: list[float]) -> Path:  # fmt: skip
    path = tmp_path / "net.yml"
    path.write_text(
        yaml.safe_dump({"topology": kinds, "npus_count": npus, "bandwidth": gbps, "latency": ns})
    )
    return path


def imported(net: Path, system: Path = SYSTEM, workload: str | None = None) -> dict:
    return scenario_from_astra_sim(net, system, workload).document


@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("gbps", [25.0, 50.0, 200.0])
def test_a_ring_dimension_runs_the_ring_alpha_beta(tmp_path: Path, n: int, gbps: float) -> None:
    """One Ring dimension with ``ring`` all-reduces: a flat ring; the placeholder all-reduce
    of 1 GiB takes 2(n-1)(alpha + S/(nB)) exactly (protocol none, one channel)."""
    doc = imported(network(tmp_path, ["Ring"], [n], [gbps], [500.0]))
    assert doc["cluster"]["kind"] == "ring" and doc["cluster"]["devices"] == n
    assert doc["workload"]["algorithm"] == "ring"
    time = clustersim.simulate(parse_scenario(doc)).summary["time_s"]
    size = 2.0**30
    assert time == pytest.approx(2 * (n - 1) * (500e-9 + size / n / (gbps * 1e9)), rel=1e-9)


@pytest.mark.parametrize(
    ("kind", "flat", "links"),
    [("Switch", "switch", 2 * 8), ("FullyConnected", "fully_connected", 8 * 7), ("Ring", "ring", 2 * 8)],
)  # fmt: skip
def test_one_dimension_is_the_flat_cluster_of_its_shape(
    tmp_path: Path, kind: str, flat: str, links: int
) -> None:
    doc = imported(network(tmp_path, [kind], [8], [100.0], [50.0]))
    assert doc["cluster"] == {
        "kind": flat,
        "devices": 8,
        "link": {"bandwidth": "100GB/s", "latency": "50ns"},
    }
    topo = build_topology(parse_scenario(doc).cluster)
    assert len(topo.links) == links


def test_the_documented_2d_example_wires_each_dimension(tmp_path: Path) -> None:
    """Ring(4) x Switch(2) (ASTRA-sim's tutorial): NPU i is at (i mod 4, i div 4); two rings
    of 4 (4 cables each) and four switches joining i and i + 4 (2 cables each): 16 cables,
    32 directed links; npu0 reaches npu4 through d1sw0 (2 x 2500 ns) and npu1 over the ring
    (500 ns, 50 GB/s)."""
    doc = imported(DATA / "Ring_Switch.yml")
    topo = build_topology(parse_scenario(doc).cluster)
    assert len(topo.devices) == 8 and len(topo.links) == 32
    assert doc["cluster"]["switches"] == ["d1sw0", "d1sw1", "d1sw2", "d1sw3"]
    across = topo.route("npu0", "npu4")
    assert [link.dst for link in across.links] == ["d1sw0", "npu4"]
    assert across.latency_s == pytest.approx(5000e-9) and across.bottleneck_Bps == 10e9
    ring = topo.route("npu0", "npu1")
    assert ring.latency_s == pytest.approx(500e-9) and ring.bottleneck_Bps == 50e9


def test_the_documented_3d_example_counts_its_cables() -> None:
    """Ring(2) x FullyConnected(8) x Switch(4), 64 NPUs (ASTRA-sim's analytical example):
    32 rings of 2 are one cable each, 8 fully connected groups of 8 have 28 cables each, 16
    switches of 4 NPUs 4 cables each: 32 + 224 + 64 = 320 cables, 640 directed links."""
    doc = imported(DATA / "Ring_FullyConnected_Switch.yml")
    topo = build_topology(parse_scenario(doc).cluster)
    assert len(topo.devices) == 64 and len(topo.links) == 640
    assert len(doc["cluster"]["switches"]) == 16


def test_what_does_not_map_is_said_not_guessed(tmp_path: Path, capsys) -> None:
    """Several dimensions: ASTRA-sim's dimension-by-dimension collectives do not map, so
    ``auto`` is written and the header and the output say why; every system knob is named."""
    out = tmp_path / "s.yaml"
    args = ["import", "astra-sim", "--network", str(DATA / "Ring_Switch.yml")]
    assert main([*args, "--system", str(SYSTEM), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    for word in ("dimension by dimension", "scheduling-policy", "endpoint-delay", "boost-mode"):
        assert word in printed and word in text
    assert yaml.safe_load(text)["workload"]["algorithm"] == "auto"
    assert "not mapped  no workload given" in printed


def test_the_workload_prefix_becomes_a_trace_per_rank(tmp_path: Path, capsys) -> None:
    """--workload PREFIX with PREFIX.{i}.et for the 8 NPUs: ``trace: PREFIX.%d.et``; the
    scenario runs, rank i replaying its own trace (compute 1 ms, then an all-reduce)."""
    from clustersim.workload_trace.chakra_et import encode_stream
    from clustersim.workload_trace.et_schema import messages

    et = messages()
    attrs = [
        et.AttributeProto(name="comm_type", int64_val=0),
        et.AttributeProto(name="comm_size", int64_val=1 << 20),
    ]
    nodes = [
        et.Node(id=1, name="gemm", type="COMP_NODE", duration_micros=1000),
        et.Node(id=2, name="ar", type="COMM_COLL_NODE", data_deps=[1], attr=attrs),
    ]
    for rank in range(8):
        stream = encode_stream([et.GlobalMetadata(version="0.0.4"), *nodes])
        (tmp_path / f"workload.{rank}.et").write_bytes(stream)
    out = tmp_path / "s.yaml"
    net, prefix = DATA / "Ring_Switch.yml", str(tmp_path / "workload")
    argv = ["import", "astra-sim", "--network", str(net), "--system", str(SYSTEM)]
    assert main([*argv, "--workload", prefix, "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["workload"]["trace"] == prefix + ".%d.et"
    result = clustersim.simulate(out)
    part = result.typed_summary.strategy
    assert part.traces == 8 and part.ranks == 8
    assert result.summary["makespan_s"] > 1e-3


@pytest.mark.parametrize(
    ("net", "system", "message"),
    [
        ({"topology": ["Torus"], "npus_count": [4], "bandwidth": [1.0], "latency": [1.0]}, {}, "unknown topology 'Torus'"),
        ({"topology": ["Ring"], "npus_count": [4, 2], "bandwidth": [1.0], "latency": [1.0]}, {}, "lists of different lengths"),
        ({"topology": ["Ring"], "npus_count": [4], "bandwidth": [-1.0], "latency": [1.0]}, {}, "bandwidth -1.0"),
        ({"topology": ["Ring"], "npus_count": [4], "latency": [1.0]}, {}, "--network: bandwidth"),
        ({"topology": ["Ring"], "npus_count": [4], "bandwidth": [1.0], "latency": [1.0]}, {"all-reduce-implementation": "ring"}, "must be a list"),
    ],
    ids=["topology", "lengths", "bandwidth", "missing", "algorithms"],
)  # fmt: skip
def test_bad_inputs_exit_2_naming_the_file_and_key(
    tmp_path: Path, net: dict, system: dict, message: str, capsys
) -> None:
    (tmp_path / "n.yml").write_text(yaml.safe_dump(net))
    (tmp_path / "s.json").write_text(json.dumps(system))
    argv = ["import", "astra-sim", "--network", str(tmp_path / "n.yml")]
    out = tmp_path / "out.yaml"
    assert main([*argv, "--system", str(tmp_path / "s.json"), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_missing_workload_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"--workload.*no trace .*nothing\.0\.et"):
        scenario_from_astra_sim(DATA / "Ring_Switch.yml", SYSTEM, str(tmp_path / "nothing"))
