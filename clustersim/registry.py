"""One registry mechanism for every kind of plugin.

Strategies, collective algorithms, pipeline schedules, model presets and CLI
commands each have a :class:`Registry`.  A class registers itself by
subclassing a base that derives from :class:`Registered` and defining
``name`` (``__init_subclass__`` does the rest); a function registers itself
with the :meth:`Registry.register` decorator.  So adding a schedule or an
algorithm is one new file with one new class in it.

Every registry is listed in :data:`REGISTRIES` under its plural label
(``strategies``, ``algorithms``, ...): ``clustersim list LABEL`` prints one
line per entry from the registry's ``describe`` function.

**Discovery.**  A registry finds its entries itself, on its first lookup: it imports
the modules it names in ``builtins`` (dotted names: the built-in plugins, which may
live in any layer above the registry) and loads the entry points of its
``entry_points`` group (third-party plugins).  So a base class never imports its
subclasses, and this module is the only one that imports by name
(``tests/test_layers.py`` holds both).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any, ClassVar, Generic, TypeVar

from .errors import ClustersimError, Problem, ScenarioError, hinted

T = TypeVar("T")

REGISTRIES: dict[str, Registry[Any]] = {}
"""Every registry by its plural label, in creation order."""
REGISTRY_HOMES: dict[str, str] = {
    "strategies": "clustersim.strategies",
    "algorithms": "clustersim.collectives",
    "network-models": "clustersim.collectives",
    "schedules": "clustersim.parallel.schedules",
    "tp-modes": "clustersim.parallel.tp_modes",
    "compute-models": "clustersim.compute",
    "fabrics": "clustersim.topology",
    "models": "clustersim.model",
    "summaries": "clustersim.metrics",
    "commands": "clustersim.cli",
    "calibrations": "clustersim.cli",
    "gpus": "clustersim.hardware",
    "nodes": "clustersim.hardware",
}
"""Each built-in registry's label and the package that creates it when imported."""


_CHANGES = [0]
"""How many times any registry's entries changed (added, replaced, removed, reloaded)."""


def changes() -> int:
    """A number that changes whenever any registry's entries do (what is built from the
    registries, such as the command line's parser, is kept while it stays the same)."""
    return _CHANGES[0]


def registry_of(label: str) -> Registry[Any]:
    """The registry labelled ``label``, its home package imported (a scenario key naming a
    plugin is checked against it)."""
    home = REGISTRY_HOMES.get(label)
    if home is not None:
        importlib.import_module(home)
    return REGISTRIES[label]


def all_registries() -> dict[str, Registry[Any]]:
    """Every registry by label, once the packages that create them are imported
    (``clustersim list``)."""
    for home in dict.fromkeys(REGISTRY_HOMES.values()):
        importlib.import_module(home)
    return dict(REGISTRIES)


def _default_line(name: str, entry: Any) -> str:
    doc = getattr(entry, "description", "") or (getattr(entry, "__doc__", "") or "")
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    return f"{name:<20} {first}"


