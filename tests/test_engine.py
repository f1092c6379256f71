"""The engine: compute streams, overlap, stragglers, link degradation, barriers."""

from __future__ import annotations

import pytest

from clustersim import parse_scenario, simulate
from clustersim.engine import Simulation
from clustersim.errors import SimulationError
from clustersim.records import Record
from clustersim.topology import build_topology

from .conftest import compute, one_node, transfer


def switch_sim(devices: int = 4, **cluster) -> Simulation:
    doc = {
        "name": "t",
        "cluster": {
            "kind": "switch",
            "devices": devices,
            "link": {"bandwidth": "10GB/s"},
            **cluster,
        },
        "workload": {"program": [compute("x", "gpu0", seconds="1s")]},
    }
    return Simulation.from_scenario(parse_scenario(doc))


@pytest.mark.parametrize("flops", [1e9, 3.12e14, 1e15])
@pytest.mark.parametrize("efficiency", [0.25, 0.5, 1.0])
def test_compute_time_from_flops(flops: float, efficiency: float) -> None:
    """Compute time = FLOPs / (peak x efficiency)."""
    doc = one_node(1, "16GB/s", [compute("c", "rack0/node0/gpu0", flops=flops)])
    doc["cluster"]["node"]["gpu"] = {"flops": "312TFLOPS", "efficiency": efficiency}
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(
        flops / (312e12 * efficiency), rel=1e-12
    )


@pytest.mark.parametrize(("size", "size_b"), [("2GB", 2e9), ("1GiB", 2**30), ("80GB", 80e9)])
def test_memory_bound_compute_time(size: str, size_b: float) -> None:
    """Memory-bound work takes bytes / memory bandwidth."""
    doc = one_node(1, "16GB/s", [compute("c", "rack0/node0/gpu0", bytes=size)])
    doc["cluster"]["node"]["gpu"] = {"memory_bandwidth": "2TB/s"}
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(size_b / 2e12, rel=1e-12)


def test_compute_stream_is_fifo() -> None:
    """Two pieces of work submitted together to one device run one after the other."""
    doc = one_node(
        1,
        "16GB/s",
        [
            compute("a", "rack0/node0/gpu0", seconds="3ms"),
            compute("b", "rack0/node0/gpu0", seconds="2ms"),
        ],
    )
    result = simulate(parse_scenario(doc))
    ops = result.summary["operations"]
    assert ops["a"]["end_s"] == pytest.approx(0.003)
    assert ops["b"]["end_s"] == pytest.approx(0.005)
    assert result.summary["devices"]["rack0/node0/gpu0"]["compute_s"] == pytest.approx(0.005)


def test_compute_and_communication_overlap() -> None:
    """A device computes while its transfer is in flight: the makespan is the longer of the two."""
    program = [
        compute("c", "rack0/node0/gpu0", seconds="10ms"),
        transfer("t", "rack0/node0/gpu0", "rack0/node0/gpu1", "160MB"),  # 10 ms at 16 GB/s
    ]
    result = simulate(parse_scenario(one_node(2, "16GB/s", program)))
    assert result.makespan_s == pytest.approx(0.010, rel=1e-12)
    gpu0 = result.summary["devices"]["rack0/node0/gpu0"]
    assert gpu0["exposed_communication_s"] == pytest.approx(0.0, abs=1e-15)
    assert gpu0["idle_s"] == pytest.approx(0.0, abs=1e-15)


def test_breakdown_exposed_and_idle() -> None:
    """Exposed communication and idle time follow from the records."""
    program = [
        compute("c", "rack0/node0/gpu0", seconds="5ms"),
        transfer("t", "rack0/node0/gpu0", "rack0/node0/gpu1", "160MB", after=["c"]),
        compute("d", "rack0/node0/gpu1", seconds="5ms", after=["t"]),
    ]
    result = simulate(parse_scenario(one_node(2, "16GB/s", program)))
    assert result.makespan_s == pytest.approx(0.020)
    gpu0 = result.summary["devices"]["rack0/node0/gpu0"]
    assert gpu0 == pytest.approx(
        {
            "compute_s": 0.005,
            "communication_s": 0.010,
            "exposed_communication_s": 0.010,
            "idle_s": 0.005,
        }
    )


