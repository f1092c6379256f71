"""Import layers: no cycles among clustersim modules, each layer above the ones it uses.

The graph is read from the source (``ast``), not by importing: an edge A -> B
means module A imports module B, at module level or inside a function (it runs,
so it is a dependency); only imports under ``if TYPE_CHECKING:`` are left out
(they never run).  ``from . import x`` is an edge to the submodule ``x`` when
there is one, else to the package (its ``__init__``).

Plugins are found by their registry (:mod:`clustersim.registry`: a registry imports
the modules named in its ``builtins`` and its entry points on first lookup), the one
place where the package imports by name; a test below keeps it the only one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import clustersim
from clustersim import _compat

PACKAGE = Path(clustersim.__file__).parent
ABOVE_OUTPUTS = ("clustersim.api", "clustersim.cli", "clustersim.studies")
"""Modules that use the outputs package; none of its modules may import them, even lazily."""
MAX_LINES = 600


def modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) of every module under ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt], nested: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements of ``body``: module level only, or also inside functions (``nested``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _type_checking(node):
            continue
        elif nested or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.AST):
                    yield from _imports(inner, nested)  # type: ignore[arg-type]


def import_graph(nested: bool = False, root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the clustersim modules it imports (see the module docstring)."""
    found = modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, package) in found.items():
        here = name if package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, nested):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in found)
                continue
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in found:
                    edges.add(sub)
                elif base in found:
                    edges.add(base)
        graph[name] = edges - {name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    """A three-module loop is one component; a chain and a self-import are none."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_relative_imports_resolve_to_modules() -> None:
    """The graph sees api -> records and outputs, and a lazy import only when asked; the
    package itself imports only its version and the finder of old paths, both standard
    library only (its public names load on first use, so the console entry stays light)."""
    graph = import_graph()
    assert graph["clustersim"] == {"clustersim.version", "clustersim._compat"}
    assert graph["clustersim._compat"] == set()
    assert graph["clustersim.console"] == set()
    assert "clustersim.records" in graph["clustersim.api"]
    assert "clustersim.outputs.run_folder" in graph["clustersim.api"]
    assert "clustersim.invariants" not in graph["clustersim.api"]
    assert "clustersim.invariants" in import_graph(nested=True)["clustersim.api"]


def test_no_import_cycles_among_clustersim_modules() -> None:
    """Imports form no cycle anywhere in the package, counting those inside functions."""
    assert cycles(import_graph(nested=True)) == []


def test_the_cycle_test_sees_imports_inside_functions(tmp_path: Path) -> None:
    """A loop closed by an import inside a function is a cycle; one closed under
    ``if TYPE_CHECKING:`` is not."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from . import b\n")
    (root / "b.py").write_text("def f():\n    from . import a\n")
    (root / "c.py").write_text("from . import d\n")
    (root / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    assert cycles(import_graph(nested=True, root=root)) == [["pkg.a", "pkg.b"]]
    assert cycles(import_graph(root=root)) == []


NAMED_IMPORTERS = frozenset({"clustersim.registry", "clustersim._compat", "clustersim"})
"""The modules that may import by name (``importlib``): the registry's plugin discovery,
the finder of old paths and the package's lazily loaded public names."""


def test_only_the_registry_imports_by_name() -> None:
    """No module but the registry (and the two entry points of the package) calls
    ``importlib.import_module`` or ``__import__``: every other dependency is an import
    statement the graph above sees."""
    found = {}
    for name, (path, _) in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in {"import_module", "__import__"}
                )
            )
        ]
        if calls and name not in NAMED_IMPORTERS:
            found[name] = calls
    assert found == {}


def test_outputs_never_import_the_layers_above_them() -> None:
    """clustersim.outputs modules import neither the API nor the CLI nor the studies, not
    even inside a function: those use outputs, never the other way round."""
    graph = import_graph(nested=True)
    wrong = {
        name: sorted(edges.intersection(ABOVE_OUTPUTS))
        for name, edges in graph.items()
        if name.startswith("clustersim.outputs") and edges.intersection(ABOVE_OUTPUTS)
    }
    assert wrong == {}


def test_output_modules_stay_under_600_lines() -> None:
    """Every module of clustersim.outputs is short enough to read."""
    long = {
        path.name: n
        for path in (PACKAGE / "outputs").rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES
    }
    assert long == {}


LAYERS = (
    (
        "errors",
        "units",
        "version",
        "_compat",
        "registry",
        "host",
        "budget",
        "memo",
        "caches",
        "compute",
        "hardware",
    ),
    ("scenario", "workload_trace", "importers"),
    ("topology",),
    ("network",),
    ("engine", "transfers", "devices", "records", "barrier"),
    ("model", "collectives", "parallel", "invariants", "metrics", "goodput"),
    ("strategies",),
    ("resilience",),
    ("outputs",),
    ("api",),
    ("studies", "validation", "calibrate"),
    ("cli", "console", "pytest_plugin", "reference"),
)
"""The package's layers, lowest first (docs/ARCHITECTURE.md): a module imports, at module
level or inside a function, only modules of its own layer or of a lower one.  A registry
finds plugins above it by name (its ``builtins``), which is no import statement."""