class Registry(Generic[T]):
    """Named entries of one kind, with aliases and did-you-mean errors.

    ``label`` is the plural that ``clustersim list`` takes (``schedules``);
    ``kind`` the singular used in messages (``pipeline schedule``);
    ``describe(name, entry)`` the line ``clustersim list`` prints for an
    entry; ``sort`` whether listing and iteration are by name (else in
    registration order).  Before the first lookup, once, the registry imports
    the modules named in ``builtins`` (in order), calls ``loader`` (entries
    that are data, not modules) and loads the entry points of the group
    ``entry_points`` (sorted by name).  ``unknown`` is
    the message of :meth:`lookup` for a name that is not registered (``{kind}``
    and ``{name}`` are filled in); ``unique`` makes registering a taken name
    (or alias) a ValueError instead of a replacement.
    """

    def __init__(
        self,
        label: str,
        kind: str,
        *,
        describe: Callable[[str, T], str] = _default_line,
        sort: bool = False,
        builtins: Iterable[str] = (),
        loader: Callable[[], None] | None = None,
        entry_points: str | None = None,
        unknown: str = "unknown {kind} {name!r}",
        unique: bool = False,
    ) -> None:
        self.label = label
        self.kind = kind
        self.describe = describe
        self.sort = sort
        self.builtins = tuple(builtins)
        """Dotted names of the modules whose entries register on import."""
        self.entry_points = entry_points
        """The entry-point group of third-party entries (None: none)."""
        self._loader = loader
        self._loaded = False
        self.unknown = unknown
        self.unique = unique
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._ordered: dict[str, T] | None = None
        """The entries in :meth:`entries`' order, once worked out (None after a change)."""
        REGISTRIES[label] = self

    def add(self, name: str, entry: T, aliases: Iterable[str] = ()) -> None:
        """Register ``entry`` as ``name`` (a later entry of the same name replaces it,
        unless the registry is ``unique``)."""
        if self.unique and (name in self._entries or name in self._aliases):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._ordered = None
        _CHANGES[0] += 1
        self._entries[name] = entry
        for alias in aliases:
            self._aliases[alias] = name

    def remove(self, name: str) -> None:
        """Forget the entry ``name`` and its aliases (for tests that register a throwaway)."""
        self._ordered = None
        _CHANGES[0] += 1
        self._entries.pop(name, None)
        for alias in [a for a, target in self._aliases.items() if target == name]:
            del self._aliases[alias]

    def register(self, name: str, aliases: Iterable[str] = ()) -> Callable[[T], T]:
        """Decorator: register the decorated object as ``name``."""

        def decorate(entry: T) -> T:
            self.add(name, entry, aliases)
            return entry

        return decorate

    def load(self) -> None:
        """Find the entries: import the built-in modules, run the loader, load the entry
        points; once (lookups call it).  A plugin that fails to load is a ClustersimError
        naming it, so a broken plugin never hides the built-ins' error messages."""
        if self._loaded:
            return
        self._loaded = True  # first: a module registering on import may look things up
        for module in self.builtins:
            importlib.import_module(module)
        if self._loader is not None:
            self._loader()
        if self.entry_points is not None:
            self._load_entry_points(self.entry_points)

    def _load_entry_points(self, group: str) -> None:
        for entry in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
            try:
                entry.load()
            except Exception as exc:
                raise ClustersimError(
                    f"{self.kind} plugin '{entry.name}' ({entry.value}) failed to load: {exc}"
                ) from exc

    def reload(self) -> None:
        """Find the entries again on the next lookup (for tests that change entry points)."""
        self._loaded = False
        _CHANGES[0] += 1

    def canonical(self, name: str) -> str:
        """``name`` with an alias resolved (unknown names come back unchanged)."""
        return self._aliases.get(name, name)

    def get(self, name: str) -> T | None:
        """The entry called ``name`` (or one of its aliases), or None."""
        self.load()
        return self._entries.get(self.canonical(name))

    def lookup(self, name: object, path: str = "") -> T:
        """The entry called ``name``; ScenarioError at key ``path`` (with a hint) if none."""
        found = self.get(name) if isinstance(name, str) else None
        if found is None:
            names = self.names()
            raise ScenarioError(
                Problem(
                    path,
                    hinted(
                        self.unknown.format(kind=self.kind, name=name),
                        name,
                        [*names, *self._aliases],
                    ),
                    allowed=", ".join(names),
                )
            )
        return found

    def names(self) -> list[str]:
        """Registered names (aliases left out)."""
        return list(self.entries())

    def aliases(self) -> dict[str, str]:
        """Alias -> canonical name."""
        self.load()
        return dict(self._aliases)

    def entries(self) -> dict[str, T]:
        """A copy of the name -> entry mapping: sorted by name if ``sort``; else the built-in
        entries by their module's place in ``builtins``, each module's in the order it
        registered them, then the others in registration order.  So the order never depends
        on which module happened to be imported first.  The order is worked out once per
        change of the entries (a collective's check looks its algorithms up at every call)."""
        self.load()
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = self._in_order()
        return dict(ordered)

    def _in_order(self) -> dict[str, T]:
        """The entries in :meth:`entries`' order."""
        if self.sort:
            return dict(sorted(self._entries.items()))
        if not self.builtins:
            return dict(self._entries)
        rank = self._builtin_rank
        return dict(sorted(self._entries.items(), key=lambda item: rank(item[1])))

    def _builtin_rank(self, entry: Any) -> int:
        """The place in ``builtins`` of the module that defined ``entry`` (a class or
        function's ``__module__``, else its ``module`` attribute); past the end if none."""
        if inspect.isclass(entry) or inspect.isroutine(entry):
            module = entry.__module__
        else:
            module = getattr(entry, "module", None)
        if isinstance(module, str):
            for i, builtin in enumerate(self.builtins):
                if module == builtin or module.startswith(builtin + "."):
                    return i
        return len(self.builtins)

    def lines(self) -> list[str]:
        """What ``clustersim list LABEL`` prints: one line per entry."""
        return [self.describe(name, entry) for name, entry in self.entries().items()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.label!r}, {len(self._entries)} entries)"


class Registered:
    """Base for classes that register themselves in their base class's ``registry``.

    A base class sets ``registry = Registry(...)``; every subclass that
    defines ``name`` in its own body is added to it when the class is created.
    """

    registry: ClassVar[Registry[Any]]
    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "registry" not in cls.__dict__:
            cls.registry.add(cls.name, cls)