@pytest.mark.parametrize("slowdown", [1.0, 1.5, 2.0, 4.0])
def test_fixed_straggler_slows_matched_devices(slowdown: float) -> None:
    """A fixed slowdown multiplies compute time of the devices its glob matches, and only those."""
    program = [compute(f"c{i}", f"rack0/node0/gpu{i}", seconds="10ms") for i in range(4)]
    doc = one_node(4, "16GB/s", program)
    doc["stragglers"] = [{"devices": "rack0/node0/gpu[23]", "slowdown": slowdown}]
    ops = simulate(parse_scenario(doc)).summary["operations"]
    assert ops["c0"]["end_s"] == pytest.approx(0.010)
    assert ops["c3"]["end_s"] == pytest.approx(0.010 * slowdown)


def random_straggler_run(seed: int, dist: dict) -> list[float]:
    program = [compute(f"c{i}", f"rack0/node0/gpu{i}", seconds="1s") for i in range(8)]
    doc = one_node(8, "16GB/s", program)
    doc["seed"] = seed
    doc["stragglers"] = [{"random": {"slowdown": dist}}]
    ops = simulate(parse_scenario(doc)).summary["operations"]
    return [ops[f"c{i}"]["end_s"] for i in range(8)]


@pytest.mark.parametrize(
    "dist",
    [
        {"dist": "lognormal", "sigma": 0.3},
        {"dist": "exponential", "scale": 0.5},
        {"dist": "uniform", "low": 1.0, "high": 2.0},
    ],
)
def test_random_straggler_is_seeded(dist: dict) -> None:
    """Random slowdowns are the same for the same seed and differ for another."""
    a = random_straggler_run(1, dist)
    assert a == random_straggler_run(1, dist)
    assert a != random_straggler_run(2, dist)
    assert len(set(a)) == 8


def test_uniform_straggler_within_bounds() -> None:
    """Uniform slowdowns fall in [low, high)."""
    times = random_straggler_run(3, {"dist": "uniform", "low": 1.2, "high": 1.3})
    assert all(1.2 <= t < 1.3 for t in times)


def test_link_degradation_window() -> None:
    """Halving a link's bandwidth for part of a transfer stretches it by exactly that part."""
    doc = {
        "name": "degrade",
        "cluster": {
            "kind": "custom",
            "devices": [{"name": "a"}, {"name": "b"}],
            "links": [{"src": "a", "dst": "b", "bandwidth": "1GB/s"}],
        },
        "workload": {"program": [transfer("t", "a", "b", "1GB")]},
        "stragglers": [
            {"links": "a->b", "bandwidth_factor": 0.5, "start": "200ms", "end": "600ms"}
        ],
    }
    # 0.2 s at 1 GB/s (0.2 GB), 0.4 s at 0.5 GB/s (0.2 GB), the remaining 0.6 GB at 1 GB/s
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(1.2, rel=1e-12)


def test_barrier_releases_all_parties_at_the_last_arrival() -> None:
    """Every party leaves a barrier when the last one arrives; it can be reused."""
    sim = switch_sim()
    left: list[tuple[int, float]] = []

    def party(i: int):
        for rnd in range(2):
            yield sim.compute(f"gpu{i}", seconds=(i + 1) * 1e-3)
            yield sim.barrier("b", 4).wait()
            left.append((rnd, sim.now))

    for i in range(4):
        sim.process(party(i))
    sim.run()
    assert [t for rnd, t in left if rnd == 0] == pytest.approx([0.004] * 4)
    assert [t for rnd, t in left if rnd == 1] == pytest.approx([0.008] * 4)


