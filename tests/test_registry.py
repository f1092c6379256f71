"""The one registry mechanism: lookups, aliases, errors, self-registering classes."""

from __future__ import annotations

from typing import ClassVar

import pytest

from clustersim.errors import ScenarioError
from clustersim.registry import REGISTRIES, Registered, Registry


@pytest.fixture
def registry():
    reg: Registry[str] = Registry("widgets-test", "widget", unique=True)
    yield reg
    del REGISTRIES["widgets-test"]


def test_lookup_aliases_and_did_you_mean(registry: Registry[str]) -> None:
    registry.add("spanner", "S", aliases=("wrench",))
    registry.add("hammer", "H")
    assert registry.lookup("wrench") == "S"
    assert registry.canonical("wrench") == "spanner"
    assert registry.names() == ["spanner", "hammer"]
    assert "hammer" in registry and "saw" not in registry and 3 not in registry
    with pytest.raises(ScenarioError) as err:
        registry.lookup("hamer", "tool.kind")
    text = str(err.value)
    assert "tool.kind" in text and "unknown widget 'hamer'" in text
    assert "did you mean" in text and "hammer" in text


def test_unique_registry_refuses_a_taken_name(registry: Registry[str]) -> None:
    registry.add("a", "1", aliases=("b",))
    for taken in ("a", "b"):
        with pytest.raises(ValueError, match="already registered"):
            registry.add(taken, "2")
    registry.remove("a")
    assert registry.names() == [] and registry.aliases() == {}
    registry.add("b", "3")  # the alias went with its entry


def test_loader_runs_once_before_the_first_lookup() -> None:
    calls = []
    reg: Registry[int] = Registry(
        "lazy-test", "thing", loader=lambda: calls.append(reg.add("x", 1))
    )
    try:
        assert calls == []
        assert reg.get("x") == 1 and reg.get("x") == 1
        assert len(calls) == 1
    finally:
        del REGISTRIES["lazy-test"]


def test_subclasses_register_themselves() -> None:
    class Base(Registered):
        registry: ClassVar[Registry[type]] = Registry("bases-test", "base", sort=True)

    try:

        class Zeta(Base):
            name = "zeta"

        class Alpha(Base):
            name = "alpha"

        class Unnamed(Alpha):  # inherits a name: not registered again
            pass

        assert Base.registry.entries() == {"alpha": Alpha, "zeta": Zeta}
    finally:
        del REGISTRIES["bases-test"]


@pytest.mark.parametrize(
    ("label", "at_least"),
    [
        ("strategies", 6),
        ("algorithms", 8),
        ("models", 20),
        ("fabrics", 7),
        ("network-models", 2),
        ("compute-models", 2),
    ],
)
def test_builtin_registries_list_their_entries(label: str, at_least: int) -> None:
    import clustersim.collectives  # noqa: F401  (registers the algorithms' registry)
    import clustersim.collectives.models  # noqa: F401
    import clustersim.compute  # noqa: F401
    import clustersim.model  # noqa: F401
    import clustersim.strategies  # noqa: F401
    import clustersim.topology  # noqa: F401

    registry = REGISTRIES[label]
    lines = registry.lines()
    assert len(lines) == len(registry) >= at_least
    for name, line in zip(registry.names(), lines):
        assert line.startswith(name)


def test_an_unknown_network_model_is_a_scenario_error() -> None:
    from clustersim.collectives.models import network_model

    assert network_model("flow").plays_sends and not network_model("analytical").plays_sends
    with pytest.raises(ScenarioError, match="unknown network model 'flwo'.*did you mean"):
        network_model("flwo")


def test_every_registry_finds_its_builtins_and_each_registers_entries() -> None:
    """``clustersim list`` shows every registry the packages create; each module a registry
    names as built-in imports and registers at least one of its entries (classes and
    functions carry the module that defined them, a model preset the module that
    registered it)."""
    import inspect

    from clustersim.registry import REGISTRY_HOMES, all_registries

    registries = all_registries()
    builtin = {label for label, r in registries.items() if not label.endswith("-test")}
    assert builtin == set(REGISTRY_HOMES)  # every registry has its home, each home its registries
    assert all(home.startswith("clustersim.") for home in REGISTRY_HOMES.values())
    for label, registry in registries.items():
        entries = list(registry.entries().values())
        modules = (
            {
                e.__module__ if inspect.isclass(e) or inspect.isfunction(e) else e.module
                for e in entries
            }
            if registry.builtins
            else set()
        )
        for builtin in registry.builtins:
            assert any(m == builtin or m.startswith(builtin + ".") for m in modules), (
                label,
                builtin,
            )


def test_listing_order_does_not_depend_on_import_order() -> None:
    """A built-in module imported before the first lookup lists in its place in the
    registry's ``builtins``, not first: the algorithms, in a fresh interpreter that imports
    the scatter-allgather module first, list as they do otherwise (auto, ring, ...)."""
    import subprocess
    import sys

    from clustersim.collectives.algorithm import Algorithm

    code = (
        "import clustersim.collectives.scatter_allgather\n"
        "from clustersim.collectives.algorithm import Algorithm\n"
        "print(','.join(Algorithm.registry.names()))"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names = [  # the built-in ones: other tests register algorithms of their own
        name
        for name, cls in Algorithm.registry.entries().items()
        if cls.__module__.startswith("clustersim.")
    ]
    assert fresh.stdout.strip().split(",") == names
    assert names[:2] == ["auto", "ring"]
