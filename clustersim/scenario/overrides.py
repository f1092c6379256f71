"""Overrides: ``--set KEY=VALUE`` on run, plan, golden record and compare.

One key path syntax and one value syntax for every command, in the style of Hydra's
command-line overrides:

* a key path is dotted keys with ``[i]`` list indices (``cluster.link.bandwidth``,
  ``stragglers[0].slowdown``); a leading ``+`` or ``++`` (Hydra's "add" and "force
  add") is accepted and means the same: a key the scenario format allows may be set
  although the file lacks it, and the mappings on the way are created.  A key the
  format does not know is refused when the document is validated, naming the keys
  allowed at its place;
* a value is one YAML scalar: ``4`` is an int, ``2.5`` a float, ``true`` a bool,
  ``null`` is None (an optional section left out), ``100Gb/s`` a string;
* ``clustersim compare`` sweeps: ``KEY=V1,V2,...`` (:func:`parse_set`); run, plan and
  golden record take one value per key (``sweep=False``: a comma is an error that
  points to compare);
* ``--network flow|analytical`` is ``--set network.model=...`` (:func:`network_setting`).

:func:`apply_settings` sets them in a copy of the document; errors name the file, the
``--set`` text and the key path.  :func:`resolved_yaml` is the text of the run folder's
``scenario.resolved.yaml``: the document with every override applied, keys in the
file's order (new keys after the existing ones of their mapping).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from clustersim.errors import Problem, ScenarioError, join_path

PathPart = str | int

NETWORK_KEY = "network.model"
"""The key path ``--network`` sets."""

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]|(\.)")


def parse_key_path(text: str, flag: str = "--set") -> list[PathPart]:
    """``"a.b[2].c"`` as ``["a", "b", 2, "c"]``; a ScenarioError naming ``flag`` if malformed."""
    parts: list[PathPart] = []
    pos, expect_name = 0, True
    bad = ScenarioError(
        Problem(flag, f"bad key path {text!r}", "dotted keys with [i] indices, e.g. a.b[0].c")
    )
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            raise bad
        name, index, dot = match.groups()
        if dot is not None:
            if expect_name:
                raise bad
            expect_name = True
        elif name is not None:
            if not expect_name:
                raise bad
            parts.append(name.strip())
            expect_name = False
        else:
            if not parts or expect_name:
                raise bad
            parts.append(int(index))
        pos = match.end()
    if not parts or expect_name:
        raise bad
    return parts


def get_path(doc: Any, path: Sequence[PathPart]) -> Any:
    """The value at ``path`` in ``doc`` (KeyError/IndexError/TypeError if absent)."""
    node = doc
    for part in path:
        node = node[part]
    return node


def set_path(doc: dict[str, Any], path: Sequence[PathPart], value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``value`` at ``path``.

    A missing key (or one holding null) on the way is created as an empty mapping, so
    any key the scenario format allows can be set (whether it does is for validation to
    say).  A list is never created: an index must name an existing item.  A ScenarioError
    names the first part that is of the wrong kind or out of range.
    """
    out = copy.deepcopy(doc)
    node: Any = out
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        where = join_path(*path[: depth + 1])
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ScenarioError(
                    Problem(where, f"[{part}] indexes a list, but this is {_kind(node)}")
                )
            if not -len(node) <= part < len(node):
                raise ScenarioError(
                    Problem(where, f"index {part} out of range: the list has {len(node)} item(s)")
                )
        elif not isinstance(node, dict):
            raise ScenarioError(Problem(where, f"cannot set key {part!r} inside {_kind(node)}"))
        if last:
            node[part] = value
            break
        if isinstance(part, str) and node.get(part) is None:
            if isinstance(path[depth + 1], int):
                message = "no such list in the document: an index names an item it has"
                raise ScenarioError(Problem(where, message, "set the whole list in the file"))
            node[part] = {}
        node = node[part]
    return out


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"the value {value!r}"


# --------------------------------------------------------------------------- --set


@dataclass(frozen=True)
class Setting:
    """One ``--set KEY=V1,V2``: the key path as written, its parts and the values."""

    key: str
    path: tuple[PathPart, ...]
    values: tuple[Any, ...]

    def text(self, value: Any = None) -> str:
        """``KEY=VALUE`` as written on a command line (the first value by default)."""
        return f"{self.key}={value_text(self.values[0] if value is None else value)}"


def parse_value(text: str) -> Any:
    """A value as a YAML scalar: ``4`` -> 4, ``2.5`` -> 2.5, ``true`` -> True, ``null`` ->
    None, ``100Gb/s`` -> str; a YAML list or mapping stays the text."""
    text = text.strip()
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text
    return text if isinstance(value, (dict, list)) else value


