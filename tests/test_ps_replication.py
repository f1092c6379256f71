"""Chain replication and failover of parameter servers
(clustersim.strategies.parameter_server.replication).

Clusters as in tests/test_parameter_server.py: one GPU per node, a PCIe far faster than
the NIC (NIC bytes/s bound every transfer), CPU servers of memory bandwidth MEM, dedicated
servers on the last nodes.  One layer of ``servers x P`` parameters is cut into one key of
``P`` per server (4P bytes, fp32).  Replication tests give the NIC a latency; failover
tests give the CPUs a memory bandwidth so high that server work is negligible, so the
times are transfers alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.api import prepare
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from tests.test_parameter_server import MEM, NIC, layer, ps_doc, run

from . import shared_runs

SGD_BYTES_PER_PARAM = 12


def replicated_doc(servers: int, workers: int, params: float, **ps: Any) -> dict[str, Any]:
    """``workers`` workers, ``servers`` dedicated servers, one key of ``params`` each."""
    return ps_doc(
        servers + workers,
        [layer("w", servers * params)],
        batch=workers,
        placement="dedicated",
        servers=servers,
        **ps,
    )


def server_route_latency(doc: dict[str, Any]) -> float:
    """Latency of the route between two server CPUs (every pair is alike)."""
    prepared = prepare(parse_scenario(doc))
    a, b = prepared.strategy.servers[:2]
    return prepared.topology.routes(a, b)[0].latency_s


# --------------------------------------------------------------------------- replication


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("params", [1e5, 1e6])
@pytest.mark.parametrize("nic", ["10GB/s", "25GB/s"])
def test_each_chain_hop_adds_a_forward_and_an_update_to_a_sync_round(
    replicas: int, params: float, nic: str
) -> None:
    """Every server forwards its key (4P bytes) to its successor and receives its
    predecessor's over the other direction of its NIC: an uncongested hop of 4P / NIC +
    route latency, then the replica's update 12 P / MEM.  The round closes when the tail
    has it: T(r) - T(1) = (r - 1) x (4P / NIC + latency + 12 P / MEM)."""
    bandwidth = {"10GB/s": 10e9, "25GB/s": 25e9}[nic]

    def doc(r: int) -> dict[str, Any]:
        d = replicated_doc(3, 2, params, replicas=r, iterations=3)
        d["cluster"]["node"]["nic"] = {"bandwidth": nic, "latency": "5us"}
        return d

    base, replicated = run(doc(1)), run(doc(replicas))
    hop = 4 * params / bandwidth + server_route_latency(doc(1)) + SGD_BYTES_PER_PARAM * params / MEM
    assert replicated["iteration_time_s"] - base["iteration_time_s"] == pytest.approx(
        (replicas - 1) * hop, rel=1e-9
    )
    model_bytes = 3 * 4 * params
    assert replicated["replication_bytes"] == pytest.approx((replicas - 1) * model_bytes * 3)
    assert replicated["replicas"] == replicas
    assert replicated["failovers"] == 0 and replicated["failover_lost_s"] == 0.0


def test_replicas_one_leaves_the_summary_unchanged() -> None:
    """``replicas: 1`` is the default: the same summary, no replication keys, no
    replicate records."""
    doc = replicated_doc(2, 2, 1e6, iterations=2)
    plain = simulate(parse_scenario(doc))
    doc["data_parallel"]["ps"].update(replicas=1, failover_timeout="3s")
    explicit = simulate(parse_scenario(doc))
    assert explicit.summary_json() == plain.summary_json()
    assert "replicas" not in plain.summary and "failover_lost_s" not in plain.summary
    assert not [r for r in explicit.records if r.op in ("replicate", "ps_replica_update")]


def test_replicate_records_one_per_hop_per_update() -> None:
    """Each round each key crosses r - 1 hops: a transfer record of op ``replicate`` and a
    compute record of op ``ps_replica_update`` on the receiving server per hop."""
    servers, rounds, replicas = 3, 2, 3
    result = simulate(
        parse_scenario(replicated_doc(servers, 2, 1e5, replicas=replicas, iterations=rounds))
    )
    hops = [r for r in result.records if r.op == "replicate"]
    updates = [r for r in result.records if r.op == "ps_replica_update"]
    assert len(hops) == len(updates) == servers * rounds * (replicas - 1)
    assert all(r.kind == "transfer" and r.bytes == 4e5 for r in hops)


@pytest.mark.parametrize("mode", ["async", "ssp", "geo"])
def test_async_modes_replicate_every_applied_push(mode: str) -> None:
    """Async modes replicate each applied push: (r - 1) x model bytes per whole-model push,
    ``pushes_per_worker`` of them per worker."""
    doc = replicated_doc(2, 3, 1e5, replicas=2, iterations=4, mode=mode)
    s = run(doc)
    pushes = sum(s["pushes_per_worker"].values())
    assert s["replication_bytes"] == pytest.approx(pushes * 2 * 4e5)
    assert s["replication_bytes"] > 0


# --------------------------------------------------------------------------- failover

FAST = "1e9GB/s"
"""A CPU memory bandwidth that makes server work negligible: 1e-11 s a round."""
REL = 1e-6
"""Tolerance of the failover times: the server work left (1e-11 s against 1e-3 s)."""


def failover_doc(at: str, timeout: str, device: str, iterations: int = 4) -> dict[str, Any]:
    """2 workers, 2 dedicated servers (rack0/node2/cpu holds w[0], node3/cpu w[1]) of one
    key of P = 5e5 (S = 2 MB) each, replicas 2; ``device`` fails at ``at``."""
    doc = replicated_doc(2, 2, 5e5, replicas=2, failover_timeout=timeout, iterations=iterations)
    doc["cluster"]["node"]["cpu"] = {"memory_bandwidth": FAST}
    doc["failures"] = [{"devices": device, "at": at}]
    return doc


S = 2e6  # bytes of one key


@pytest.mark.parametrize("device", ["rack0/node2/cpu", "rack0/node3/cpu"])
@pytest.mark.parametrize("at_ms", [0.1, 0.5])
@pytest.mark.parametrize("timeout_ms", [1.0, 3.0])
def test_a_server_failure_costs_the_timeout_and_the_re_sent_pushes(
    device: str, at_ms: float, timeout_ms: float
) -> None:
    """Without failure a round is 2S / NIC of pushes (each worker sends 2 keys), S / NIC of
    forward and 2S / NIC of pulls (1 ms).  A server failing at t (in the pushes, 0.1 ms,
    or in the forwards, 0.5 ms) loses its key's round; the workers notice at t + timeout,
    re-send that key's pushes to the survivor (2S / NIC into it) while it serves the other
    key's pulls (2S / NIC out: the survivor's chain is itself alone, so that round is
    acknowledged at detection), then pull the re-aggregated key (2S / NIC): the round
    lasts t + timeout + 4S / NIC, and failover_lost_s = timeout + 2S / NIC.  Later rounds
    have both keys on the survivor, unreplicated: 4S / NIC in, 4S / NIC out."""
    at, timeout = at_ms * 1e-3, timeout_ms * 1e-3
    s = run(failover_doc(f"{at_ms}ms", f"{timeout_ms}ms", device))
    rounds = s["iteration_times_s"]
    assert rounds[0] == pytest.approx(at + timeout + 4 * S / NIC, rel=REL)
    assert rounds[1:] == pytest.approx([8 * S / NIC] * 3, rel=REL)
    assert s["failover_lost_s"] == pytest.approx(timeout + 2 * S / NIC, rel=REL)
    assert s["failovers"] == 1
    survivor = {"rack0/node2/cpu": "rack0/node3/cpu", "rack0/node3/cpu": "rack0/node2/cpu"}
    assert {k["server"] for k in s["keys"]} == {survivor[device]}
    assert s["key_pushes"] == 2 * 2 * 4  # re-sent pushes are not counted again


def test_the_failed_servers_work_and_transfers_are_cancelled() -> None:
    """At the failure its transfers leave the network (op ``cancelled``), it books no work
    afterwards, and the re-sent pushes are labelled so."""
    result = simulate(parse_scenario(failover_doc("0.1ms", "1ms", "rack0/node2/cpu")), check=True)
    dead = "rack0/node2/cpu"
    cancelled = [r for r in result.records if r.op == "cancelled" and r.kind == "transfer"]
    assert cancelled and all(dead in (r.src, r.dst) for r in cancelled)
    assert all(r.end_s == pytest.approx(1e-4) for r in cancelled)
    after = [r for r in result.records if dead in (r.resource, r.src, r.dst) and r.start_s > 1e-4]
    assert not [r for r in after if r.kind in ("compute", "transfer")]
    resent = [r for r in result.records if r.label.endswith("(re-sent)")]
    assert len(resent) == 2 and {r.dst for r in resent} == {"rack0/node3/cpu"}


def test_a_failure_after_training_is_not_a_failover() -> None:
    """A server failing after the last round changes nothing."""
    s = run(failover_doc("1s", "1ms", "rack0/node2/cpu", iterations=2))
    assert s["failovers"] == 0 and s["failover_lost_s"] == 0.0
    assert s["iteration_times_s"] == pytest.approx([5 * S / NIC] * 2, rel=REL)


@pytest.mark.parametrize("replicas, stops", [(1, True), (2, False)])
def test_without_a_live_replica_a_server_failure_stops_the_job(replicas: int, stops: bool) -> None:
    """``replicas: 1``: a server failure loses keys, so it stops the job and the goodput
    model prices it (an interruption); with 2 the simulation plays the failover."""
    doc = failover_doc("0.5ms", "1ms", "rack0/node2/cpu")
    doc["data_parallel"]["ps"]["replicas"] = replicas
    s = run(doc)
    if stops:
        assert s["interruptions"] == {"failures[0]": 1.0}
        assert s["goodput"] < 1.0
        assert "failovers" not in s
        assert s["iteration_times_s"] == pytest.approx([4 * S / NIC] * 4, rel=REL)
    else:
        assert s["interruptions"] == {}
        assert s["goodput"] == pytest.approx(1.0)
        assert s["failovers"] == 1


def test_a_whole_chain_failing_at_once_stops_the_job() -> None:
    """Both servers of a 2-chain in one entry: no live copy of a key, the job stops."""
    s = run(failover_doc("0.5ms", "1ms", "rack0/node[23]/cpu"))
    assert s["interruptions"] == {"failures[0]": 1.0}
    assert s["failovers"] == 0 and s["goodput"] < 1.0


# --------------------------------------------------------------------------- errors


def _validate(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(path) in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("servers, replicas", [(1, 2), (2, 3), (3, 5)])
def test_more_replicas_than_servers_exits_2(
    servers: int, replicas: int, tmp_path: Path, capsys
) -> None:
    err = _validate(tmp_path, replicated_doc(servers, 2, 1e5, replicas=replicas), capsys)
    assert "data_parallel.ps.replicas" in err and f"1 .. {servers}" in err


def test_replicas_with_a_hierarchy_exits_2(tmp_path: Path, capsys) -> None:
    doc = replicated_doc(2, 2, 1e5, replicas=2, hierarchy=["cpu", "server"])
    err = _validate(tmp_path, doc, capsys)
    assert "data_parallel.ps.replicas" in err and "hierarchy" in err


@pytest.mark.parametrize("mode", ["backup", "async", "ssp", "geo"])
def test_a_server_failure_outside_sync_exits_2(mode: str, tmp_path: Path, capsys) -> None:
    """Replication works in every mode, failover only in sync: a played server failure in
    another mode is refused at the entry's key path."""
    doc = failover_doc("0.5ms", "1ms", "rack0/node2/cpu")
    doc["data_parallel"]["ps"]["mode"] = mode
    err = _validate(tmp_path, doc, capsys)
    assert "failures[0].devices" in err and "sync" in err