OLD_PATHS = frozenset(_compat.OLD_PATHS)
"""The old paths :mod:`clustersim._compat` keeps importable (no file stands there): above
everything, so no module of the package may import one."""


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    if module in OLD_PATHS:
        return len(LAYERS)
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return -1  # the package __init__: the public re-exports, above nothing in particular


def test_modules_import_only_their_layer_or_lower_ones() -> None:
    graph = import_graph(nested=True)
    upward = {
        name: sorted(t for t in targets if _layer(t) > _layer(name))
        for name, targets in graph.items()
        if _layer(name) >= 0 and any(_layer(t) > _layer(name) for t in targets)
    }
    assert upward == {}


def test_every_top_level_module_has_a_layer() -> None:
    tops = {name.split(".")[1] for name in modules() if name.count(".")}
    unplaced = sorted(t for t in tops if t != "__main__" and _layer(f"clustersim.{t}") < 0)
    assert unplaced == []


def test_every_module_stays_under_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES
    }
    assert long == {}


RECORD_SINK = "clustersim.engine"
"""The module that owns :attr:`Simulation.records`; every other module books through
:meth:`Simulation.book` and only reads the list."""
LIST_MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}
)


def _is_records(node: ast.AST, aliases: set[str]) -> bool:
    """``node`` is ``something.records`` or a name bound to one."""
    if isinstance(node, ast.Attribute):
        return node.attr == "records"
    return isinstance(node, ast.Name) and node.id in aliases


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return node.targets
    return []


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it (those are yielded, not
    entered)."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, _FUNCTIONS):
            yield from _own_nodes(child)


def _mutations(scope: ast.AST, inherited: frozenset[str]) -> Iterator[int]:
    """Lines of ``scope`` (and the functions in it) that change a ``.records`` list;
    ``inherited``: names of enclosing scopes bound to one."""
    nodes = list(_own_nodes(scope))
    bound = {t.id for n in nodes for t in _targets(n) if isinstance(t, ast.Name)}
    if isinstance(scope, _FUNCTIONS):
        bound.update(a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg))
    aliases = (inherited - bound) | {
        target.id
        for node in nodes
        if isinstance(node, ast.Assign) and _is_records(node.value, set())
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in nodes:
        if isinstance(node, _FUNCTIONS):
            yield from _mutations(node, frozenset(aliases))
        elif isinstance(node, ast.Attribute) and node.attr in LIST_MUTATORS:
            if _is_records(node.value, aliases):
                yield node.lineno
        for target in _targets(node):
            changed = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(changed, ast.Attribute) and changed.attr == "records":
                yield node.lineno
            elif isinstance(node, ast.AugAssign) or isinstance(target, ast.Subscript):
                if _is_records(changed, aliases):
                    yield node.lineno


def records_mutations(source: str) -> list[int]:
    """Lines of ``source`` that change a ``.records`` list: a mutating method of
    ``x.records`` (called or taken), ``x.records = / += ...``, ``x.records[...] = ...``,
    ``del x.records[...]``, or any of these on a name bound to ``x.records`` (in the same
    function or one it is defined in)."""
    return sorted(set(_mutations(ast.parse(source), frozenset())))


def test_records_mutation_finder_finds_the_ways_to_add_a_record() -> None:
    """Appending, extending, ``+=``, item assignment, a taken ``append`` and an alias are
    found; reading the records, rebinding a local and a list of one's own are not."""
    found = records_mutations(
        "sim.records.append(r)\n"
        "self.sim.records.extend(rs)\n"
        "sim.records += rs\n"
        "sim.records[0] = r\n"
        "add = sim.records.append\n"
        "def f(sim):\n"
        "    records = sim.records\n"
        "    records.append(r)\n"
        "    records += rs\n"
        "sim.records = []\n"
        "def h(sim):\n"
        "    records = sim.records\n"
        "    def later():\n"
        "        records.extend(rs)\n"
        "    del records[0]\n"
    )
    assert found == [1, 2, 3, 4, 5, 8, 9, 10, 14, 15]
    clean = (
        "records = sim.records\n"
        "n = len(sim.records)\n"
        "def g(sim):\n"
        "    records = []\n"
        "    records.append(r)\n"
        "    records = sorted(sim.records)\n"
        "    return [r for r in sim.records]\n"
        "def k(records):\n"
        "    records.append(r)\n"
    )
    assert records_mutations(clean) == []


def test_only_the_engine_adds_to_the_records() -> None:
    """No module but the engine appends to, extends or replaces a simulation's ``records``:
    the collectives and everything else book through ``Simulation.book``."""
    found = {
        name: lines
        for name, (path, _) in modules().items()
        if name != RECORD_SINK and (lines := records_mutations(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_package_exports_what_it_loads_on_first_use() -> None:
    """``clustersim.__all__`` (written out for linters) names exactly the lazily loaded
    public names and the version, and each resolves to its defining module's object."""
    import importlib

    import clustersim

    assert sorted(clustersim.__all__) == sorted([*clustersim._PUBLIC, "__version__"])
    for name, module in clustersim._PUBLIC.items():
        defining = importlib.import_module(module, "clustersim")
        assert getattr(clustersim, name) is getattr(defining, name)
    with pytest.raises(AttributeError):
        clustersim.no_such_name  # noqa: B018
