"""Typed pieces of summary.json and the text they are written as.

A :class:`SummaryPart` is a frozen dataclass whose fields are summary keys, in
the order summary.json shows them.  Two field markers shape the keys:

* :data:`SPLICE` -- the field is itself a part whose keys stand at this place
  in the parent (``FlopRates`` inside a training summary), not under a key of
  their own; its fields read through the parent (``part.tflops_per_gpu``);
* :data:`OPTIONAL` -- the key is left out when the value is ``None`` (a
  parameter server's ``staleness`` exists only in ``ssp`` mode);
* :data:`OPTIONAL_SPLICE` -- a spliced part that may be ``None``: its keys are
  written only when it is set, and read back only when one of its keys is there
  (the goodput keys of a run with failures or checkpoints).

:meth:`SummaryPart.as_dict` gives the keys; :meth:`SummaryPart.from_dict` reads
them back, nested parts included (by the fields' type hints), so readers use
attributes instead of ``.get()`` on strings.  :func:`canonical_json` is the
text of summary.json: keys in the order built, floats rounded to 12
significant digits.
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any, TypeVar

from ..errors import ClustersimError

SPLICE: dict[str, bool] = {"splice": True}
"""Field metadata: the part's keys stand in the parent, in this field's place."""

OPTIONAL: dict[str, bool] = {"optional": True}
"""Field metadata: the key is written only when the value is not None."""

OPTIONAL_SPLICE: dict[str, bool] = {"splice": True, "optional": True}
"""Field metadata: a spliced part that is left out (its keys unwritten) when None."""

P = TypeVar("P", bound="SummaryPart")


class SummaryFormatError(ClustersimError):
    """A summary (summary.json, or a mapping given as one) lacks a key its part needs, or
    holds a value of the wrong shape (a number where a mapping or a list belongs)."""


class SummaryPart:
    """A typed piece of summary.json (subclasses are frozen dataclasses)."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as summary keys, in declaration order; nested parts as dicts,
        spliced parts in place, optional fields only when set."""
        return self._keys(plain, _as_dict)

    def top_level(self) -> dict[str, Any]:
        """:meth:`as_dict`'s keys in the same order, with their values where scalars (numbers,
        strings, booleans, None) and :data:`NESTED` where a part, dict or list (not made:
        a summary's top-level numbers without its table of 131,072 devices)."""
        if type(self).as_dict is not SummaryPart.as_dict:  # a part that makes its own keys
            return {key: _marked(value) for key, value in self.as_dict().items()}
        return self._keys(_marked, _top_level)

    def _keys(
        self,
        convert: typing.Callable[[Any], Any],
        spliced: typing.Callable[[SummaryPart], dict[str, Any]],
    ) -> dict[str, Any]:
        """The fields as summary keys (see :meth:`as_dict`): a value that is not a plain
        scalar as ``convert`` gives it, a spliced part's keys as ``spliced`` gives them."""
        out: dict[str, Any] = {}
        values = self.__dict__
        for name, splice, optional in _layout(type(self)):
            value = values[name]
            if splice:
                if value is not None:
                    out.update(spliced(value))
            elif value is None:
                if not optional:
                    out[name] = None
            else:
                out[name] = value if type(value) in _SCALARS else convert(value)
        return out

    def __getattr__(self, name: str) -> Any:
        """Fields of spliced parts read through this one (``summary.tflops_per_gpu``)."""
        if name.startswith("__"):
            raise AttributeError(name)
        for f in _spliced(type(self)):
            part = self.__dict__.get(f.name)
            if part is not None and hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    @classmethod
    def from_dict(cls: type[P], data: typing.Mapping[str, Any], lenient: bool = False) -> P:
        """The part held by ``data`` (a summary mapping), nested parts typed as well.

        A missing key takes the field's default; without one it is a
        :class:`SummaryFormatError`, or ``None`` when ``lenient`` (for partial or
        older summaries that outputs still draw).  Keys the part does not name are
        ignored.
        """
        values: dict[str, Any] = {}
        for name, read, part, optional, has_default, factory in _plan(cls):
            if part is not None:  # spliced: its fields are this mapping's
                if optional and not any(g.name in data for g in fields(part)):
                    continue  # an optional part that is not there: its default, None
                values[name] = part.from_dict(data, lenient)
            elif name in data:
                value = data[name]
                if value is not None and read is not None:
                    value = read(value, lenient, name)
                if value is not None or not factory:
                    values[name] = value  # null for a dict or list: the empty default
            elif has_default:
                continue
            elif lenient:
                values[name] = None
            else:
                raise SummaryFormatError(f"summary has no key {name!r} ({cls.__name__})")
        return cls(**values)


NESTED = object()
"""The value :meth:`SummaryPart.top_level` gives a key holding a part, a dict or a list."""


def _marked(value: Any) -> Any:
    """``value``, or :data:`NESTED` for a part, a dict, a list or a tuple."""
    return NESTED if isinstance(value, (SummaryPart, dict, list, tuple)) else value


def _as_dict(part: SummaryPart) -> dict[str, Any]:
    return part.as_dict()


def _top_level(part: SummaryPart) -> dict[str, Any]:
    return part.top_level()


_SCALARS = frozenset({float, int, str, bool})
"""Types :func:`plain` returns as they are, tested first (most summary values)."""


@cache
def _layout(cls: type) -> tuple[tuple[str, bool, bool], ...]:
    """Each field of a part class: its name, whether it is spliced, whether optional."""
    return tuple(
        (f.name, bool(f.metadata.get("splice")), bool(f.metadata.get("optional")))
        for f in fields(cls)
    )


def plain(value: Any) -> Any:
    """``value`` with every part inside it (in dicts, lists, tuples) turned into a dict."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, SummaryPart):
        return value.as_dict()
    if isinstance(value, dict):
        if len(value) > _MANY_ROWS:
            return _plain_rows(value)
        return {k: v if type(v) in _SCALARS else plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _SCALARS else plain(v) for v in value]
    return value


_MANY_ROWS = 1024
"""A dict of more entries than this (one per device) is made by :func:`_plain_rows`."""


def _plain_rows(rows: dict[Any, Any]) -> dict[Any, Any]:
    """:func:`plain` of a dict of many entries, each part among its values made into a
    dict once and copied for the entries holding the same object (131,072 devices share a
    handful of :class:`~clustersim.metrics.breakdown.DeviceTimes`: a copy costs a fifth of
    :meth:`SummaryPart.as_dict`).  Only a dict of scalars is copied so: every entry still
    has a dict of its own, nothing in it shared."""
    made: dict[int, dict[str, Any] | None] = {}  # id of a part -> its flat dict (None: nested)
    out = {}
    for key, row in rows.items():
        if not isinstance(row, SummaryPart):
            out[key] = row if type(row) in _SCALARS else plain(row)
            continue
        flat: Any = made.get(id(row), False)
        if flat is False:
            got = row.as_dict()
            flat = made[id(row)] = got if all(_is_scalar(v) for v in got.values()) else None
            out[key] = got
        else:
            out[key] = row.as_dict() if flat is None else flat.copy()
    return out


def _is_scalar(value: Any) -> bool:
    """A value a copied dict may hold: a number, a string, a boolean or None."""
    return value is None or type(value) in _SCALARS


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _spliced(cls: type) -> tuple[Field[Any], ...]:
    return tuple(f for f in fields(cls) if f.metadata.get("splice"))  # type: ignore[arg-type]


def _part_type(kind: Any) -> type[SummaryPart]:
    """The part class of a (possibly optional) spliced field's type."""
    for arg in (kind, *typing.get_args(kind)):
        if isinstance(arg, type) and issubclass(arg, SummaryPart):
            return arg
    raise TypeError(f"not a summary part: {kind!r}")


def typed_value(kind: Any, value: Any, lenient: bool, key: str = "") -> Any:
    """``value`` read as type ``kind``: parts, and dicts/lists of parts, become parts.

    A value of the wrong shape (not a mapping where a part or a dict belongs, not a list
    where a list does) is a :class:`SummaryFormatError` naming ``key``.
    """
    read = _reader(kind)
    return value if value is None or read is None else read(value, lenient, key)


Reader = typing.Callable[[Any, bool, Any], Any]
"""Reads a value (not None) as one type: ``read(value, lenient, key)``; ``key`` is the
summary key for messages, a string or a ``(parent key, step)`` pair made into text only
when a message needs it (a summary of 131,072 devices has as many rows)."""


@cache
def _plan(cls: type) -> tuple[tuple[str, Reader | None, type | None, bool, bool, bool], ...]:
    """How :meth:`SummaryPart.from_dict` reads each field of ``cls``, worked out once per
    class: its name, its reader (None: the value as it is), its part class when spliced,
    whether optional, whether it has a default, whether that default is a factory's."""
    hints = _hints(cls)
    plan = []
    for f in fields(cls):  # type: ignore[arg-type]
        kind = hints[f.name]
        splice = f.metadata.get("splice")
        plan.append(
            (
                f.name,
                None if splice else _reader(kind),
                _part_type(kind) if splice else None,
                bool(f.metadata.get("optional")),
                f.default is not MISSING or f.default_factory is not MISSING,
                f.default_factory is not MISSING,
            )
        )
    return tuple(plan)


@cache
def _reader(kind: Any) -> Reader | None:
    """The reader of values of type ``kind`` (see :data:`Reader`), None where a value is
    kept as it is; made once per type."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _reader(inner[0]) if len(inner) == 1 else None
    if isinstance(kind, type) and issubclass(kind, SummaryPart):
        part = kind
        return lambda value, lenient, key: part.from_dict(
            _shaped(value, typing.Mapping, key), lenient
        )
    if origin is dict and len(args) == 2:
        return _dict_reader(_reader(args[1]))
    if origin is list and args:
        return _list_reader(_reader(args[0]))
    return None


def _dict_reader(read: Reader | None) -> Reader:
    """A dict's reader, its values read by ``read`` (None: kept as they are)."""

    def read_dict(value: Any, lenient: bool, key: Any) -> dict[Any, Any]:
        items = _shaped(value, typing.Mapping, key).items()
        if read is None:
            return dict(items)
        return {k: None if v is None else read(v, lenient, (key, f".{k}")) for k, v in items}

    return read_dict


def _list_reader(read: Reader | None) -> Reader:
    """A list's reader, its items read by ``read`` (None: kept as they are)."""

    def read_list(value: Any, lenient: bool, key: Any) -> list[Any]:
        items = _shaped(value, list, key)
        if read is None:
            return list(items)
        return [
            None if v is None else read(v, lenient, (key, f"[{i}]")) for i, v in enumerate(items)
        ]

    return read_list


def _shaped(value: Any, shape: type, key: Any) -> Any:
    """``value`` if it is a ``shape`` (a mapping or a list); else a SummaryFormatError."""
    if type(value) is (list if shape is list else dict) or isinstance(value, shape):
        return value  # the first test spares a dict the slow check against typing.Mapping
    want = "a list" if shape is list else "a mapping"
    raise SummaryFormatError(
        f"summary key {_key_text(key)!r}: expected {want}, got {type(value).__name__}"
    )


def _key_text(key: Any) -> str:
    """A :data:`Reader`'s key as text: ``devices.gpu0``, ``busiest_links[0]``."""
    steps = []
    while isinstance(key, tuple):
        key, step = key
        steps.append(step)
    return str(key) + "".join(reversed(steps))


def canonical_value(value: Any) -> Any:
    """``value`` as summary.json holds it: floats rounded to 12 significant digits (non-finite
    ones as ``None``, ``"inf"``, ``"-inf"``), inside dicts, lists and tuples too."""
    return _canonical(value)


def _canonical(value: Any) -> Any:
    """Floats rounded to 12 significant digits, so summaries compare byte for byte."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def canonical_json(summary: typing.Mapping[str, Any] | SummaryPart) -> str:
    """The text of summary.json: stable key order (as built), rounded floats, newline at end.

    The same text as ``json.dumps(canonical_value(data), indent=2, ensure_ascii=False)``
    (a property test holds the two equal), written in one pass, each distinct float
    formatted once: with an indent, the standard library encodes in Python, a generator
    per level, which was most of the time of writing a 131,072-GPU summary (80 MB, its
    devices' numbers mostly repeating)."""
    data = summary.as_dict() if isinstance(summary, SummaryPart) else dict(summary)
    out: list[str] = []
    _JsonWriter(out).write(data, "\n")
    out.append("\n")
    return "".join(out)


_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]
"""JSON's own string encoder (in C) as ``ensure_ascii=False`` uses it."""


def _scalar(value: Any) -> str | None:
    """The JSON text of a canonical scalar (:func:`_canonical` applied), None for a container."""
    if isinstance(value, str):
        return _encode_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "null" if math.isnan(value) else ('"inf"' if value > 0 else '"-inf"')
        return float.__repr__(float(f"{value:.12g}"))
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, (dict, list, tuple)):
        return None
    return json.dumps(value, ensure_ascii=False)  # what json makes of it, or its TypeError