def _group_order(durations: list[float], ends_event: bool) -> tuple[list, list]:
    """Who resumes when, and the records: a group of devices computing ``durations`` (gpu0
    busy 1 ms before), waited for through :meth:`Simulation.compute_ends` or through the
    ``all_of`` of one compute event per device, beside two processes whose timeouts end at
    the group's end, one started before the group and one after."""
    sim = switch_sim()
    log: list[tuple[str, float]] = []
    group = [f"gpu{i}" for i in range(len(durations))]
    last = max(d + (1e-3 if i == 0 else 0.0) for i, d in enumerate(durations))

    def waiter(name: str):
        yield sim.timeout(last)
        log.append((name, sim.now))

    def worker():
        sim.process(waiter("before"))
        if ends_event:
            ends = [sim.book_compute(d, seconds=s, label="g") for d, s in zip(group, durations)]
            event = sim.compute_ends(ends)
        else:
            event = sim.all_of(
                sim.compute(d, seconds=s, label="g") for d, s in zip(group, durations)
            )
        sim.process(waiter("after"))
        yield event
        log.append(("group", sim.now))

    sim.compute("gpu0", seconds=1e-3, label="first")
    sim.process(worker())
    sim.run()
    return log, list(sim.records)


@pytest.mark.parametrize("durations", [[2e-3, 3e-3], [3e-3, 2e-3, 4e-3, 1e-3], [1e-3] * 4])
def test_compute_ends_resumes_where_all_of_the_compute_events_would(durations) -> None:
    """A group's compute waited for by one event (two SimPy events in all, not one per
    device) resumes its process at the same place among simultaneous events as the
    ``all_of`` of each device's event: after the timeouts that end with it (both the one
    made before the group and the one made after), with the same records."""
    log, records = _group_order(durations, ends_event=True)
    assert (log, records) == _group_order(durations, ends_event=False)
    assert [name for name, _ in log] == ["before", "after", "group"]
    assert max(r.end_s for r in records) == pytest.approx(log[-1][1], rel=1e-15)


def test_barrier_party_count_must_agree() -> None:
    """Asking for the same barrier with another party count is a clear error."""
    sim = switch_sim()
    sim.barrier("b", 4)
    with pytest.raises(SimulationError, match="4 parties"):
        sim.barrier("b", 3)


def test_transfer_to_self_takes_no_time() -> None:
    """A device sending to itself needs no link."""
    sim = switch_sim()
    done = []

    def proc():
        yield sim.transfer("gpu0", "gpu0", 1e9)
        done.append(sim.now)

    sim.process(proc())
    sim.run()
    assert done == [0.0]


def test_split_routing_spreads_a_flow_over_spines() -> None:
    """With spine_routing split, one cross-rack flow uses every spine equally."""
    doc = {
        "name": "split",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": 1,
            "node": {"gpus": 1, "pcie": {"bandwidth": "64GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
            "rack_uplink": {"bandwidth": "100Gb/s"},
            "spines": 4,
            "spine_routing": "split",
        },
        "workload": {"program": [transfer("t", "rack0/node0/gpu0", "rack1/node0/gpu0", "1GB")]},
    }
    result = simulate(parse_scenario(doc))
    assert result.makespan_s == pytest.approx(1e9 / 12.5e9, rel=1e-12)
    spine_bytes = [
        row["bytes"] for row in result.links if row["link"].startswith("rack0/tor->spine")
    ]
    assert spine_bytes == pytest.approx([2.5e8] * 4)


def test_topology_is_reused() -> None:
    """A Simulation can be built on an existing topology."""
    doc = {
        "name": "t",
        "cluster": {"kind": "ring", "devices": 4, "link": {"bandwidth": "1GB/s"}},
        "workload": {"program": [compute("x", "gpu0", seconds="1s")]},
    }
    topo = build_topology(parse_scenario(doc).cluster)
    assert Simulation(topo).topology is topo


@pytest.mark.parametrize("routing", ["ecmp", "split"])
@pytest.mark.parametrize("size", [0.0, 1e9])
def test_low_level_send_notifies_once(routing: str, size: float) -> None:
    """Simulation.send calls back once, when the last part of the transfer has arrived.

    Each ToR-spine link is 50 Gb/s: one ECMP flow is limited to it, a split flow
    uses both spines at once (the full 100 Gb/s NIC).
    """
    doc = {
        "name": "send",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": 1,
            "node": {
                "gpus": 1,
                "pcie": {"bandwidth": "64GB/s"},
                "nic": {"bandwidth": "100Gb/s", "latency": "1us"},
            },
            "rack_uplink": {"bandwidth": "100Gb/s"},
            "spines": 2,
            "spine_routing": routing,
        },
        "workload": {"program": [compute("x", "rack0/node0/gpu0", seconds="1s")]},
    }
    sim = Simulation.from_scenario(parse_scenario(doc))
    calls: list[tuple[object, float]] = []
    sim.send(
        "rack0/node0/gpu0",
        "rack1/node0/gpu0",
        size,
        lambda flow: calls.append((flow.tag, sim.now)),
        tag=7,
    )
    sim.run()
    assert len(calls) == 1 and calls[0][0] == 7
    bottleneck = 12.5e9 if routing == "split" else 6.25e9
    assert calls[0][1] == pytest.approx(2e-6 + size / bottleneck, rel=1e-12)


