"""Old import paths the README documented, kept for one release with a DeprecationWarning.

Five modules moved into packages: ``clustersim.sweep``, ``clustersim.plan`` and
``clustersim.golden`` into :mod:`clustersim.studies`, ``clustersim.trace`` and
``clustersim.report`` into :mod:`clustersim.outputs`.  ``import clustersim.sweep`` (or
``from clustersim import plan``) still works: :class:`OldPaths`, a finder on
``sys.meta_path``, gives a module that warns once and reads every name from the new home
(``clustersim.report``'s names from the several output modules that hold them now).  No
file stands at an old path.  Installed by ``clustersim/__init__.py``; nothing here imports
more than the standard library until an old path is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

MOVED: dict[str, str] = {
    "clustersim.sweep": "clustersim.studies.sweep",
    "clustersim.plan": "clustersim.studies.plan",
    "clustersim.golden": "clustersim.studies.golden",
    "clustersim.trace": "clustersim.outputs.trace",
}
"""Old path -> the module that is its new home."""

REPORT_NAMES: dict[str, str] = {
    **dict.fromkeys(("save_figure",), "clustersim.outputs.atomic"),
    **dict.fromkeys(
        (
            "COLOURS",
            "COMM_LANE",
            "COMPUTE_LANE",
            "KINDS",
            "LEGEND",
            "MAX_BOXES",
            "MAX_ROWS",
            "MAX_TEXT_LABELS",
            "Box",
            "GanttData",
            "box_kind",
            "draw_gantt",
            "gantt_counts",
            "gantt_data",
            "gantt_figure",
            "write_gantt",
        ),
        "clustersim.outputs.gantt",
    ),
    **dict.fromkeys(("report_html", "write_report"), "clustersim.outputs.html"),
    **dict.fromkeys(("read_links",), "clustersim.outputs.links"),
    **dict.fromkeys(
        ("BUSIEST_LINKS", "links_figure", "memory_figure", "memory_peaks", "memory_series"),
        "clustersim.outputs.plots",
    ),
    **dict.fromkeys(("read_summary",), "clustersim.outputs.run_folder"),
    **dict.fromkeys(("read_timeline",), "clustersim.outputs.timeline"),
}
"""``clustersim.report``'s names -> the module of :mod:`clustersim.outputs` holding each."""

OLD_PATHS = (*MOVED, "clustersim.report")
"""Every old path :class:`OldPaths` answers for."""


def new_home(old: str) -> str:
    """Where the old path ``old`` lives now, for the warning (``clustersim.report``:
    several modules of :mod:`clustersim.outputs`)."""
    return MOVED.get(old, "clustersim.outputs (gantt, html, plots, timeline, ...)")


class _OldModule(types.ModuleType):
    """A module at an old path: every name read from its new home."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        home = MOVED.get(self.__name__) or REPORT_NAMES.get(name)
        if home is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    def __dir__(self) -> list[str]:
        home = MOVED.get(self.__name__)
        if home is None:
            return sorted(REPORT_NAMES)
        return sorted(dir(importlib.import_module(home)))


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the old paths (:data:`OLD_PATHS`) as :class:`_OldModule` objects,
    warning (DeprecationWarning) where one is imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in OLD_PATHS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _OldModule(spec.name)
        module.__doc__ = f"Deprecated alias of {new_home(spec.name)}."
        home = MOVED.get(spec.name)
        names = REPORT_NAMES if home is None else None
        if names is not None:
            module.__all__ = sorted(names)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(
            f"{module.__name__} is deprecated and goes in the next release: "
            f"import {new_home(module.__name__)} instead",
            DeprecationWarning,
            stacklevel=_importer_level(),
        )


def _importer_level() -> int:
    """The stack level of the code that imported an old path (past importlib's frames)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__
    ):
        frame, level = frame.f_back, level + 1
    return level


def install() -> None:
    """Put :class:`OldPaths` on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldPaths())