class _JsonWriter:
    """Appends canonical JSON text to a list of strings, remembering each float's text."""

    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.floats: dict[float, str] = {}
        """Text of each nonzero finite float seen (0.0 and -0.0 are equal keys: not kept)."""

    def write(self, value: Any, newline: str) -> None:
        """Append ``value``; ``newline`` is a line break and the indentation of ``value``'s
        own line (two spaces a level, as ``indent=2``)."""
        out = self.out
        if type(value) is float and value:  # the common case first
            text = self.floats.get(value)
            if text is None:
                text = _scalar(value)
                if value - value == 0.0:  # finite
                    self.floats[value] = text  # type: ignore[assignment]
            out.append(text)  # type: ignore[arg-type]
            return
        text = _scalar(value)
        if text is not None:
            out.append(text)
            return
        if not value:
            out.append("{}" if isinstance(value, dict) else "[]")
            return
        inner = newline + "  "
        separator = inner
        if isinstance(value, dict):
            if not all(type(key) is str for key in value):  # keys as str(), merged as _canonical
                value = {str(key): item for key, item in value.items()}
            out.append("{")
            for key, item in value.items():
                out.append(separator)
                out.append(_encode_str(key))
                out.append(": ")
                self.write(item, inner)
                separator = "," + inner
            out.append(newline + "}")
        else:
            out.append("[")
            for item in value:
                out.append(separator)
                self.write(item, inner)
                separator = "," + inner
            out.append(newline + "]")
