"""The hardware catalog: GPUs and nodes described by name, as data files with their sources.

Every GPU and every node kind is one YAML file (``gpus/*.yaml``, ``nodes/*.yaml``, shipped
with the package); a user may write their own in the same format and name it by path
(``preset: ./my_gpu.yaml``, relative to the scenario file).  A file holds::

    kind: gpu                      # or node
    name: h100-sxm5-80gb           # lower case and hyphens
    title: NVIDIA H100 SXM5 80GB
    aliases: [h100-sxm, h100]
    references:                    # source id -> what it is and where
      bekman-tflops: "S. Bekman, Machine Learning Engineering, ..."
    spec:                          # the keys of cluster.node.gpu (or cluster.node), each
      memory: {value: 80GB, source: bekman-memory, note: "..."}     # number with its source
    interconnect:                  # GPUs: what joins them (information; nodes set links)
      nvlink: {value: 450GB/s, source: bekman-nvlink, note: "per direction"}

A value is either written plainly or as ``{value, source, note}``; the built-in files give
every number a source (``tests/test_hardware_catalog.py``).  GPU curves are written as
``{mamf | e_max, kernel_time}`` and become ``{e_max, kernel_time}`` here (:mod:`.presets`).

:data:`GPUS` and :data:`NODES` are registries (``clustersim list gpus``, ``clustersim list
nodes``); :func:`find` looks a name or a file up, with did-you-mean hints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..errors import Problem, ScenarioError, hinted, join_path
from ..registry import Registry
from .curves import check_memory_efficiency, curves_as_spec
from .listing import gpu_summary, node_summary

KINDS = ("gpu", "node")
"""What a catalog file describes."""
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
"""Preset names: lower case letters and digits in hyphen-separated words."""
HERE = Path(__file__).parent
"""The folder of the built-in files (``gpus/``, ``nodes/``)."""
MAX_FILE_BYTES = 1024 * 1024
"""Largest preset file accepted (a user's own), bytes."""
FILE_KEYS = ("kind", "name", "title", "aliases", "references", "spec", "interconnect")
"""The keys of a catalog file."""
UNNAMED_KEYS = frozenset({"preset", "model", "kernels"})
"""Spec keys whose values name things rather than measure them (no source needed)."""


@dataclass(frozen=True)
class Preset:
    """One catalog entry: a GPU or a node kind, its spec values and where each comes from."""

    kind: str
    """``gpu`` or ``node``."""
    name: str
    """Canonical name (``h100-sxm5-80gb``)."""
    title: str
    """What it is, in words (``NVIDIA H100 SXM5 80GB``)."""
    aliases: tuple[str, ...]
    """Other names that find it (``h100-sxm``)."""
    spec: Mapping[str, Any]
    """The values of its ``cluster.node.gpu`` (or ``cluster.node``) keys, as YAML writes them
    (``80GB``), sources stripped; GPU curves already as ``{e_max, kernel_time}``."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Dotted key path (``spec.peaks.bf16``) -> the reference id its value comes from."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Dotted key path -> a note on the value (dense vs sparse, per direction, assumed...)."""
    references: Mapping[str, str] = field(default_factory=dict)
    """Reference id -> citation (datasheet, paper, table, URL)."""
    interconnect: Mapping[str, Any] = field(default_factory=dict)
    """GPUs: their GPU-to-GPU links (``nvlink``, ``infinity_fabric``, ``pcie``), per direction."""
    unsourced: tuple[str, ...] = ()
    """Dotted paths of values written without a source (allowed in a user's own file)."""
    file: str = ""
    """The file it was read from."""


def _plain(node: Any, path: str, out: dict[str, dict[str, str]]) -> Any:
    """``node`` with each ``{value, source, note}`` leaf replaced by its value; the sources,
    notes and unsourced leaves are recorded in ``out`` by dotted path."""
    if isinstance(node, dict):
        if "value" in node and set(node) <= {"value", "source", "note"}:
            if node.get("source"):
                out["sources"][path] = str(node["source"])
            else:
                out["unsourced"][path] = ""
            if node.get("note"):
                out["notes"][path] = str(node["note"])
            return node["value"]
        return {key: _plain(value, join_path(path, str(key)), out) for key, value in node.items()}
    if path.rpartition(".")[2] not in UNNAMED_KEYS:
        out["unsourced"][path] = ""
    return node


def _problem(file: str, message: str, allowed: str = "") -> ScenarioError:
    return ScenarioError(Problem("preset", f"{file}: {message}", allowed))


def parse_preset(
    doc: object, file: str, kind: str | None = None, shared: Mapping[str, str] | None = None
) -> Preset:
    """The preset a loaded catalog file ``doc`` describes; ScenarioError (at key ``preset``,
    naming ``file``) if it is not one, or not of ``kind``.  ``shared``: references the file
    may cite besides its own (the built-in files' ``references.yaml``)."""
    if not isinstance(doc, dict):
        raise _problem(file, "a preset file is a mapping (kind, name, spec, ...)")
    unknown = sorted(set(doc) - set(FILE_KEYS))
    if unknown:
        raise _problem(file, f"unknown key {unknown[0]!r}", ", ".join(FILE_KEYS))
    if doc.get("kind") not in KINDS or (kind is not None and doc.get("kind") != kind):
        wanted = kind or " | ".join(KINDS)
        raise _problem(file, f"kind is {doc.get('kind')!r}", f"kind: {wanted}")
    name, aliases = doc.get("name", Path(file).stem), doc.get("aliases", [])
    spec, references = doc.get("spec", {}), doc.get("references", {})
    shapes = (isinstance(name, str), isinstance(aliases, list), isinstance(spec, dict))
    if not all(shapes) or not isinstance(references, dict):
        raise _problem(file, "name must be text, aliases a list, spec and references mappings")
    recorded: dict[str, dict[str, str]] = {"sources": {}, "notes": {}, "unsourced": {}}
    plain_spec = _plain(spec, "spec", recorded)
    interconnect = _plain(doc.get("interconnect", {}), "interconnect", recorded)
    known = {**(shared or {}), **references}
    missing = sorted(set(recorded["sources"].values()) - set(known))
    if missing:
        raise _problem(file, f"source {missing[0]!r} is not among its references")
    if doc["kind"] == "gpu":
        check_memory_efficiency(plain_spec, file)
        plain_spec = curves_as_spec(plain_spec, file)
    return Preset(
        kind=doc["kind"],
        name=name,
        title=str(doc.get("title", name)),
        aliases=tuple(str(a) for a in aliases),
        spec=plain_spec,
        sources=recorded["sources"],
        notes=recorded["notes"],
        references={k: str(known[k]) for k in sorted(set(recorded["sources"].values()))},
        interconnect=interconnect if isinstance(interconnect, dict) else {},
        unsourced=tuple(recorded["unsourced"]),
        file=file,
    )


def read_preset_file(path: Path, kind: str) -> Preset:
    """The preset in the YAML file ``path`` (a user's own); ScenarioError if it cannot be read
    or is not a ``kind`` preset."""
    file = str(path)
    try:
        if not path.is_file():
            raise _problem(file, "no such file", f"a YAML file of a {kind} preset, or a name")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _problem(file, "the file is larger than 1 MiB")
        return _cached_file(str(path.resolve()), path.stat().st_mtime_ns, kind)
    except OSError as exc:
        raise _problem(file, f"cannot be read ({exc.strerror})") from None
    except ValueError:  # a NUL byte in the name
        raise _problem(file, "not a file name (it holds a NUL byte)") from None


@lru_cache(maxsize=64)
def _cached_file(file: str, mtime_ns: int, kind: str) -> Preset:
    """The preset of ``file`` as of ``mtime_ns`` (read once per change)."""
    try:
        doc = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _problem(file, f"not YAML ({exc.__class__.__name__})") from None
    preset = parse_preset(doc, file, kind)
    return _anchored(preset, Path(file).parent)


def _anchored(preset: Preset, folder: Path) -> Preset:
    """``preset`` with a relative nested ``preset`` path (a node file's GPU file) made
    absolute from ``folder``, the folder of the file that names it."""
    gpu = preset.spec.get("gpu")
    if (
        isinstance(gpu, dict)
        and is_file_name(gpu.get("preset"))
        and not Path(gpu["preset"]).is_absolute()
    ):
        spec = {**preset.spec, "gpu": {**gpu, "preset": str(folder / gpu["preset"])}}
        return replace(preset, spec=spec)
    return preset


def is_file_name(name: object) -> bool:
    """``name`` is a path to a preset file (has a ``/`` or ends in ``.yaml``/``.yml``)."""
    return isinstance(name, str) and (
        "/" in name or os.sep in name or name.endswith((".yaml", ".yml"))
    )


def _load_builtin(kind: str) -> None:
    registry = GPUS if kind == "gpu" else NODES
    shared = yaml.safe_load((HERE / "references.yaml").read_text(encoding="utf-8"))
    for path in sorted((HERE / f"{kind}s").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        preset = parse_preset(doc, str(path.relative_to(HERE.parent.parent)), kind, shared)
        if not NAME.match(preset.name) or any(not NAME.match(a) for a in preset.aliases):
            raise ValueError(f"{path}: preset names are lower case words joined by hyphens")
        registry.add(preset.name, preset, preset.aliases)


def _line(name: str, preset: Preset) -> str:
    """What ``clustersim list gpus`` (or ``nodes``) prints for ``preset``."""
    summary = gpu_summary if preset.kind == "gpu" else node_summary
    return f"{name:<16} {summary(preset)}"


def _registry(kind: str, noun: str) -> Registry[Preset]:
    """The registry of the built-in ``kind`` files (read the first time one is looked up)."""
    return Registry(
        f"{kind}s",
        f"{noun} preset",
        describe=_line,
        sort=True,
        loader=lambda: _load_builtin(kind),
        unique=True,
    )


GPUS = _registry("gpu", "GPU")
"""The catalog's GPUs by name (``clustersim list gpus``)."""
NODES = _registry("node", "node")
"""The catalog's node kinds by name (``clustersim list nodes``)."""


def find(name: object, kind: str, base_dir: Path | None = None) -> Preset:
    """The ``kind`` preset called ``name`` (or an alias), or read from the file ``name`` names
    (relative to ``base_dir``, the scenario's folder; the working directory if None).
    ScenarioError at key ``preset`` with a did-you-mean hint if there is none."""
    registry = GPUS if kind == "gpu" else NODES
    if is_file_name(name):
        path = Path(str(name))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return read_preset_file(path, kind)
    found = registry.get(name) if isinstance(name, str) else None
    if found is None:
        names = registry.names()
        message = hinted(f"unknown {registry.kind} {name!r}", name, [*names, *registry.aliases()])
        allowed = (
            f"{', '.join(names)} (clustersim list {registry.label}), or a file: ./my_{kind}.yaml"
        )
        raise ScenarioError(Problem("preset", message, allowed))
    return found
