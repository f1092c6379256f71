"""Hot keys: Zipf key sizes and access, hash / range / balanced sharding, the busiest server.

Expected values come from outside the code: Zipf's law ``i^-s`` summed by hand,
CRC-32 from :mod:`binascii` (the standard polynomial), and the NIC bound of a
server: in a sync round every worker pushes each key to its server and pulls it
back, so a server that moves ``b`` bytes per iteration through a full-duplex NIC
of ``B`` bytes/s needs at least ``b / 2B`` (pushes and pulls overlapped) and, when
it is the bottleneck, at most about ``b / B`` (one after the other).
"""

from __future__ import annotations

import binascii
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.errors import ScenarioError
from clustersim.model import Layer, Model
from clustersim.scenario import ParameterServerSpec, parse_scenario
from clustersim.strategies.parameter_server.layout import (
    busiest,
    make_blocks,
    shard,
    synthetic_blocks,
    zipf_sizes,
)

NIC = 10e9  # bytes/s
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "parameter_server"


def hot_doc(
    workers: int = 8, servers: int = 4, s: float = 0.5, sharding: str = "hash", keys: int = 64
) -> dict[str, Any]:
    """Sync PS on one-GPU nodes, NIC-bound: a 100M-parameter layer, ``keys`` Zipf keys."""
    return {
        "name": "hot",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": workers + servers,
            "node": {
                "gpus": 1,
                "gpu": {"flops": "100TFLOPS"},
                "cpu": {"memory_bandwidth": "10TB/s"},
                "pcie": {"bandwidth": "10TB/s"},
                "nic": {"bandwidth": f"{NIC / 1e9:g}GB/s"},
            },
        },
        "model": {"layers": [{"name": "fc", "params": 100e6, "flops": 1e6}]},
        "training": {"global_batch": workers, "iterations": 3},
        "data_parallel": {
            "sync": "ps",
            "ps": {
                "placement": "dedicated",
                "servers": servers,
                "key_distribution": {"zipf": s},
                "keys": keys,
                "sharding": sharding,
            },
        },
    }


def run(doc: dict[str, Any]) -> Any:
    return simulate(parse_scenario(doc)).summary


def by_hand(n: int, s: float, servers: int, owner: list[int]) -> list[float]:
    """Each server's share of the traffic, key i moving i^-s x i^-s (normalised away)."""
    traffic = [i ** (-2 * s) for i in range(1, n + 1)]
    load = [0.0] * servers
    for t, o in zip(traffic, owner, strict=True):
        load[o] += t
    return [x / sum(traffic) for x in load]


# ------------------------------------------------------------------ keys


@pytest.mark.parametrize("s", [0.0, 0.5, 1.0, 2.5])
def test_zipf_sizes_sum_to_the_model_and_follow_the_power_law(s: float) -> None:
    """Key i has i^-s of key 1's size; all keys sum to the model (rel 1e-12)."""
    sizes = zipf_sizes(1e8, 50, s)
    assert math.fsum(sizes) == pytest.approx(1e8, rel=1e-12)
    for i, size in enumerate(sizes, 1):
        assert size / sizes[0] == pytest.approx(i**-s, rel=1e-12)


def test_zipf_one_of_three_keys_by_hand() -> None:
    """s = 1, 3 keys, 11 params: 1 + 1/2 + 1/3 = 11/6, so sizes 6, 3, 2; access 1, 1/2, 1/3."""
    model = Model("m", (Layer("a", 11, 0, 0, 0),))
    blocks = synthetic_blocks(model, 3, 1.0)
    assert [b.params for b in blocks] == pytest.approx([6, 3, 2], rel=1e-12)
    assert [b.access for b in blocks] == pytest.approx([1, 1 / 2, 1 / 3], rel=1e-12)
    assert [b.name for b in blocks] == ["key1", "key2", "key3"]


def test_synthetic_keys_wait_for_the_first_layer_they_cover() -> None:
    """Uniform keys of 5 over layers of 10 and 10: key1, key2 in layer 0; key3, key4 in 1."""
    model = Model("m", (Layer("a", 10, 0, 0, 0), Layer("b", 10, 0, 0, 0)))
    assert [b.layer for b in synthetic_blocks(model, 4, 0.0)] == [0, 0, 1, 1]
    assert [b.layer for b in synthetic_blocks(model, 3, 0.0)] == [0, 0, 1]


