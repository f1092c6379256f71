"""Reading a scenario file: size limits, safe YAML, then :func:`parse_scenario`.

The YAML is checked before it is built into Python objects: no more than
:data:`MAX_YAML_NODES` values and no list longer than :data:`MAX_LIST_ITEMS` (counted
on the parser's events, before the slow part, with the key path where the limit is
crossed), no duplicate keys, no recursive aliases, no alias bombs, no nesting deeper
than :data:`MAX_YAML_DEPTH`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clustersim.errors import Problem, ScenarioError, join_path

from .document import CANDIDATES_KEY, Scenario, is_candidates_document, parse_scenario

_CANDIDATES_WORD = re.compile(rf"\b{CANDIDATES_KEY}\b")
"""The top-level key of a candidates file as a word ("clustersim" in a comment is not it)."""

MAX_YAML_NODES = 1_000_000
"""Largest document accepted, counted with every alias expanded (guards against alias bombs)."""
MAX_YAML_DEPTH = 100
"""Deepest nesting of lists and mappings accepted."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest scenario file accepted, bytes (16 MiB)."""
MAX_LIST_ITEMS = 262_144
"""Longest list accepted anywhere in a scenario: as many items as a cluster may have
devices (:data:`clustersim.scenario.MAX_DEVICES`)."""

_EventParser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""What reads the events of :func:`_count_values`: libyaml's parser where PyYAML has it
(a 15 MiB list in under a second), else PyYAML's own."""
_FastLoader: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)
"""What composes a document :func:`_count_values` found well formed and within the depth
limit: libyaml's parser, the same nodes and values as PyYAML's own in a tenth of the time
(0.19 ms against 2.3 ms for a shipped scenario).  PyYAML's own composer (:class:`_Loader`)
reads every other document, so that its errors are worded as they always were."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _NodeCheck:
    """Checks of a composed YAML node graph before it is built into Python objects.

    Walks the graph once, each node once however many aliases point at it:
    counts the nodes the document would have with aliases expanded, refuses
    recursive aliases, and notes keys given twice in one mapping.
    """

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        """Builds key values, so that ``1`` and ``01`` count as the same key."""
        self.duplicates: list[Problem] = []
        """Keys given twice, at their key path."""
        self._sizes: dict[int, int] = {}
        self._heights: dict[int, int] = {}
        self._active: set[int] = set()

    def size(self, node: Node, path: str = "", depth: int = 0) -> int:
        """Number of nodes under ``node`` (itself included) with aliases expanded.

        ``depth`` is how many lists and mappings hold ``node``; deeper than
        :data:`MAX_YAML_DEPTH` is refused.
        """
        if id(node) in self._sizes:
            self._check_depth(node, path, depth + self._heights[id(node)] - 1)
            return self._sizes[id(node)]
        self._check_depth(node, path, depth)
        if id(node) in self._active:
            raise ScenarioError(
                Problem(path, f"recursive alias at line {node.start_mark.line + 1}")
            )
        self._active.add(id(node))
        size, children = 1, self._children(node, path)
        for child, child_path in children:
            size += self.size(child, child_path, depth + 1)
        self._active.discard(id(node))
        self._sizes[id(node)] = min(
            size + len(children) * isinstance(node, MappingNode), MAX_YAML_NODES + 1
        )
        self._heights[id(node)] = 1 + max((self._heights[id(c)] for c, _ in children), default=0)
        return self._sizes[id(node)]

    def _children(self, node: Node, path: str) -> list[tuple[Node, str]]:
        """The items of a list or the values of a mapping, each with its key path."""
        if isinstance(node, SequenceNode):
            return [(child, join_path(path, i)) for i, child in enumerate(node.value)]
        if isinstance(node, MappingNode):
            self._note_duplicates(node, path)
            return [
                (value, join_path(path, key.value if isinstance(key, ScalarNode) else "?"))
                for key, value in node.value
            ]
        return []

    @staticmethod
    def _check_depth(node: Node, path: str, depth: int) -> None:
        if depth > MAX_YAML_DEPTH:
            line = node.start_mark.line + 1
            message = f"nested more than {MAX_YAML_DEPTH} levels deep (line {line})"
            raise ScenarioError(Problem(path, message, f"at most {MAX_YAML_DEPTH} levels"))

    def _note_duplicates(self, node: MappingNode, path: str) -> None:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key = self.loader.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                message = f"duplicate key at line {line} (first at line {first_line[key]})"
                self.duplicates.append(Problem(join_path(path, str(key)), message))
            else:
                first_line[key] = line


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing lists and mappings nested deeper than :data:`MAX_YAML_DEPTH`
    while it composes (so that a deep document fails fast, before the whole file is read)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH + 1:
                line = self.peek_event().start_mark.line + 1
                message = f"nested more than {MAX_YAML_DEPTH} levels deep (line {line})"
                raise ScenarioError(Problem("", message, f"at most {MAX_YAML_DEPTH} levels"))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _yaml_problem(exc: yaml.YAMLError) -> Problem:
    """A YAML syntax error, with its line and column."""
    if isinstance(exc, yaml.reader.ReaderError):
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        return Problem(
            "", f"invalid YAML: {character} at character {exc.position} is not allowed in YAML"
        )
    mark = getattr(exc, "problem_mark", None)
    what = " ".join(
        str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x
    )
    if mark is None:
        return Problem("", f"invalid YAML: {what or exc}")
    return Problem("", f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}")


class _Open:
    """A list or mapping the parser is inside, and how far it has got."""

    __slots__ = ("part", "mapping", "items", "key")

    def __init__(self, part: str | int, mapping: bool) -> None:
        self.part = part
        """Its key, or its index in the list holding it."""
        self.mapping = mapping
        self.items = 0
        """List items, or mapping keys and values, seen so far."""
        self.key = ""
        """The mapping's current key."""

    def inner(self) -> str | int:
        """The key or index of the value inside it the parser is at."""
        return self.key if self.mapping else self.items - 1


