"""Import layers: no cycles among clustersim modules, outputs below the public API.

The graph is read from the source (``ast``), not by importing: an edge A -> B
means module A imports module B at module level (imports inside functions and
under ``if TYPE_CHECKING:`` are not counted, as they run later or never).
``from . import x`` is an edge to the submodule ``x`` when there is one, else
to the package (its ``__init__``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import clustersim

PACKAGE = Path(clustersim.__file__).parent
ABOVE_OUTPUTS = ("clustersim.api", "clustersim.cli", "clustersim.sweep", "clustersim.plan")
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
    """The graph sees the public package -> api -> records and outputs, and a lazy import
    only when asked."""
    graph = import_graph()
    assert "clustersim.api" in graph["clustersim"]
    assert "clustersim.records" in graph["clustersim.api"]
    assert "clustersim.outputs.run_folder" in graph["clustersim.api"]
    assert "clustersim.invariants" not in graph["clustersim.api"]
    assert "clustersim.invariants" in import_graph(nested=True)["clustersim.api"]


def test_no_import_cycles_among_clustersim_modules() -> None:
    """Module-level imports form no cycle anywhere in the package."""
    assert cycles(import_graph()) == []


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
    ("errors", "units", "version", "registry", "budget"),
    ("scenario",),
    ("topology",),
    ("network",),
    ("engine", "devices", "records"),
    ("model", "collectives", "parallel", "invariants", "metrics"),
    ("strategies",),
    ("outputs",),
    ("api",),
    ("studies",),
    ("cli", "pytest_plugin"),
)
"""The package's layers, lowest first (docs/ARCHITECTURE.md): a module imports, at module
level, only modules of its own layer or of a lower one.  Plugin loaders (a registry
importing the modules that register into it) import upwards inside a function, which
this does not count."""

ALIASES = (
    "models",
    "training",
    "memory",
    "transformer",
    "activations",
    "pipeline",
    "tensor_parallel",
    "placement",
    "sweep",
    "golden",
    "plan",
    "report",
    "trace",
)
"""Compatibility modules at the old paths: they sit above everything (nothing inside the
package may import them)."""


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    if top in ALIASES:
        return len(LAYERS)
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return -1  # the package __init__: the public re-exports, above nothing in particular


STUDIES_AT_OLD_PATHS = {"clustersim.collectives.bench": _layer("clustersim.studies.x")}
"""Modules that are studies by what they do but keep their public path: the nccl-tests
style collective sweep (README: ``clustersim.collectives.bench``) writes its CSV and plot
through outputs."""


def _level(module: str) -> int:
    return STUDIES_AT_OLD_PATHS.get(module, _layer(module))


def test_modules_import_only_their_layer_or_lower_ones() -> None:
    graph = import_graph()
    upward = {
        name: sorted(t for t in targets if _level(t) > _level(name))
        for name, targets in graph.items()
        if _level(name) >= 0 and any(_level(t) > _level(name) for t in targets)
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