def test_default_keys_are_the_layer_keys_size_balanced() -> None:
    """No key_distribution, no sharding: the layer keys (a layer above total / servers
    split) and the greedy LPT of before."""
    spec = ParameterServerSpec()
    model = Model("m", (Layer("big", 10, 0, 0, 0), Layer("a", 1, 0, 0, 0), Layer("b", 1, 0, 0, 0)))
    blocks = make_blocks(spec, model, 2)
    assert [(b.name, b.params, b.access) for b in blocks] == [
        ("big[0]", 5, 1),
        ("big[1]", 5, 1),
        ("a", 1, 1),
        ("b", 1, 1),
    ]
    assert shard(blocks, 2, spec.sharding) == [0, 1, 0, 1]


# ------------------------------------------------------------------ sharding by hand


def test_hash_sharding_is_crc32_of_the_key_name() -> None:
    """hash: server binascii.crc32(b"key<i>") mod k."""
    blocks = synthetic_blocks(Model("m", (Layer("a", 100, 0, 0, 0),)), 16, 1.0)
    want = [binascii.crc32(f"key{i}".encode()) % 4 for i in range(1, 17)]
    assert shard(blocks, 4, "hash") == want
    assert want[:4] == [0, 2, 0, 3]  # the values the shares below rely on


def test_range_sharding_is_contiguous_runs_of_equal_count() -> None:
    blocks = synthetic_blocks(Model("m", (Layer("a", 100, 0, 0, 0),)), 8, 1.0)
    assert shard(blocks, 4, "range") == [0, 0, 1, 1, 2, 2, 3, 3]
    assert shard(blocks, 3, "range") == [0, 0, 0, 1, 1, 1, 2, 2]


def test_balanced_sharding_weighs_keys_by_traffic() -> None:
    """s = 1, 4 keys: traffic 1, 1/4, 1/9, 1/16 (x size x access); LPT on 2 servers puts
    key1 alone, keys 2-4 together: shares 1 / 1.4236 = 0.7025 and 0.2975."""
    blocks = synthetic_blocks(Model("m", (Layer("a", 100, 0, 0, 0),)), 4, 1.0)
    owner = shard(blocks, 2, "balanced")
    assert owner == [0, 1, 1, 1]
    total = 1 + 1 / 4 + 1 / 9 + 1 / 16
    assert by_hand(4, 1.0, 2, owner) == pytest.approx([1 / total, 1 - 1 / total], rel=1e-12)


@pytest.mark.parametrize(
    ("sharding", "share"),
    [
        # 16 keys, s = 0.5, traffic 1/i, sum H16 = 3.380729; 4 servers.
        # range: keys 1-4 on the first server: (1 + 1/2 + 1/3 + 1/4) / H16
        ("range", (1 + 1 / 2 + 1 / 3 + 1 / 4) / 3.380728993228),
        # hash (crc32 mod 4 = 0 for keys 1, 3, 8, 14, 16)
        ("hash", (1 + 1 / 3 + 1 / 8 + 1 / 14 + 1 / 16) / 3.380728993228),
    ],
)
def test_busiest_share_by_hand_in_a_run(sharding: str, share: float) -> None:
    """The summary's busiest_server and busiest_server_share match the hand sums (rel 1e-9):
    every worker pushes and pulls every key once per iteration, so bytes go as traffic."""
    summary = run(hot_doc(s=0.5, keys=16, sharding=sharding))
    assert summary["busiest_server"] == "rack0/node8/cpu"  # the first server (index 0)
    assert summary["busiest_server_share"] == pytest.approx(share, rel=1e-9)


def test_busiest_is_the_first_of_equals() -> None:
    assert busiest({"a": 1.0, "b": 2.0, "c": 2.0}) == ("b", 0.4)
    assert busiest({"a": 0.0, "b": 0.0}) == ("a", 0.0)


# ------------------------------------------------------------------ the bound