def _where(stack: list[_Open], inside: bool = True) -> str:
    """Key path of the parser's position (``inside`` the innermost collection, or at it)."""
    parts: list[str | int] = [o.part for o in stack[1:]]
    if inside and stack:
        parts.append(stack[-1].inner())
    return join_path(*parts)


def _count_values(text: str) -> bool:
    """Refuse a document with more than :data:`MAX_YAML_NODES` values, or a list with
    more than :data:`MAX_LIST_ITEMS` items, from the parser's events alone: fast, in
    constant memory, before the document is composed (minutes for a 15 MiB list).

    Aliases count once here (:class:`_NodeCheck` expands them later).  YAML errors are
    left to the full load, which words them.  Returns whether the events were well formed
    and nested no deeper than :data:`MAX_YAML_DEPTH` lists and mappings.
    """
    parser = _EventParser(text)
    stack: list[_Open] = []
    count = 0
    deepest = 0
    node, start, end = yaml.NodeEvent, yaml.CollectionStartEvent, yaml.CollectionEndEvent
    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                return deepest <= MAX_YAML_DEPTH
            if isinstance(event, end):
                stack.pop()
                continue
            if not isinstance(event, node):
                continue
            count += 1
            top = stack[-1] if stack else None
            if top is not None:
                if top.mapping and not top.items % 2:
                    top.key = str(getattr(event, "value", "?"))
                top.items += 1
                if not top.mapping and top.items > MAX_LIST_ITEMS:
                    message = f"a list of more than {MAX_LIST_ITEMS:,} items"
                    allowed = f"at most {MAX_LIST_ITEMS:,} items in a list"
                    raise ScenarioError(Problem(_where(stack, False), message, allowed))
            if count > MAX_YAML_NODES:
                message = (
                    f"the document has more than {MAX_YAML_NODES:,} values (keys, scalars, "
                    "lists and mappings); the limit is crossed here"
                )
                allowed = f"at most {MAX_YAML_NODES:,} values"
                raise ScenarioError(Problem(_where(stack), message, allowed))
            if isinstance(event, start):
                part = top.inner() if top is not None else ""
                stack.append(_Open(part, isinstance(event, yaml.MappingStartEvent)))
                if len(stack) > deepest:
                    deepest = len(stack)
    except yaml.YAMLError:
        return False
    finally:
        parser.dispose()