def value_text(value: Any) -> str:
    """A value as it was written on the command line (YAML scalars)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_set(text: str, sweep: bool = True) -> Setting:
    """``KEY=V1,V2,...`` (``sweep``) or ``KEY=VALUE`` as a :class:`Setting`; a
    ScenarioError naming ``--set`` and the text if malformed."""
    key, sep, values = text.partition("=")
    key = key.strip().removeprefix("++").removeprefix("+")
    form = "KEY=V1,V2,..." if sweep else "KEY=VALUE"
    if not sep or not key.strip():
        raise ScenarioError(
            Problem("--set", f"expected {form}, got {text!r}", "e.g. training.iterations=2")
        )
    key = key.strip()
    items = values.split(",") if sweep else [values]
    if not values.strip() or any(not v.strip() for v in items):
        raise ScenarioError(Problem("--set", f"{key}: empty value in {text!r}"))
    if not sweep and "," in values:
        raise ScenarioError(
            Problem(
                "--set",
                f"{key}: one value per key here, got {values!r}",
                "one value; clustersim compare sweeps several (KEY=V1,V2,...)",
            )
        )
    path = tuple(parse_key_path(key))
    parsed = tuple(parse_value(v) for v in items)
    unique = {(type(v), v): v for v in parsed}  # 1 and true are two values, not one
    return Setting(key, path, tuple(unique.values()))


def network_setting(model: str) -> Setting:
    """``--network MODEL``: the setting ``network.model=MODEL``."""
    return Setting(NETWORK_KEY, ("network", "model"), (model,))


def check_unique(settings: Sequence[Setting]) -> None:
    """Refuse a key given twice (``--network`` counts as ``--set network.model``)."""
    keys = [s.key for s in settings]
    for key in keys:
        if keys.count(key) > 1:
            message = f"{key} is given twice"
            if key == NETWORK_KEY:
                message += " (--network sets it too)"
            raise ScenarioError(Problem("--set", message, "one --set per key"))


def described(source: str, texts: Sequence[str]) -> str:
    """``source`` naming the overrides that made its document (``a.yaml with --set
    seed=1``): the file of an error found after setting them."""
    if not texts:
        return source
    return f"{source} with {' '.join(f'--set {text}' for text in texts)}"


def apply_settings(
    doc: dict[str, Any], settings: Sequence[Setting], source: str = ""
) -> dict[str, Any]:
    """A copy of ``doc`` with each setting's (first) value set, in order; errors name
    ``source`` with the ``--set`` text and the key path."""
    check_unique(settings)
    for setting in settings:
        try:
            doc = set_path(doc, setting.path, setting.values[0])
        except ScenarioError as exc:
            raise exc.with_source(described(source, [setting.text()])) from None
    return doc


# --------------------------------------------------------------------------- documents


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML document of the scenario file at ``path`` (a mapping), not yet validated."""
    from .loader import _load_yaml, _read_text

    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    if not isinstance(doc, dict):
        from .document import parse_scenario

        parse_scenario(doc, source)  # the error that says what a scenario is
    assert isinstance(doc, dict)
    return doc


def load_with_settings(
    path: str | os.PathLike[str], settings: Sequence[Setting] = ()
) -> tuple[dict[str, Any], Any]:
    """The document of the file at ``path`` with ``settings`` applied, and the
    :class:`~clustersim.scenario.Scenario` it validates to.  Errors name the file, with
    the ``--set`` texts when there are any."""
    from .document import parse_scenario

    source = str(path)
    doc = apply_settings(read_document(path), settings, source)
    scenario = parse_scenario(doc, described(source, [s.text() for s in settings]))
    return doc, scenario


def with_choices(doc: dict[str, Any], choices: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with each of ``choices`` (key path -> value: what ``auto`` chose,
    summary.json's ``auto_choices``) written at its path, the mappings on the way created."""
    out = doc
    for key, value in choices.items():
        out = set_path(out, parse_key_path(key, "auto_choices"), value)
    return out


def resolved_yaml(doc: dict[str, Any], source: str = "", presets: Sequence[str] = ()) -> str:
    """The text of ``scenario.resolved.yaml``: a comment naming ``source`` (the file and the
    overrides, as :func:`described` words them) and the hardware ``presets`` written out in
    ``doc`` (:func:`clustersim.scenario.presets.expanded_document`), then ``doc`` as block
    YAML, keys in document order; loading it gives ``doc`` back."""
    header = "# The scenario as clustersim ran it, every override applied"
    header += f": {source}\n" if source else ".\n"
    if presets:
        from clustersim.version import __version__

        header += f"# Hardware presets written out (the catalog of clustersim {__version__}):\n"
        header += "".join(f"#   {note}\n" for note in presets)
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return header + body