@pytest.mark.parametrize("servers", [2, 4])
@pytest.mark.parametrize("s", [0.0, 0.5, 1.0])
def test_iteration_is_bounded_by_the_busiest_servers_bytes(s: float, servers: int) -> None:
    """b / 2B <= iteration <= 1.05 b / B, b = the busiest server's bytes per iteration."""
    for sharding in ("hash", "balanced"):
        summary = run(hot_doc(s=s, servers=servers, sharding=sharding))
        bytes_total = 8 * 2 * sum(k["bytes"] for k in summary["keys"])  # per iteration
        b = summary["busiest_server_share"] * bytes_total
        t = summary["iteration_time_s"]
        assert b / (2 * NIC) <= t <= 1.05 * b / NIC, (sharding, t, b / NIC)


@pytest.mark.parametrize("servers", [2, 3, 4])
@pytest.mark.parametrize("s", [0.0, 0.5, 0.8, 1.2])
def test_balanced_is_never_worse_than_hash(s: float, servers: int) -> None:
    """Balanced: busiest share and iteration time at most hash's (rel 1e-9)."""
    hashed = run(hot_doc(s=s, servers=servers, sharding="hash", keys=32))
    balanced = run(hot_doc(s=s, servers=servers, sharding="balanced", keys=32))
    assert balanced["busiest_server_share"] <= hashed["busiest_server_share"] * (1 + 1e-9)
    assert balanced["iteration_time_s"] <= hashed["iteration_time_s"] * (1 + 1e-9)


def test_the_example_shows_balanced_fixing_the_hot_server() -> None:
    """hot_keys.yaml: hash 40.3% of the bytes on one server, balanced about 25% and faster
    (the header's hand-derived shares, rel 1e-3)."""
    doc = yaml.safe_load((SCENARIO / "hot_keys.yaml").read_text())
    hashed = run(doc)
    assert hashed["busiest_server_share"] == pytest.approx(0.4032, rel=1e-3)
    doc["data_parallel"]["ps"]["sharding"] = "balanced"
    balanced = run(doc)
    assert balanced["busiest_server_share"] == pytest.approx(0.2517, rel=1e-3)
    assert balanced["iteration_time_s"] < 0.8 * hashed["iteration_time_s"]


def test_same_scenario_same_keys_and_shares() -> None:
    """Determinism: two runs give equal summaries."""
    assert run(hot_doc(s=0.7)) == run(hot_doc(s=0.7))


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("ps", "path"),
    [
        ({"sharding": "random"}, "data_parallel.ps.sharding"),
        ({"key_distribution": {"zipf": -1}}, "data_parallel.ps.key_distribution"),
        ({"key_distribution": {"zipf": 17}}, "data_parallel.ps.key_distribution"),
        ({"key_distribution": "zipf"}, "data_parallel.ps.key_distribution"),
        ({"key_distribution": "uniform", "keys": 0}, "data_parallel.ps.keys"),
        ({"keys": 8}, "data_parallel.ps.keys"),
    ],
)
def test_bad_input_names_the_key(ps: dict[str, Any], path: str) -> None:
    doc = hot_doc()
    doc["data_parallel"]["ps"] = {"placement": "dedicated", "servers": 2, **ps}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc)
    assert path in str(err.value)


def test_partitions_cut_the_bytes_a_push_carries_and_keep_the_access() -> None:
    """With partition_bytes, a Zipf key is cut on params x access x 4 bytes: s = 1, 3 keys
    of a 1.1M-parameter layer hold 600k, 300k, 200k params; they carry 2.4 MB, 0.6 MB and
    0.267 MB a push, so 1 MB partitions cut key1 in 3 (200k params each) and leave the rest."""
    doc = hot_doc(s=1.0, keys=3, servers=2)
    doc["model"]["layers"][0]["params"] = 1.1e6
    doc["data_parallel"]["ps"]["partition_bytes"] = "1MB"
    summary = run(doc)
    keys = [(k["name"], k["params"], k["bytes"]) for k in summary["keys"]]
    want = [
        ("key1:0", 2e5, 8e5),
        ("key1:1", 2e5, 8e5),
        ("key1:2", 2e5, 8e5),
        ("key2", 3e5, 6e5),
        ("key3", 2e5, 2e5 * 4 / 3),
    ]
    assert [k[0] for k in keys] == [w[0] for w in want]
    for got, expected in zip(keys, want, strict=True):
        assert got[1:] == pytest.approx(expected[1:], rel=1e-9)
