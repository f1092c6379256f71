"""The collector around a run (clustersim.host.gc_paused): what a large pause leaves is moved
to the oldest generation unscanned, and a run leaves no reference cycle that would keep its
records alive after its Result (issue 42: the young collection after each large run scanned
its 1.5 M records, 19 s of a test suite's 38 s in the collector)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest
import simpy

from clustersim import host
from clustersim.api import simulate
from clustersim.engine import Simulation
from clustersim.invariants import Checker, Watch

from .conftest import SCENARIOS


class Box:
    """A tracked object that supports weak references."""


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on (it is, in the suite; what conftest froze stays frozen: unfreezing
    a worker's heap to test would cost full collections of all of it)."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def made_in_a_pause(count: int) -> list[Box]:
    with host.gc_paused():
        return [Box() for _ in range(count)]


ALONE = """
import gc
from clustersim import host

class Box:
    pass

gc.collect()
assert gc.get_freeze_count() == 0
with host.gc_paused():
    boxes = [Box() for _ in range(host.PROMOTE_AFTER + 1000)]
assert gc.get_count()[0] < 1000, gc.get_count()
oldest = {id(o) for o in gc.get_objects(generation=2)}
assert all(id(b) in oldest for b in boxes[:: len(boxes) // 50])
assert gc.get_freeze_count() == 0
print("ok")
"""


def test_a_large_pause_leaves_its_objects_in_the_oldest_generation() -> None:
    """More than PROMOTE_AFTER objects, in a process that froze nothing (a fresh one): none
    is left young (the next young collection has nothing of them to scan), all are in the
    oldest generation, nothing stays frozen."""
    done = subprocess.run(
        [sys.executable, "-c", ALONE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_a_small_pause_is_left_to_the_collector(collector: None) -> None:
    """Fewer objects than PROMOTE_AFTER: none goes to the oldest generation or is frozen at
    once (the young collections take them, as without the pause)."""
    frozen = gc.get_freeze_count()
    boxes = made_in_a_pause(2000)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert not any(id(b) in oldest for b in boxes)
    assert gc.get_freeze_count() <= frozen + 100


def test_objects_another_froze_stay_frozen(collector: None) -> None:
    """In a process that froze objects itself (conftest does, after every test), a large
    pause unfreezes none of them; what it made joins them, and is still freed by reference
    count."""
    gc.freeze()
    before = gc.get_freeze_count()
    assert before > 0
    boxes = made_in_a_pause(host.PROMOTE_AFTER + 1000)
    assert gc.get_freeze_count() >= before + len(boxes)
    probe = weakref.ref(boxes[0])
    del boxes
    assert probe() is None


def pause(env: simpy.Environment) -> Iterator[simpy.Event]:
    yield env.timeout(1.0)


def test_a_released_watch_leaves_no_reference_cycle(collector: None) -> None:
    """A simulation with its deadlock watch, or its invariant checker (which wraps the
    network's methods), released after the run: dropped, it is freed at once with the
    collector off (before, every simulation was a cycle through the wrappers, and Megatron's
    1T run's 1.57 M records stayed until a full collection found it)."""
    result = simulate(SCENARIOS / "pipeline" / "1f1b_m8.yaml")
    for kind in (Watch, Checker):
        sim = Simulation(result.topology)
        watch = kind(sim)
        sim.process(pause(sim.env))  # the wrapper in use
        assert watch.processes
        sim.env.run()
        watch.release()
        probe = weakref.ref(sim)
        gc.disable()
        try:
            del sim, watch
            assert probe() is None, kind.__name__
        finally:
            gc.enable()


@pytest.mark.parametrize("check", [False, True])
def test_a_dropped_run_leaves_its_records_to_no_cycle(collector: None, check: bool) -> None:
    """After ``simulate`` (invariants checked or not) and its Result dropped, the collector
    finds no record among the garbage: reference counts freed them all."""
    gc.disable()
    try:
        simulate(SCENARIOS / "pipeline" / "1f1b_m8.yaml", check=check).summary_json()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kinds = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert "Record" not in kinds and "Simulation" not in kinds, kinds


def test_whether_another_froze_is_counted_once(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc.get_freeze_count walks every frozen object (in a test worker, the whole heap
    conftest froze): a process seen to freeze is not counted again at each large pause."""
    counted = []
    real = gc.get_freeze_count
    monkeypatch.setattr(host, "_OTHERS_FREEZE", False)
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or real())
    gc.freeze()
    for _ in range(3):
        assert made_in_a_pause(host.PROMOTE_AFTER + 1000)
    assert len(counted) == 1
    assert host._OTHERS_FREEZE