def test_a_later_failure_of_the_last_copy_is_an_error() -> None:
    """Each entry is judged alone: a second failure that leaves a key with no live copy is
    refused when the failover finds no replica, naming the entry."""
    doc = failover_doc("0.5ms", "1ms", "rack0/node2/cpu")
    doc["failures"].append({"devices": "rack0/node3/cpu", "at": "3ms"})
    with pytest.raises(ScenarioError, match=r"failures\[1\]\.devices"):
        simulate(parse_scenario(doc))


# --------------------------------------------------------------------------- the scenario

SHIPPED = Path(__file__).resolve().parent.parent / "scenarios" / "parameter_server"


def test_the_shipped_scenario_fails_over_without_a_restart() -> None:
    """scenarios/parameter_server/replicated_failover.yaml, as README tells it: round 1
    (the failure 66 ms into it) takes 116.9 ms instead of 83.8, failover_lost_s is the
    50 ms timeout plus the re-sent pushes; with replicas 1 the failure stops the job."""
    path = SHIPPED / "replicated_failover.yaml"
    s = shared_runs.summary(path)
    rounds = s["iteration_times_s"]
    assert rounds[0] == pytest.approx(0.0838, abs=1e-4)
    assert rounds[1] == pytest.approx(0.1169, abs=1e-4)
    assert s["failover_lost_s"] == pytest.approx(0.0505, abs=1e-4)
    assert s["failovers"] == 1 and s["goodput"] == pytest.approx(1.0)
    doc = yaml.safe_load(path.read_text())
    doc["data_parallel"]["ps"]["replicas"] = 1
    stopped = simulate(parse_scenario(doc, str(path))).summary
    assert stopped["interruptions"] == {"failures[0]": 1.0}
    assert stopped["iteration_times_s"][1] == pytest.approx(rounds[0], abs=1e-4)


def test_run_prints_the_servers_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`clustersim run` names the busiest server, the replication and the failover."""
    code = main(["run", str(SHIPPED / "replicated_failover.yaml"), "-o", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("servers "))
    assert line.startswith("servers   3, busiest ")
    assert "replicas 2, 134.8 MB forwarded; 1 failover(s), 50.45 ms until" in line
