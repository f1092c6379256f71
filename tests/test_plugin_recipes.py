"""Each "how to add" recipe of docs/ARCHITECTURE.md, followed from outside the package.

Every test here defines a toy plugin of one kind the way the recipe says, with nothing but
the public bases and registries, runs it through a scenario (or the CLI), checks what it
gives against a hand formula, and forgets it.  docs/ARCHITECTURE.md names each recipe's
test, and ``test_every_recipe_has_its_test`` keeps the two lists the same.  (A toy strategy,
schedule and network model are added by tests/test_strategies.py, tests/test_pipeline.py and
tests/test_network_model_registry.py, which the recipes name too.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clustersim import parse_scenario, simulate
from clustersim.cli import main
from clustersim.cli.base import EXIT_OK, Command, out
from clustersim.collectives.ring import Ring
from clustersim.compute.models import ComputeModel, Operation
from clustersim.errors import ScenarioError
from clustersim.model.layers import Layer, Model
from clustersim.model.presets import preset
from clustersim.parallel.tp_modes.one_d import Megatron1D
from clustersim.registry import REGISTRIES
from clustersim.topology import FABRICS, FabricBuilder, Link, Route, Topology

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9


@pytest.fixture
def forget() -> Iterator[list[tuple[str, str]]]:
    """(registry label, name) pairs the test registered, removed after it."""
    added: list[tuple[str, str]] = []
    yield added
    for label, name in added:
        REGISTRIES[label].remove(name)


# --------------------------------------------------------------------------- algorithm


def test_a_toy_algorithm_runs_from_a_scenario(forget: list[tuple[str, str]]) -> None:
    """An ``Algorithm`` subclass with a new ``name`` is a valid ``algorithm`` key at once:
    here a ring that only renames the built-in one, so its time is the ring's to the bit:
    2 (n-1)/n S / B for an all-reduce of S bytes on n devices behind a switch."""

    class ToyRing(Ring):
        name = "toy_ring"
        description = "the ring, under another name"

    forget.append(("algorithms", "toy_ring"))
    times = {}
    for algorithm in ("ring", "toy_ring"):
        document = {
            "name": "toy-algorithm",
            "cluster": {"kind": "switch", "devices": 4, "link": {"bandwidth": "10GB/s"}},
            "network": {"protocol": "none", "channels": 1},
            "workload": {
                "collective": "allreduce",
                "algorithm": algorithm,
                "bytes": "1GB",
                "group": "*",
            },
        }
        times[algorithm] = simulate(parse_scenario(document)).summary["makespan_s"]
    assert times["toy_ring"] == times["ring"]
    assert times["ring"] == pytest.approx(2 * 3 / 4 * GB / 10e9, rel=1e-6)


# --------------------------------------------------------------------------- fabric


class _LineRouter:
    """Devices on a line, each cabled to the next: the one route runs along it."""

    def __init__(self, right: list[Link], left: list[Link]) -> None:
        self.right, self.left = right, left  # [i]: i -> i+1, i+1 -> i

    def routes(self, src: Any, dst: Any) -> tuple[Route, ...]:
        i, j = src.index, dst.index
        if i < j:
            return (Route.of(self.right[k] for k in range(i, j)),)
        return (Route.of(self.left[k] for k in range(i - 1, j - 1, -1)),)


def _build_line(spec: Any) -> Topology:
    """A line of ``devices`` GPUs, cables of ``bandwidth_GBps`` GB/s."""
    options = spec.model_extra
    gpu = SimpleNamespace(flops_per_s=1e14, efficiency=1.0, memory_bytes=80e9)
    gpu.memory_bandwidth_Bps = 2e12
    b = FabricBuilder()
    names = [b.device(f"gpu{i}", "gpu", gpu) for i in range(int(options["devices"]))]
    right, left = [], []
    for a, c in zip(names, names[1:]):
        there, back = b.cable(a, c, float(options["bandwidth_GBps"]) * GB, 0.0)
        right.append(there)
        left.append(back)
    return Topology("line", b.devices, b.links, b.switches, _LineRouter(right, left))


def test_a_toy_fabric_runs_from_a_scenario(forget: list[tuple[str, str]]) -> None:
    """A builder added with ``FABRICS.add(kind, build)`` is a valid ``cluster.kind``; its
    other keys reach the builder.  A transfer end to end of a line of 4 crosses 3 cables:
    S / B (one flow, store-and-forward-free); a near miss of the kind gets a guess."""
    FABRICS.add("toy_line", _build_line)
    forget.append(("fabrics", "toy_line"))
    document = {
        "name": "toy-fabric",
        "cluster": {"kind": "toy_line", "devices": 4, "bandwidth_GBps": 5},
        "workload": {
            "program": [
                {"id": "end_to_end", "transfer": {"src": "gpu0", "dst": "gpu3", "bytes": "1GB"}}
            ]
        },
    }
    result = simulate(parse_scenario(document))
    assert result.summary["makespan_s"] == pytest.approx(GB / 5e9, rel=1e-9)
    document["cluster"]["kind"] = "toy_lien"
    with pytest.raises(ScenarioError, match="cluster.kind: unknown cluster kind 'toy_lien'"):
        parse_scenario(document)


# --------------------------------------------------------------------------- compute model


def _training(devices: int, compute: str, parallelism: dict[str, Any] | None = None) -> dict:
    """A tiny transformer trained for one iteration of 8 samples on ``devices`` GPUs of
    100 TFLOP/s priced by compute model ``compute``, behind one 100 GB/s switch."""
    document = {
        "name": "toy-training",
        "cluster": {
            "kind": "switch",
            "devices": devices,
            "device": {"flops": "100TFLOPS", "compute": {"model": compute}},
            "link": {"bandwidth": "100GB/s"},
        },
        "model": {
            "transformer": {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 512}
        },
        "training": {"global_batch": 8, "iterations": 1, "precision": "bf16"},
    }
    if parallelism:
        document["parallelism"] = parallelism
    return document


def _iteration(document: dict[str, Any]) -> float:
    return simulate(parse_scenario(document)).summary["iteration_time_s"]


def test_a_toy_compute_model_runs_from_a_scenario(forget: list[tuple[str, str]]) -> None:
    """A ``ComputeModel`` subclass with a ``name`` is a valid ``compute.model``, and prices
    the transformer's kernels: one at the flat model's rate gives the flat model's run; one
    at twice (none of) that time adds twice (takes away) the kernels' time, the layers the
    model does not price (memory-bound ones) and the optimizer unchanged."""

    class Scaled(ComputeModel):
        factor = 1.0

        def operation_seconds(self, op: Operation) -> float:
            return self.factor * op.flops / (self.peak_flops * self.efficiency)

    for name, factor in (("toy_none", 0.0), ("toy_once", 1.0), ("toy_twice", 2.0)):
        type(name, (Scaled,), {"name": name, "factor": factor, "description": name})
        forget.append(("compute-models", name))

    def iteration(model: str) -> float:
        return _iteration(_training(1, model))

    none, once, twice = (iteration(f"toy_{n}") for n in ("none", "once", "twice"))
    assert once == pytest.approx(iteration("flat"), rel=1e-9)
    assert twice - none == pytest.approx(2 * (once - none), rel=1e-9)
    assert once - none > 0.5 * once  # the kernels priced by the model are most of the time


# --------------------------------------------------------------------------- tp mode


def test_a_toy_tp_mode_runs_from_a_scenario(forget: list[tuple[str, str]]) -> None:
    """A ``TensorParallelMode`` subclass with a ``name`` is a valid ``parallelism.tp_mode``:
    Megatron's 1-D split under another name gives the 1-D run's iteration to the bit."""

    class Renamed(Megatron1D):
        name = "toy_1d"
        description = "Megatron-LM's 1-D split, renamed"

    forget.append(("tp-modes", "toy_1d"))

    def iteration(mode: str) -> float:
        return _iteration(_training(2, "flat", {"tp": 2, "tp_mode": mode}))

    assert iteration("toy_1d") == iteration("1d") > 0


# --------------------------------------------------------------------------- model preset


def test_a_toy_model_preset_runs_from_a_scenario(forget: list[tuple[str, str]]) -> None:
    """A function decorated with ``@preset(name, description)`` is a valid ``model.preset``:
    a two-layer toy of 1 GFLOP forward per sample (backward twice that) computes 8 samples'
    passes on one 100 TFLOP/s device with the flat model in 3 x 8 GFLOP / 100 TFLOP/s."""
    layers = tuple(
        Layer(f"dense{i}", params=1e6, forward_flops=0.5e9, backward_flops=1e9, activation_bytes=0)
        for i in range(2)
    )

    @preset("toy-mlp", "two dense layers of 0.5 GFLOP forward per sample")
    def toy_mlp() -> Model:
        return Model("toy-mlp", layers)

    forget.append(("models", "toy-mlp"))
    document = {
        "name": "toy-preset",
        "cluster": {
            "kind": "switch",
            "devices": 1,
            "device": {"flops": "100TFLOPS", "compute": {"model": "flat"}},
            "link": {"bandwidth": "100GB/s"},
        },
        "model": {"preset": "toy-mlp"},
        "training": {"global_batch": 8, "iterations": 1},
    }
    result = simulate(parse_scenario(document))
    passes = [r for r in result.records if r.phase in ("forward", "backward")]
    assert [r.label for r in passes] == ["fwd dense0", "fwd dense1", "bwd dense1", "bwd dense0"]
    assert sum(r.end_s - r.start_s for r in passes) == pytest.approx(3 * 8e9 / 100e12, rel=1e-9)


# --------------------------------------------------------------------------- command


def test_a_toy_command_runs_from_the_cli(forget: list[tuple[str, str]], capsys) -> None:
    """A ``Command`` subclass with a ``name`` is a ``clustersim`` subcommand: its arguments
    parse, its ``run`` runs, its exit code comes back."""

    class Echo(Command):
        name = "toy-echo"
        help = "print the words given, joined"

        def add_arguments(self, parser: Any) -> None:
            parser.add_argument("words", nargs="+")

        def run(self, args: Any) -> int:
            out(" ".join(args.words))
            return EXIT_OK

    forget.append(("commands", "toy-echo"))
    assert main(["toy-echo", "one", "two"]) == EXIT_OK
    assert capsys.readouterr().out == "one two\n"


# --------------------------------------------------------------------------- the docs


RECIPE_TESTS = {
    "strategy": "tests/test_strategies.py::test_registered_strategy_runs",
    "collective algorithm": "tests/test_plugin_recipes.py::test_a_toy_algorithm_runs_from_a_scenario",
    "pipeline schedule": "tests/test_pipeline.py::test_a_new_schedule_runs_from_a_scenario",
    "fabric": "tests/test_plugin_recipes.py::test_a_toy_fabric_runs_from_a_scenario",
    "network model": (
        "tests/test_network_model_registry.py::test_a_model_registered_from_outside_is_accepted_and_runs"
    ),
    "compute model": "tests/test_plugin_recipes.py::test_a_toy_compute_model_runs_from_a_scenario",
    "tensor-parallel mode": "tests/test_plugin_recipes.py::test_a_toy_tp_mode_runs_from_a_scenario",
    "model preset": "tests/test_plugin_recipes.py::test_a_toy_model_preset_runs_from_a_scenario",
    "command": "tests/test_plugin_recipes.py::test_a_toy_command_runs_from_the_cli",
}
"""Each recipe of docs/ARCHITECTURE.md ("A strategy.", ...) and the test that follows it."""


def _defined(node_id: str) -> bool:
    path, name = node_id.split("::")
    return re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M) is not None


def test_every_recipe_has_its_test() -> None:
    """docs/ARCHITECTURE.md's recipes are exactly :data:`RECIPE_TESTS`' kinds, each names
    its test, and each test exists."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    recipes = re.findall(r"^- \*\*An? ([^.*]+)\.\*\*", text, re.M)
    assert sorted(recipes) == sorted(RECIPE_TESTS)
    for kind, node_id in RECIPE_TESTS.items():
        assert f"`{node_id}`" in text, kind
        assert _defined(node_id), node_id


def test_every_typed_cluster_kind_is_a_registered_fabric() -> None:
    """The built-in kinds the schema types (scenario/cluster.py) are exactly the built-in
    fabrics' kinds: the registry holds every kind, the schema adds only their keys."""
    from clustersim.scenario.cluster import CLUSTER_KINDS

    builtin = [k for k in FABRICS.names() if FABRICS.get(k).__module__.startswith("clustersim.")]
    assert sorted(CLUSTER_KINDS) == sorted(builtin)