@pytest.mark.parametrize("size", [0.0, 2.5e8, 1e9])
def test_transfer_then_records_like_transfer_and_calls_back_at_arrival(size: float) -> None:
    """transfer_then gives the same record as transfer (start, end, bytes, tags) and calls
    back at the instant the last byte arrives: size / 10 GB/s on an idle switch."""
    ends: dict[str, float] = {}
    runs = {}
    for kind in ("event", "then"):
        sim = switch_sim()
        if kind == "event":
            done = sim.transfer("gpu0", "gpu1", size, label="act", iteration=2, microbatch=3)
            done.callbacks.append(lambda _e, sim=sim: ends.__setitem__("event", sim.now))
        else:
            sim.transfer_then(
                "gpu0",
                "gpu1",
                size,
                lambda sim=sim: ends.__setitem__("then", sim.now),
                label="act",
                iteration=2,
                microbatch=3,
            )
        sim.run()
        runs[kind] = [r for r in sim.records if r.kind == "transfer"]
    assert runs["then"] == runs["event"]
    assert ends["then"] == ends["event"] == pytest.approx(size / 10e9, abs=1e-15)
    with pytest.raises(SimulationError, match="its size is negative"):
        switch_sim().transfer_then("gpu0", "gpu1", -1.0, lambda: None)
    with pytest.raises(SimulationError, match=r"gpu0 -> gpu1: its size overflowed \(inf B\)"):
        switch_sim().transfer("gpu0", "gpu1", float("inf"))
    with pytest.raises(SimulationError, match="its size is NaN"):
        switch_sim().transfer("gpu0", "gpu1", float("nan"))


LANE_SETS = {
    # lanes on disjoint links: each at the switch link's 10 GB/s
    "disjoint": ([("gpu0", "gpu1"), ("gpu2", "gpu3"), ("gpu4", "gpu5")], 10e9),
    # two lanes leave gpu0 on one link: max-min gives each half of it
    "shared": ([("gpu0", "gpu1"), ("gpu0", "gpu2")], 5e9),
}


