"""``network.model`` is checked against the network-model registry, the one list of models
(no ``Literal`` beside it): an unknown name is refused at its key with a guess, and a model
registered from outside the package is accepted by the schema and runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim import simulate
from clustersim.cli import main
from clustersim.collectives.models import FlowLevel, NetworkModel

RING = {
    "name": "ring",
    "cluster": {"kind": "switch", "devices": 4, "link": {"bandwidth": "10GB/s"}},
    "workload": {"collective": "allreduce", "bytes": "8MB", "algorithm": "ring"},
}


def _write(tmp_path: Path, model: str) -> str:
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump({**RING, "network": {"model": model}}))
    return str(path)


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_unknown_model_is_refused_at_its_key_with_a_guess(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "flw")
    argv = [command, path, "-o", str(tmp_path / "out")] if command == "run" else [command, path]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path}: network.model: unknown network model 'flw'" in err
    assert "did you mean 'flow'?" in err and "allowed: flow, analytical" in err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def toy_model() -> Iterator[type[NetworkModel]]:
    """A network model added from outside the package: the flow-level model under a new
    name (a subclass defining ``name`` registers itself)."""

    class Toy(FlowLevel):
        name = "toy-flow"
        description = "the flow-level model under another name (a test's plugin)"

    yield Toy
    NetworkModel.registry.remove("toy-flow")


def test_a_model_registered_from_outside_is_accepted_and_runs(
    toy_model: Any, tmp_path: Path
) -> None:
    toy = simulate(_write(tmp_path, "toy-flow")).summary
    flow = simulate(_write(tmp_path, "flow")).summary
    assert toy["makespan_s"] == flow["makespan_s"] > 0
    assert "toy-flow" in NetworkModel.registry.names()


def test_main_takes_a_model_registered_after_it_first_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main`` keeps its parser between calls, but not past a registry change: a model
    registered after a first call is a choice of ``run --network`` at the next, and is
    refused again once removed."""
    path = _write(tmp_path, "flow")
    out = str(tmp_path / "out")
    assert main(["run", path, "-o", out, "--network", "flow"]) == 0

    class Late(FlowLevel):
        name = "late-flow"
        description = "registered after main's first call (a test's plugin)"

    try:
        assert main(["run", path, "-o", out, "--network", "late-flow"]) == 0
    finally:
        NetworkModel.registry.remove("late-flow")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["run", path, "-o", out, "--network", "late-flow"])
    assert exit_.value.code == 2 and "invalid choice: 'late-flow'" in capsys.readouterr().err
