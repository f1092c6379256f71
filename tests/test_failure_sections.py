"""The failures:, recovery: and checkpoint: sections and training.duration / tokens: their
errors name the key path, and resolve_failures turns them into plain resolved lists."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from clustersim.api import prepare
from clustersim.errors import ScenarioError
from clustersim.resilience import job_length
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology
from clustersim.topology.failures import resolve_failures

_NODE = {"gpus": 2, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}}
_CLUSTER = {
    "racks": 2,
    "nodes_per_rack": 2,
    "spines": 2,
    "node": _NODE,
    "rack_uplink": {"oversubscription": 1},
}
_BASE: dict[str, Any] = {
    "name": "failures",
    "cluster": _CLUSTER,
    "model": {"layers": [{"name": "l", "params": 1e6, "flops": 1e9}]},
    "training": {"global_batch": 8},
}


def _parse(**sections: Any) -> Any:
    doc = copy.deepcopy(_BASE)
    doc.update(copy.deepcopy(sections))
    return parse_scenario(doc, "f.yaml")


def _error(**sections: Any) -> str:
    with pytest.raises(ScenarioError) as info:
        _parse(**sections)
    return str(info.value)


@pytest.mark.parametrize(
    "failures, expected",
    [
        ([{"devices": "*", "at": "-1s"}], "f.yaml: failures[0].at: '-1s' is negative"),
        ([{"devices": "*", "at": math.nan}], "failures[0].at: nan is not a number"),
        ([{"devices": "*", "at": "1s", "repair": 0}], "failures[0].repair: must be greater than 0"),
        ([{"links": "*", "at": "1h", "repair": "-1s"}], "failures[0].repair: '-1s' is negative"),
        ([{"devices": "*", "mtbf": 0}], "failures[0].mtbf: must be greater than 0"),
        (
            [{"devices": "*", "mtbf": "1d", "distribution": "weibull"}],
            "failures[0].shape: a weibull",
        ),
        ([{"devices": "*", "mtbf": "1d", "shape": 2}], "failures[0].shape: only a weibull"),
        (
            [{"devices": "*", "mtbf": "1d", "distribution": "weibull", "shape": 0}],
            "failures[0].shape: must be at least 0.05",
        ),
        ([{"devices": "*", "mtbf": "1d", "distribution": "gamma"}], "failures[0].distribution"),
        ([{"devices": "*", "mtbf": "1d", "seed": -1}], "failures[0].seed"),
        ([{"bogus": 1}], "failures[0]: matches none of the three failure forms"),
    ],
)
def test_bad_failure_entries_name_the_key_path(failures: list[Any], expected: str) -> None:
    assert expected in _error(failures=failures)


@pytest.mark.parametrize(
    "checkpoint, expected",
    [
        ({"every": 0}, "checkpoint.every: 0 iterations: must be at least 1"),
        ({"every": "-5min"}, "checkpoint.every: '-5min' is negative"),
        ({"every": 1.5}, "checkpoint.every: 1.5 is neither a number of iterations nor a time"),
        ({"every": {"iterations": 10, "time": "1h"}}, "checkpoint.every: give either iterations"),
        ({"every": 10, "storage": {"bandwidth": 0}}, "checkpoint.storage.bandwidth: must be"),
        ({"every": 10, "async": 1}, "checkpoint.async"),
        ({}, "checkpoint.every: required key missing"),
    ],
)
def test_bad_checkpoint_sections_name_the_key_path(checkpoint: Any, expected: str) -> None:
    assert expected in _error(checkpoint=checkpoint)


def test_every_takes_iterations_or_a_time() -> None:
    for every, iterations, seconds in [
        (100, 100, None),
        ("100 iterations", 100, None),
        ("30min", None, 1800.0),
        ({"time": "2h"}, None, 7200.0),
        ({"iterations": 7}, 7, None),
    ]:
        interval = _parse(checkpoint={"every": every}).checkpoint.every
        assert (interval.iterations, interval.time_s) == (iterations, seconds)


def test_training_length_forms() -> None:
    assert _parse(training={"global_batch": 8, "duration": "30d"}).training.duration_s == 30 * 86400
    assert _parse(training={"global_batch": 8, "tokens": "2T"}).training.tokens == 2e12
    both = {"global_batch": 8, "duration": "1d", "tokens": "1T"}
    assert "training.tokens: give the job's length as duration or as tokens" in _error(
        training=both
    )
    assert "training.duration: must be greater than 0" in _error(
        training={"global_batch": 8, "duration": "0s"}
    )
    assert "training.tokens: '-2T' is out of range" in _error(
        training={"global_batch": 8, "tokens": "-2T"}
    )


def test_checkpoint_and_recovery_need_training() -> None:
    doc = {
        "name": "w",
        "cluster": _CLUSTER,
        "workload": {"collective": "allreduce", "bytes": "1MB"},
        "checkpoint": {"every": 10},
    }
    with pytest.raises(ScenarioError, match="checkpoint: checkpoint is for training scenarios"):
        parse_scenario(doc)


def test_tokens_give_iterations_from_the_sequence_length() -> None:
    """2T tokens at global batch 8 x sequence 128: ceil(2e12 / 1024) iterations."""
    transformer = {"layers": 2, "hidden": 64, "heads": 2, "seq": 128, "vocab": 100}
    s = _parse(model={"transformer": transformer}, training={"global_batch": 8, "tokens": "2T"})
    length = job_length(s)
    assert length.iterations == math.ceil(2e12 / 1024) and length.duration_s is None
    assert length.tokens_per_iteration == 1024
    duration = _parse(training={"global_batch": 8, "duration": "2h"})
    assert job_length(duration).duration_s == 7200 and job_length(duration).iterations is None
    layers = _parse(training={"global_batch": 8, "tokens": "1T"})
    with pytest.raises(
        ScenarioError, match=r"f\.yaml: training\.tokens: tokens need a transformer"
    ):
        job_length(layers)
    with pytest.raises(ScenarioError, match=r"training\.tokens"):
        prepare(layers)


def _resolved(failures: list[Any], **extra: Any) -> Any:
    s = _parse(failures=failures, **extra)
    return resolve_failures(s, build_topology(s.cluster))


def test_glob_matching_nothing_names_the_file_and_key() -> None:
    s = _parse(failures=[{"devices": "*", "at": 0}, {"devices": "rack9/*", "at": 0}])
    with pytest.raises(ScenarioError) as info:
        prepare(s)
    assert "f.yaml: failures[1].devices: no device, node or switch matches 'rack9/*'" in str(
        info.value
    )
    s = _parse(failures=[{"links": "nowhere->*", "at": 0}])
    with pytest.raises(ScenarioError, match=r"f\.yaml: failures\[0\]\.links: no link matches"):
        resolve_failures(s, build_topology(s.cluster))


def test_a_node_takes_down_its_devices_and_links() -> None:
    """rack0/node1 fails at 1 h, repaired after 30 min: its 2 GPUs and CPU, and every link
    touching them or its PCIe switch and NIC (2 x (3 PCIe cables + NIC-PCIe + NIC-ToR) = 10)."""
    (entry,) = _resolved(
        [{"devices": "rack0/node1", "at": "1h", "repair": "30min"}]
    ).scheduled_devices
    assert entry.devices == ("rack0/node1/gpu0", "rack0/node1/gpu1", "rack0/node1/cpu")
    assert entry.components == ("rack0/node1",)
    assert (entry.at_s, entry.repair_s, entry.stops_job) == (3600.0, 1800.0, True)
    assert len(entry.links) == 10


def test_what_stops_the_job() -> None:
    """A GPU, a NIC, a ToR stop it; one spine of two does not (routes go over the other);
    a CPU does not (it trains nothing); a cut cable to a NIC does."""
    found = _resolved(
        [
            {"devices": "rack1/node0/gpu1", "at": 0},
            {"devices": "rack0/node0/nic", "at": 0},
            {"devices": "rack1/tor", "at": 0},
            {"devices": "spine0", "at": 0},
            {"devices": "*/cpu", "at": 0},
        ]
    ).scheduled_devices
    assert [e.stops_job for e in found] == [True, True, True, False, False]
    assert found[3].repair_s == math.inf
    (cut,) = _resolved([{"links": "rack0/node1/nic->rack0/tor", "at": "5s"}]).scheduled_links
    assert cut.stops_job and cut.at_s == 5.0 and len(cut.links) == 1
    (half,) = _resolved([{"links": "rack0/tor->spine1", "at": "5s"}]).scheduled_links
    assert not half.stops_job


def test_random_failures_split_by_whether_they_stop_the_job() -> None:
    found = _resolved(
        [{"devices": "rack0/*", "mtbf": "1000h", "distribution": "weibull", "shape": 0.7}],
        recovery={"restart_time": "5min", "elastic": True},
    )
    stopping, other = found.random
    assert stopping.stops_job and not other.stops_job
    assert other.names == ("rack0/node0/cpu", "rack0/node1/cpu")
    assert stopping.components + other.components == len(stopping.names) + 2
    assert stopping.mtbf_s == 3.6e6 and stopping.shape == 0.7 and stopping.distribution == "weibull"
    assert (found.restart_s, found.elastic) == (300.0, True)


def test_random_seeds_are_given_or_derived_deterministically() -> None:
    given = _resolved([{"devices": "*/gpu*", "mtbf": "1d", "seed": 42}]).random[0]
    assert given.seed == 42 and given.shape == 1.0 and given.components == 8
    first = _resolved([{"devices": "*/gpu*", "mtbf": "1d"}]).random[0].seed
    assert first == _resolved([{"devices": "*/gpu*", "mtbf": "1d"}]).random[0].seed
    other_seed = _parse(failures=[{"devices": "*/gpu*", "mtbf": "1d"}], seed=1)
    derived = resolve_failures(other_seed, build_topology(other_seed.cluster)).random[0].seed
    assert derived != first


def test_default_recovery_is_a_ten_minute_restart() -> None:
    found = _resolved([{"devices": "spine1", "at": 0}])
    assert (found.restart_s, found.elastic) == (600.0, False)