@pytest.mark.parametrize("lanes", sorted(LANE_SETS))
@pytest.mark.parametrize("size", [0.0, 1e6, 2.5e8])
def test_transfer_lanes_is_transfer_then_per_lane_with_one_callback(
    lanes: str, size: float
) -> None:
    """transfer_lanes books the records transfer_then books for each lane (same fields, same
    order), moves the same flows, and calls back once, at the last lane's arrival: size over
    the lane's max-min rate (10 GB/s on its own switch link, 5 GB/s where two lanes share
    one), as transfer_then's last callback."""
    pairs, rate = LANE_SETS[lanes]
    ends: dict[str, list[float]] = {"lanes": [], "then": []}
    runs = {}
    for kind in ("then", "lanes"):
        sim = switch_sim(devices=8)
        if kind == "lanes":
            sim.transfer_lanes(
                pairs,
                size,
                lambda sim=sim: ends["lanes"].append(sim.now),
                label="act",
                iteration=2,
                microbatch=3,
                stage=1,
                op="send",
            )
        else:
            left = [len(pairs)]

            def one(sim: Simulation = sim, left: list[int] = left) -> None:
                left[0] -= 1
                if not left[0]:
                    ends["then"].append(sim.now)

            for src, dst in pairs:
                sim.transfer_then(
                    src, dst, size, one, label="act", iteration=2, microbatch=3, stage=1, op="send"
                )
        sim.run()
        runs[kind] = (list(sim.records), sim.network.flows_completed)
    assert runs["lanes"] == runs["then"]
    assert runs["lanes"][1] == len(pairs)
    assert ends["lanes"] == ends["then"] == [pytest.approx(size / rate, abs=1e-15)]
    assert [(r.src, r.dst) for r in runs["lanes"][0] if r.kind == "transfer"] == sorted(
        pairs, key=pairs.index
    )


def test_transfer_lanes_refuses_a_bad_size_naming_the_first_lane_and_sends_nothing() -> None:
    """A size transfer_then would refuse is refused before any lane is sent, naming the first
    lane; no lane at all sends nothing and never calls back."""
    sim = switch_sim()
    with pytest.raises(SimulationError, match="gpu2 -> gpu3.*its size is negative"):
        sim.transfer_lanes([("gpu2", "gpu3"), ("gpu0", "gpu1")], -1.0, lambda: None)
    assert sim.network.active() == [] and sim.network.flows_completed == 0
    called: list[int] = []
    sim.transfer_lanes([], 1e6, lambda: called.append(1))  # no lane: nothing to wait for
    sim.run()
    assert not called and sim.network.flows_completed == 0


@pytest.mark.parametrize("seconds", [[0.5], [0.25, None, 1.0], [None, None, None, None]])
def test_book_computes_is_book_compute_per_device(seconds: list[float | None]) -> None:
    """book_computes gives the records and ends book_compute gives device by device: a
    device's own seconds, or its FLOPs at its peak x efficiency, each after the work already
    queued on its stream (0.5 s on gpu0)."""
    devices = [f"gpu{i}" for i in range(len(seconds))]
    runs = {}
    for kind in ("one by one", "together"):
        sim = switch_sim()
        sim.book_compute("gpu0", seconds=0.5, label="before")
        kw = {"flops": 2e12, "label": "f", "iteration": 1, "microbatch": 2, "stage": 3}
        if kind == "together":
            ends = sim.book_computes(devices, seconds, op="o", phase="forward", **kw)
        else:
            ends = [
                sim.book_compute(d, seconds=t, op="o", phase="forward", **kw)
                for d, t in zip(devices, seconds, strict=True)
            ]
        runs[kind] = (ends, list(sim.records))
    assert runs["together"] == runs["one by one"]
    gpu = sim.device("gpu0")
    flops_s = 2e12 / (gpu.flops_per_s * gpu.efficiency)
    expected = [
        (0.5 if i == 0 else 0.0) + (flops_s if t is None else t) for i, t in enumerate(seconds)
    ]
    assert runs["together"][0] == pytest.approx(expected, rel=1e-12)


def test_book_adds_one_record_with_its_fields_and_phase() -> None:
    """book() appends exactly the Record its fields make (defaults where left out), after
    the compute booked before it; the collectives' rows go through it."""
    sim = switch_sim()
    sim.compute("gpu0", seconds=1e-3, label="fwd", phase="forward")
    sim.book(
        "gpu1",
        "collective",
        "allreduce/ring",
        0.5,
        2.0,
        0.0,
        0.0,
        "gpu1",
        "gpu1",
        4,
        phase="communication",
    )
    assert sim.records[1:] == [
        Record(
            "gpu1",
            "collective",
            "allreduce/ring",
            0.5,
            2.0,
            src="gpu1",
            dst="gpu1",
            iteration=4,
            phase="communication",
        )
    ]
    assert type(sim.records[1]) is Record and sim.records[0].phase == "forward"
