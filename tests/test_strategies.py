"""The strategy registry and third-party plugins through entry points."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from clustersim import parse_scenario, simulate
from clustersim import registry as registry_module
from clustersim.errors import ClustersimError, ScenarioError
from clustersim.strategies import Strategy, base, registered_strategies, strategy_for


class PingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ping: int


class Ping(Strategy):
    """A test strategy: gpu0 sends ``ping`` messages of 1 GB to gpu1, one after another."""

    name = "ping"
    description = "test strategy"
    config_model = PingConfig

    def start(self, sim) -> None:
        def proc():
            for _ in range(self.config.ping):
                yield sim.transfer("gpu0", "gpu1", 1e9)

        sim.process(proc())

    def summarize(self, sim):
        return {"pings": self.config.ping}


def ping_doc(n: int) -> dict:
    return {
        "name": "ping",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "1GB/s"}},
        "workload": {"ping": n},
    }


def test_subclass_registers_itself() -> None:
    """Defining a Strategy subclass with a name registers it."""
    assert registered_strategies()["ping"] is Ping
    assert "program" in registered_strategies()


@pytest.mark.parametrize("n", [1, 3])
def test_registered_strategy_runs(n: int) -> None:
    """A scenario whose workload names the plugin runs it and gets its summary keys."""
    result = simulate(parse_scenario(ping_doc(n)))
    assert result.makespan_s == pytest.approx(n * 1.0)
    assert result.summary["pings"] == n


def test_plugin_config_errors_carry_workload_path() -> None:
    """The plugin's own model validates its config with the workload key path."""
    with pytest.raises(ScenarioError, match=r"workload\.ping"):
        simulate(parse_scenario(ping_doc("many")))  # type: ignore[arg-type]


def test_workload_naming_two_kinds_is_an_error() -> None:
    """A workload mapping naming two strategies is ambiguous."""
    with pytest.raises(ScenarioError, match="several"):
        strategy_for({"ping": 1, "program": []})


@pytest.fixture
def fresh_strategies():
    """The strategy registry set to find its entries again (and again after the test)."""
    Strategy.registry.reload()
    yield Strategy.registry
    Strategy.registry.reload()


def test_entry_point_plugins_are_loaded(monkeypatch, fresh_strategies) -> None:
    """Modules named by the clustersim.strategies entry-point group are imported."""
    loaded = []

    class FakeEntryPoint:
        name = "fake"
        value = "fake_module:Fake"

        def load(self):
            loaded.append(self.name)

    def fake_entry_points(group: str):
        assert group == base.ENTRY_POINT_GROUP
        return [FakeEntryPoint()]

    monkeypatch.setattr(registry_module.metadata, "entry_points", fake_entry_points)
    fresh_strategies.load()
    assert loaded == ["fake"]


def test_broken_plugin_is_a_clear_error(monkeypatch, fresh_strategies) -> None:
    """A plugin that fails to import names itself in the error."""

    class Broken:
        name = "broken"
        value = "nowhere:Thing"

        def load(self):
            raise ImportError("no module named nowhere")

    monkeypatch.setattr(registry_module.metadata, "entry_points", lambda group: [Broken()])
    with pytest.raises(ClustersimError, match="strategy plugin 'broken'"):
        fresh_strategies.load()
