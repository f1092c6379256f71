"""Shared helpers for the tests: build scenario documents the way a user writes them."""

from __future__ import annotations

import functools
import gc
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from clustersim.caches import clear_caches
from clustersim.scenario import is_candidates_file, parse_scenario
from clustersim.topology import Topology, build_topology

from . import shared_runs

# Every run through clustersim.api.simulate in the suite (and in the CLI subprocesses it
# starts) checks the invariants of clustersim.invariants (issue 6).
os.environ.setdefault("CLUSTERSIM_CHECK", "1")

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process makes the session's folder of shared runs
    (:mod:`tests.shared_runs`); xdist workers inherit its name."""
    if not hasattr(config, "workerinput"):
        shared_runs.start_session()


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")
"""Node ids of the tests measured at a second or more, slowest first (``make slow-tests``
measures them again)."""


def _slow_seconds() -> dict[str, float]:
    """Node id -> seconds measured, for the tests of :data:`SLOW_TESTS`, slowest first."""
    lines = SLOW_TESTS.read_text().splitlines() if SLOW_TESTS.is_file() else []
    rows = [line.split(maxsplit=1) for line in lines if line.strip() and not line.startswith("#")]
    return {node.strip(): float(seconds) for seconds, node in rows}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests of :data:`SLOW_TESTS` get the ``slow`` mark (``pytest -m "not slow"`` is the
    quick loop), and the order suits xdist's ``--dist worksteal`` (the Makefile's).

    worksteal hands the first worker the first ``n // workers`` tests, the next the next
    share, and so on; a worker that runs out takes half of what another has left.  So each
    share starts with its part of the slow tests (dealt out slowest first, each to the share
    with the least seconds so far) and goes on with the others in their files' order (a
    module's fixtures are then mostly made once): the long tests start at once, the short
    ones are left to even out the end."""
    seconds = _slow_seconds()
    slow = {node: rank for rank, node in enumerate(seconds)}  # 0: the slowest
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    quick = [item for item in items if item.nodeid not in slow]
    long = sorted((item for item in items if item.nodeid in slow), key=lambda i: slow[i.nodeid])
    sizes, left = [], len(items)
    for i in range(workers):  # worksteal's first split: left // workers still to come
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in long:
        w = min(range(workers), key=lambda k: (loads[k], k))
        shares[w].append(item)
        loads[w] += seconds.get(item.nodeid, 1.0)
    rest = iter(quick)
    for share, size in zip(shares, sizes, strict=True):
        share.extend(next(rest) for _ in range(max(0, size - len(share))))
    shares[-1].extend(rest)
    items[:] = [item for share in shares for item in share]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the test modules, 8,000 items and their parameters): a
    full garbage collection during the session then scans only what the tests make since."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After each test (its fixtures torn down): collect its garbage, then freeze what
    survives, as after collection.  What a test leaves alive -- session fixtures, and the
    module-level caches that keep a topology of 131,072 GPUs and its 1.4 M links -- was
    otherwise scanned again by every full collection for the rest of the session (about a
    fifth of the suite's time went to the collector).  The collection here scans only what
    the test made; what it frees by reference counting is freed as before.  clustersim's
    caches are emptied first (:func:`clustersim.caches.clear_caches`): they would otherwise
    keep the clusters of the test alive -- a 131,072-GPU topology is 2.7 M objects, half a
    gigabyte that every later fork of the worker (process pools, Dask) copies."""
    clear_caches()
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        shared_runs.end_session()


def shipped_scenarios(pattern: str = "**/*.yaml") -> list[Path]:
    """The scenario files of scenarios/ matching ``pattern``, sorted: candidates files of
    ``clustersim choose`` (scenarios/choose/, top-level ``clusters:``) are not scenarios and
    are left out (``clustersim validate`` checks them as candidates files)."""
    return sorted(p for p in SCENARIOS.glob(pattern) if not _is_candidates_file(p))


@functools.cache
def _is_candidates_file(path: Path) -> bool:
    """:func:`is_candidates_file`, read once per file and process (test modules ask at
    collection, in each worker)."""
    return is_candidates_file(path)


TEXTBOOK: dict[str, Any] = {"protocol": "none", "channels": 1}
"""``network`` keys of the textbook's collectives: line rates, no NCCL protocol, one channel
(NCCL's defaults are ``auto``); tests that hold alpha-beta formulas pin them."""


def one_node(gpus: int, pcie: str, program: list[dict[str, Any]], **node: Any) -> dict[str, Any]:
    """A scenario document: one node of ``gpus`` GPUs and a CPU on one PCIe switch."""
    return {
        "name": "one-node",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {
                "gpus": gpus,
                "pcie": {"bandwidth": pcie},
                "nic": {"bandwidth": "100Gb/s"},
                **node,
            },
        },
        "workload": {"program": program},
    }


def transfer(
    op_id: str, src: str, dst: str, size: str, after: list[str] | None = None
) -> dict[str, Any]:
    """A program transfer operation."""
    op: dict[str, Any] = {"id": op_id, "transfer": {"src": src, "dst": dst, "bytes": size}}
    if after:
        op["after"] = after
    return op


def compute(
    op_id: str, device: str, after: list[str] | None = None, **amount: Any
) -> dict[str, Any]:
    """A program compute operation (flops=, seconds= or bytes=)."""
    op: dict[str, Any] = {"id": op_id, "compute": {"device": device, **amount}}
    if after:
        op["after"] = after
    return op


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS


@functools.cache
def flat_topology(kind: str, n: int, bandwidth: str = "25GB/s", latency: str = "1us") -> Topology:
    """A flat cluster (switch, ring or fully_connected) of ``n`` GPUs, built once per argument set."""
    doc = {
        "name": "t",
        "cluster": {
            "kind": kind,
            "devices": n,
            "link": {"bandwidth": bandwidth, "latency": latency},
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


@functools.cache
def a100_cluster(
    nodes: int, gpus: int = 8, nvlink: bool = True, nics: int | None = None
) -> Topology:
    """``nodes`` DGX A100 nodes on one switch (the catalog's preset: NVLink 1 us, PCIe 1 us,
    NIC 2 us of link latency) of ``gpus`` GPUs and ``nics`` NICs (default one per GPU), with
    NVSwitch or (``nvlink`` False) PCIe alone; built once per argument set."""
    node: dict[str, object] = {"preset": "dgx-a100", "gpus": gpus, "nics": nics or gpus}
    if not nvlink:
        node["nvlink"] = None
    doc = {
        "name": "a100",
        "cluster": {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": node},
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def flow_time(call, topo: Topology, model: str = "flow") -> float:
    """Seconds the run of collective ``call`` takes on an idle ``topo`` (flow-level by
    default; ``model="analytical"`` for the congestion-aware analytical model)."""
    from clustersim.collectives import run_collective
    from clustersim.engine import Simulation

    sim = Simulation(topo)
    run_collective(sim, call, model=model, record_transfers=False)
    sim.run()
    return sim.now


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulating, building a collective schedule or a pipeline's operations fail the
    test: a refusal must come before any of them."""
    from clustersim.collectives.schedule import Schedule
    from clustersim.engine import Simulation
    from clustersim.parallel.schedules import registered_schedules

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(Simulation, "run", forbidden)
    monkeypatch.setattr(Schedule, "__init__", forbidden)
    for cls in registered_schedules().values():
        monkeypatch.setattr(cls, "operations", forbidden)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker's last step before it reports "workerfinished": collect its garbage
    now, freeze what survives, and ignore SIGINT from here on.

    Once every worker has reported, the controller closes their gateways, and execnet
    gives a worker's main thread 5 seconds to end its session (the terminal summary,
    ``pytest_unconfigure`` and the cleanups, two of them full garbage collections of the
    worker's heap); past that, execnet's worker sends itself SIGINT
    (``WorkerGateway._terminate_execution``).  Under load a collection of a whole suite's
    heap takes longer than that, the SIGINT lands in a gc callback (hypothesis's, first in
    ``gc.callbacks``), and its KeyboardInterrupt ends the run as a
    PytestUnraisableExceptionWarning.  Frozen objects are left out of later collections,
    so those two take milliseconds; and a worker past this point has nothing left to
    interrupt (a Ctrl-C at a terminal reaches the controller too, which stops the run).
    Session fixtures are torn down before this runs (``trylast``)."""
    if not hasattr(session.config, "workerinput"):
        return  # not an xdist worker: no execnet gateway to time it out
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
