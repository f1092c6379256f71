"""The scenario reference, generated from the schema ``clustersim schema`` prints.

Every key of a scenario, with its type, range, default and description, comes from the
pydantic models (their JSON Schema, :func:`clustersim.scenario.scenario_json_schema`): a key
added to a model appears in the docs without anyone writing a table.  The hand-written
prose of ``docs/scenario.md`` stands beside the tables: each marker ``<!-- keys: SECTION -->``
there is replaced by the tables of that top-level section (:func:`fill_markers`).

A *row* is one key: its dotted path below the section (``node.nic.bandwidth``; ``[]`` for
the items of a list, ``*`` for the values of a mapping), type and range, default,
description.  A section whose value is one of several shapes (``cluster`` by ``kind``,
``workload`` by its key) gets one table per shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

MARKER = re.compile(r"<!-- keys: ([a-z_]+) -->")
"""A marker of ``docs/scenario.md``: the tables of one top-level section go there."""


@dataclass(frozen=True)
class Row:
    """One key of the reference."""

    path: str
    """Dotted path below its section (``node.nic.bandwidth``)."""
    kind: str
    """Its type and range, in words."""
    default: str
    """Its default (``required`` when it has none and must be given, ``—`` when optional)."""
    description: str
    """What it means (the model's docstring of the field)."""


@dataclass(frozen=True)
class Table:
    """The keys of one shape of a section (``cluster`` with ``kind: two_tier``)."""

    title: str
    description: str
    rows: tuple[Row, ...]


class Schema:
    """The scenario's JSON Schema, its ``$ref`` links followed."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.defs: Mapping[str, Any] = document.get("$defs", {})

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        """``node`` with its ``$ref`` followed (the referring node's own keys kept on top)."""
        while "$ref" in node:
            target = self.defs[node["$ref"].rsplit("/", 1)[-1]]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    def sections(self) -> list[str]:
        """The top-level keys of a scenario, in the schema's order."""
        return list(self.document.get("properties", {}))


def _number_range(node: Mapping[str, Any]) -> str:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if low is None and high is None:
        return ""
    if low is not None and high is not None:
        left = "(" if "exclusiveMinimum" in node else "["
        right = ")" if "exclusiveMaximum" in node else "]"
        return f" in {left}{_num(low)}, {_num(high)}{right}"
    if low is not None:
        return f" {'>' if 'exclusiveMinimum' in node else '>='} {_num(low)}"
    return f" {'<' if 'exclusiveMaximum' in node else '<='} {_num(high)}"


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def kind_of(schema: Schema, node: Mapping[str, Any]) -> str:
    """The type and range of a schema node, in words (``number in (0, 1]``)."""
    node = schema.resolve(node)
    if "enum" in node:
        names = dict.fromkeys(v if isinstance(v, str) else json.dumps(v) for v in node["enum"])
        return " or ".join(f"`{name}`" for name in names)
    if "const" in node:
        return f"`{node['const']}`"
    if "properties" in node:
        return "mapping"
    for key in ("anyOf", "oneOf"):
        if key in node:
            parts = dict.fromkeys(kind_of(schema, sub) for sub in node[key])
            parts.pop("null", None)
            return " or ".join(parts) if parts else "null"
    kind = node.get("type")
    if kind == "string" and "pattern" in node:
        return _quantity(node["pattern"], node.get("examples", ()))
    if kind in ("number", "integer"):
        return ("whole number" if kind == "integer" else "number") + _number_range(node)
    if kind == "boolean":
        return "`true` or `false`"
    if kind == "array":
        items = node.get("items")
        return f"list of {kind_of(schema, items)}" if items else "list"
    if kind == "object" or "properties" in node:
        return "mapping"
    return {"string": "text", "null": "null"}.get(str(kind), str(kind or "any"))


QUANTITIES = (
    ("[kKMGTP]", "count", "300B"),
    ("FLOP", "FLOP rate", "312TFLOPS"),
    ("/sec", "bandwidth", "100Gb/s"),
    ("bytes", "size", "80GB"),
    ("us", "time", "1.5us"),
)
"""Units a pattern of the schema accepts (a word of its regular expression) -> what the
value is and an example (the unit types of :mod:`clustersim.units`)."""


def _quantity(pattern: str, examples: Any) -> str:
    for word, what, example in QUANTITIES:
        if word in pattern:
            return f"{what} such as `{examples[0] if examples else example}`"
    return "text matching `" + pattern.replace("|", "\\|") + "`"


def _default(node: Mapping[str, Any], required: bool) -> str:
    if node.get("default", 0) is None:
        return "—"
    if "default" in node:
        value = node["default"]
        return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"
    return "required" if required else "—"


ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
"""A Sphinx role in a docstring (:data:`X`, :class:`~a.B`)."""


def _one_line(text: str) -> str:
    """A docstring as one line of Markdown: ``code`` and roles as `code`, pipes escaped."""
    text = ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text.replace("``", "`"))
    return " ".join(text.split()).replace("|", "\\|")


def _objects(schema: Schema, node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The object shapes a value may take (through lists, unions and mappings excluded)."""
    node = schema.resolve(node)
    if "properties" in node:
        return [node]
    out: list[Mapping[str, Any]] = []
    for key in ("anyOf", "oneOf"):
        for sub in node.get(key, ()):
            out.extend(_objects(schema, sub))
    return out


def _values(schema: Schema, node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The shapes a value may take, unions opened, ``null`` left out."""
    node = schema.resolve(node)
    subs = None if "properties" in node else node.get("anyOf") or node.get("oneOf")
    if not subs:
        return [] if node.get("type") == "null" else [node]
    return [v for sub in subs for v in _values(schema, sub)]


def rows(schema: Schema, node: Mapping[str, Any], prefix: str = "") -> Iterator[Row]:
    """Every key below ``node`` (an object's properties, recursively), as rows."""
    node = schema.resolve(node)
    required = set(node.get("required", ()))
    for key, prop in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        resolved = schema.resolve(prop)
        description = prop.get("description") or resolved.get("description", "")
        yield Row(
            path, kind_of(schema, prop), _default(prop, key in required), _one_line(description)
        )
        yield from _below(schema, resolved, path)


def _below(schema: Schema, node: Mapping[str, Any], path: str) -> Iterator[Row]:
    """The rows of what a key holds: its object's keys, a list's items', a mapping's values'."""
    seen: set[str] = set()
    nested: list[tuple[Mapping[str, Any], str]] = []
    for value in _values(schema, node):
        if value.get("type") == "array" and "items" in value:
            nested.append((value["items"], path + "[]."))
        elif isinstance(value.get("additionalProperties"), dict):
            nested.append((value["additionalProperties"], path + ".*."))
        else:
            nested.append((value, path + "."))
    for inner, prefix in nested:
        for obj in _objects(schema, inner):
            for row in rows(schema, obj, prefix):
                if row.path not in seen:
                    seen.add(row.path)
                    yield row


def tables(schema: Schema, section: str) -> list[Table]:
    """The tables of a top-level section: one per shape of a union (``cluster`` by kind)."""
    node = schema.document["properties"][section]
    shapes = _objects(schema, node)
    if not shapes:  # a value that is not a mapping: the section is one key (and its items)
        described = _one_line(node.get("description", ""))
        row = Row(section, kind_of(schema, node), _default(node, False), described)
        below = [r for sub in _values(schema, node) for r in _below(schema, sub, section)]
        return [Table(f"`{section}`", "", (row, *below))]
    out = []
    for shape in shapes:
        description = _one_line(shape.get("description") or node.get("description", ""))
        out.append(Table(_shape_title(section, shape), description, tuple(rows(schema, shape))))
    return out


def _shape_title(section: str, shape: Mapping[str, Any]) -> str:
    props = shape.get("properties", {})
    kind = props.get("kind", {})
    if "const" in kind or "enum" in kind:
        names = [kind["const"]] if "const" in kind else kind["enum"]
        return f"`{section}` with `kind: {' | '.join(map(str, names))}`"
    if section == "workload" and props:
        return f"`{section}: {{{next(iter(props))}: ...}}`"
    return f"`{section}`"


def markdown(table: Table) -> str:
    """One table as Markdown: its title, description and rows."""
    lines = [f"#### {table.title}", ""]
    if table.description:
        lines += [table.description, ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.path}` | {r.kind} | {r.default} | {r.description} |" for r in table.rows]
    return "\n".join(lines) + "\n"


def section_markdown(schema: Schema, section: str) -> str:
    """Every table of ``section`` as Markdown."""
    return "\n".join(markdown(t) for t in tables(schema, section))


def fill_markers(text: str, schema: Schema) -> str:
    """``text`` (docs/scenario.md) with each ``<!-- keys: SECTION -->`` marker replaced by
    that section's tables; ValueError naming a marker whose section the schema lacks."""
    known = set(schema.sections())

    def table_for(match: re.Match[str]) -> str:
        section = match.group(1)
        if section not in known:
            raise ValueError(f"docs/scenario.md names section {section!r}, not in the schema")
        return section_markdown(schema, section)

    return MARKER.sub(table_for, text)


def marked_sections(text: str) -> list[str]:
    """The sections the markers of ``text`` name, in order."""
    return MARKER.findall(text)