def _load_yaml(text: str, source: str) -> object:
    """The document in ``text``: safe YAML, not too many values, no duplicate keys, no
    alias bombs."""
    try:
        well_formed = _count_values(text)
    except ScenarioError as exc:
        raise exc.with_source(source) from None
    if well_formed and _FastLoader is not None:
        fast = _FastLoader(text)
        try:
            return _document(fast)
        except ScenarioError as exc:
            raise exc.with_source(source) from None
        except (yaml.YAMLError, RecursionError):
            pass  # PyYAML's own composer below says what is wrong, in its words
        finally:
            fast.dispose()
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_problem(exc), source) from None
    try:
        return _document(loader)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_problem(exc), source) from None
    except RecursionError:
        message = f"the document is nested too deeply (at most {MAX_YAML_DEPTH} levels)"
        raise ScenarioError(Problem("", message), source) from None
    except ScenarioError as exc:
        raise exc.with_source(source) from None
    finally:
        loader.dispose()


def _document(loader: yaml.SafeLoader) -> object:
    """The one document ``loader`` reads, checked by :class:`_NodeCheck` before it is built
    (a ScenarioError without its source; YAML errors as the loader raises them)."""
    node = loader.get_single_node()
    if node is None:
        message = "the file is empty; a scenario is a mapping of keys to values"
        raise ScenarioError(Problem("", message))
    check = _NodeCheck(loader)
    if check.size(node) > MAX_YAML_NODES:
        message = f"the document expands to more than {MAX_YAML_NODES:,} values through aliases"
        # (without aliases it has fewer: _count_values refused larger documents)
        raise ScenarioError(Problem("", message))
    if check.duplicates:
        raise ScenarioError(check.duplicates)
    return loader.construct_document(node)


def _read_text(path: str | Path, source: str) -> str:
    """The file's text; errors name the file.

    Only a regular file is read: a folder, a named pipe (``/dev/stdin`` in a
    pipeline), a device or a socket is refused before it is opened for reading,
    so nothing blocks; a file larger than :data:`MAX_FILE_BYTES` is refused
    before it is read.  An empty path is named as ``''``.
    """
    if not str(path):
        raise ScenarioError(
            Problem("", "no file named (an empty path)", "a scenario YAML file"), "''"
        )
    data = _read_bytes(path, source)
    if len(data) > MAX_FILE_BYTES:
        raise _too_large(source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            Problem("", f"not UTF-8 text (bad byte at offset {exc.start})"), source
        ) from None


def _read_bytes(path: str | Path, source: str) -> bytes:
    """At most :data:`MAX_FILE_BYTES` + 1 bytes of the regular file at ``path``."""
    try:
        _check_regular(os.stat(path), source)
        # O_NONBLOCK: should the name be swapped for a pipe meanwhile, opening it does not wait
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as fh:
            _check_regular(os.fstat(fd), source)
            return fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError(Problem("", "file not found"), source) from None
    except OSError as exc:
        raise ScenarioError(Problem("", f"cannot read the file: {exc.strerror}"), source) from None
    except ValueError:  # a NUL byte in the name
        raise ScenarioError(Problem("", "not a file name (it holds a NUL byte)"), source) from None


def _check_regular(status: os.stat_result, source: str) -> None:
    """Refuse anything but a regular file of at most :data:`MAX_FILE_BYTES`."""
    if stat.S_ISDIR(status.st_mode):
        raise ScenarioError(Problem("", "is a folder, not a scenario file", _A_FILE), source)
    if not stat.S_ISREG(status.st_mode):
        kind = (
            "a named pipe"
            if stat.S_ISFIFO(status.st_mode)
            else "a socket"
            if stat.S_ISSOCK(status.st_mode)
            else "a device"
        )
        message = f"is {kind}, not a regular file (scenarios are read from files only)"
        raise ScenarioError(Problem("", message, _A_FILE), source)
    if status.st_size > MAX_FILE_BYTES:
        raise _too_large(source)


_A_FILE = "a regular YAML file"


def _too_large(source: str) -> ScenarioError:
    message = f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB"
    return ScenarioError(Problem("", message, f"at most {MAX_FILE_BYTES:,} bytes"), source)


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and validate the scenario file at ``path``; errors name the file."""
    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    return parse_scenario(doc, source)


def is_candidates_file(path: str | Path) -> bool:
    """Whether the file at ``path`` is a candidates file of ``clustersim choose``
    (:func:`~.document.is_candidates_document`); False for a file that cannot be read."""
    source = str(path)
    try:
        text = _read_text(path, source)
        if "\\" not in text and not _CANDIDATES_WORD.search(text):
            return False  # no key "clusters" can be written without its word or an escape
        return is_candidates_document(_load_yaml(text, source))
    except ScenarioError:
        return False
