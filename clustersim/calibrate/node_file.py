"""The calibrated node, written as a hardware-catalog node file (``kind: node``), so that
``cluster.node: {preset: ./my_node.yaml}`` runs any scenario on it.

Every number is ``{value, source, note}`` as in the catalog's own files
(docs/hardware.md, "The data files"): a fitted figure cites ``nccl-tests-fit`` (the logs,
listed in the file's ``references``) and its note names the logs and the rows it was fitted
to; a figure the logs cannot determine keeps the base preset's value and source, its note
saying why; what the logs read directly (NICs per node, the GPU) says so.  A header comment
sums the fit up: its model, its errors on calibration and held-out points.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import yaml

from ..hardware import Preset
from ..hardware.catalog import UNNAMED_KEYS, parse_preset
from .fit import Calibration
from .holdout import Point

FIT_SOURCE = "nccl-tests-fit"
"""The reference id fitted numbers cite."""


def consecutive_spans(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """The distinct ``numbers``, sorted, as (first, last) runs of consecutive integers."""
    spans: list[tuple[int, int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], n)
        else:
            spans.append((n, n))
    return spans


def line_ranges(lines: Iterable[int]) -> str:
    """Line numbers as ranges: ``24-26, 30``."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in consecutive_spans(lines))


def rows_cited(points: Sequence[Point]) -> str:
    """Where ``points`` come from: per file, its lines (``all_reduce.log lines 24-54``)."""
    by_file: dict[str, list[int]] = {}
    for point in points:
        by_file.setdefault(point.run.file, []).append(point.row.line)
    return "; ".join(f"{file} lines {line_ranges(lines)}" for file, lines in by_file.items())


def error_summary(errors: Sequence[float]) -> str:
    """``16 points, rms 4.1%, largest 9.8%`` (relative errors)."""
    if not errors:
        return "no points"
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    largest = max(errors, key=abs)
    return f"{len(errors)} points, rms {rms:.1%}, largest {largest:+.1%}"


def _scalar(value: Any) -> str:
    if isinstance(value, (bool, int, float)) or value is None:
        return yaml.safe_dump(value, default_flow_style=True).split("\n")[0].removesuffix(" ...")
    if isinstance(value, (list, tuple)):
        return json.dumps(value)
    return json.dumps(str(value))


def _leaf(value: Any, source: str | None, note: str | None) -> str:
    if source is None:
        return _scalar(value)
    parts = [f"value: {_scalar(value)}", f"source: {source}"]
    if note:
        parts.append(f"note: {json.dumps(note)}")
    return "{" + ", ".join(parts) + "}"


def _emit(spec: Mapping[str, Any], annotate: Any, path: str = "spec", indent: int = 2) -> list[str]:
    lines = []
    for key, value in spec.items():
        here = f"{path}.{key}"
        pad = " " * indent
        if isinstance(value, Mapping) and not (key == "gpu" and "preset" in value):
            lines.append(f"{pad}{key}:")
            lines += _emit(value, annotate, here, indent + 2)
        elif isinstance(value, Mapping):
            inner = ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items())
            lines.append(f"{pad}{key}: {{{inner}}}")
        elif key in UNNAMED_KEYS:
            lines.append(f"{pad}{key}: {_scalar(value)}")
        else:
            source, note = annotate(here)
            lines.append(f"{pad}{key}: {_leaf(value, source, note)}")
    return lines


def node_file_text(
    calibration: Calibration,
    base: Preset,
    name: str,
    notes: Mapping[str, tuple[str, str]],
    header: Sequence[str],
) -> str:
    """The node file of ``calibration`` (on the base preset ``base``): YAML text with a
    comment header (``header`` lines) above it.  ``notes``: dotted ``spec.`` paths set by the
    calibration other than fitted figures (NICs read from the logs, the NVLink generation
    pinned) -> (source, note).  The text is checked to read back as a catalog node file."""
    fitted = {f"spec.{r.figure.key}": r for r in calibration.figures}
    logs = sorted({p.run.file for p in calibration.points if not p.held_out})

    def annotate(path: str) -> tuple[str | None, str | None]:
        result = fitted.get(path)
        if result is not None and result.determined:
            note = (
                f"fitted: {result.figure.label}, {result.base:.6g} {result.figure.unit} in "
                f"{base.name}; to {rows_cited(result.points)}"
            )
            return FIT_SOURCE, note
        source, note = base.sources.get(path), base.notes.get(path, "")
        if path in notes:
            source, note = notes[path]
        if result is not None:
            kept = f"kept from {base.name}: {result.reason}"
            return source or FIT_SOURCE, f"{note}; {kept}" if note else kept
        return source, note or None

    references = {FIT_SOURCE: _fit_reference(calibration, logs)}
    title = f"{base.title}, calibrated on nccl-tests"
    return catalog_text("node", name, title, calibration.spec, annotate, references, base, header)


Annotate = Callable[[str], tuple[str | None, str | None]]
"""Dotted key path (``spec.nic.bandwidth``) -> (source, note) of the value written there."""


def catalog_text(
    kind: str,
    name: str,
    title: str,
    spec: Mapping[str, Any],
    annotate: Annotate,
    references: Mapping[str, str],
    base: Preset,
    header: Sequence[str],
    interconnect: Mapping[str, Any] | None = None,
) -> str:
    """A hardware-catalog file of ``kind`` (``node`` or ``gpu``): a comment header
    (``header`` lines), then ``spec`` (and ``interconnect``) with each number's source and
    note from ``annotate``; the file's references are ``references`` and those of ``base``
    its numbers cite.  The text is checked to read back as a catalog file of ``kind``."""
    body = _emit(spec, annotate)
    extra = _emit(interconnect, annotate, "interconnect") if interconnect else []
    cited = dict(references)
    used = {
        ref for ref in base.references if any(f"source: {ref}" in line for line in body + extra)
    }
    cited.update({ref: base.references[ref] for ref in sorted(used)})
    lines = [f"# {line}" if line else "#" for line in header]
    lines += [
        f"kind: {kind}",
        f"name: {json.dumps(name)}",
        f"title: {json.dumps(title)}",
        "references:",
        *(f"  {ref}: {json.dumps(text)}" for ref, text in cited.items()),
        "spec:",
        *body,
        *(["interconnect:", *extra] if extra else []),
        "",
    ]
    text = "\n".join(lines)
    parse_preset(yaml.safe_load(text), name, kind)
    return text


def _fit_reference(calibration: Calibration, logs: Sequence[str]) -> str:
    runs = {p.run.file: p.run for p in calibration.points if not p.held_out}
    described = "; ".join(f"{file} ({runs[file].describe()})" for file in logs)
    return (
        "clustersim calibrate nccl-tests: least squares on clustersim's "
        f"{calibration.model} collective model, fitted to the measured times of {described}"
    )
