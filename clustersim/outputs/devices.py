"""The per-device table (``devices.csv``), and summary.json's per-device entries folded.

A *per-device entry* of summary.json is a mapping, at any depth, keyed by device names
(those of ``devices``, ``workers`` and ``memory.per_device``) whose values are numbers,
rows of numbers (``DeviceTimes``, ``MemoryRow``, ``ServerLoad``) or lists of such rows
(``per_device_iteration``): ``devices``, ``per_iteration``, ``per_device_bubble``,
``per_device_iteration``, ``memory.per_device``, a parameter server's
``iterations_per_worker``, ``pushes_per_worker`` and ``servers``, an offload's
``offload.cpu_memory_bytes``, each job's entries in a multi-job run.

``devices.csv`` (:func:`devices_csv`) has one row per device of any entry, in the order
they first appear (``devices``' order: the topology's), and the columns

* ``device``, its ``type`` on a mixed cluster (the devices' entries say it), then ``compute_s``, ``communication_s``, ``exposed_communication_s`` and
  ``idle_s`` (the ``devices`` entry's fields) and ``bubble_fraction`` (the device's
  ``per_device_bubble``, else idle / run time: :func:`device_bubbles`), as the report's
  table has always had;
* every other entry's values under its key path: ``per_device_bubble`` for a number,
  ``memory.per_device.peak_bytes`` for a row's field, ``per_device_iteration.0.idle_s``
  for field ``idle_s`` of a list's item 0.

A cell holds the value summary.json holds (floats to 12 significant digits by ``repr``,
``True``/``False``, whole numbers as such), empty where the device is not in the entry.

Folded (:func:`fold_entries`), each entry of more than 2 x :data:`SHOWN` devices keeps
its :data:`SHOWN` highest devices, then its :data:`SHOWN` lowest, by the quantity it is
about (:func:`rank_field`: ``idle_s`` for time breakdowns, ``peak_bytes`` for memory, the
value for numbers); ``folded.summary`` says which entries and how many devices each had.
:func:`unfold_entries` puts every device back from ``devices.csv``, so a folded folder
reads as the whole summary.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..metrics import DeviceTimes, FoldedEntry, FoldedSummary, Summary, canonical_value
from .tables import cell, csv_text, file_problem
from .trace_tracks import natural_key

SHOWN = 10
"""Devices a folded entry keeps at each end: its highest and its lowest."""
DEVICES_CSV = "devices.csv"
"""The per-device table, in a folded run folder and beside report.html."""
TIMES = ("compute_s", "communication_s", "exposed_communication_s", "idle_s")
"""Fields of the ``devices`` entry, columns of their own (no key path)."""
TYPE = "type"
"""The ``devices`` entry's field naming a mixed cluster's device type: the second column."""
BUBBLE = "bubble_fraction"
"""The derived column after :data:`TIMES`."""
RANK_FIELDS = ("peak_bytes", "idle_s", "bubble_fraction", "bytes")
"""Fields an entry's rows are ranked by, the first one they have (else their first number)."""

Path_ = tuple[str, ...]
"""A key path inside summary.json."""
_WHOLE = re.compile(r"-?\d+")


def as_fraction(value: Any) -> float | None:
    """A bubble fraction from a number or a mapping holding one (``mean``, ``bubble_fraction``)."""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("bubble_fraction", "mean", "fraction", "bubble"):
            if key in value:
                return as_fraction(value[key])
        numbers = [v for v in value.values() if isinstance(v, (int, float))]
        return sum(numbers) / len(numbers) if numbers else None
    if isinstance(value, (list, tuple)) and value:
        numbers = [v for v in value if isinstance(v, (int, float))]
        return sum(numbers) / len(numbers) if numbers else None
    return None


def device_bubbles(summary: Summary) -> dict[str, float | None]:
    """Each device's bubble: its ``per_device_bubble``, else its idle time / run time (the
    iterations' sum, else the makespan); None when neither is known."""
    given = summary.strategy.device_bubbles()
    times = summary.strategy.iteration_times()
    run_s = float(sum(times)) if times else float(summary.header.makespan_s or 0.0)
    out: dict[str, float | None] = {}
    for name, row in summary.devices.items():
        value = as_fraction(given.get(name))
        if value is None and run_s > 0 and isinstance(row, DeviceTimes):
            value = float(row.idle_s or 0.0) / run_s
        out[name] = value
    return out


def _names(data: Mapping[str, Any]) -> set[str]:
    """Device names of a summary: ``devices``', ``workers``' and ``memory.per_device``'s."""
    names = set(data.get("devices") or {})
    workers = data.get("workers")
    if isinstance(workers, list):
        names.update(w for w in workers if isinstance(w, str))
    memory = data.get("memory")
    if isinstance(memory, Mapping) and isinstance(memory.get("per_device"), Mapping):
        names.update(memory["per_device"])
    return names


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str))


def _row(value: Any) -> bool:
    return isinstance(value, Mapping) and all(_scalar(v) for v in value.values())


def _shape(values: Any) -> str | None:
    """``number``, ``row`` or ``rows`` when every value of an entry has that shape."""
    if all(_scalar(v) and not isinstance(v, str) for v in values):
        return "number"
    if all(_row(v) for v in values):
        return "row"
    if all(isinstance(v, list) and all(_row(i) for i in v) for v in values):
        return "rows"
    return None


def device_entries(data: Mapping[str, Any]) -> Iterator[tuple[Path_, Mapping[str, Any], str]]:
    """Each per-device entry of a summary mapping: (key path, the mapping, its shape)."""
    names = _names(data)

    def walk(node: Mapping[str, Any], path: Path_) -> Iterator[tuple[Path_, Any, str]]:
        for key, value in node.items():
            if not isinstance(value, Mapping) or (not path and key == "folded"):
                continue
            here = (*path, str(key))
            shape = _shape(value.values()) if value and set(value) <= names else None
            if shape is not None:
                yield here, value, shape
            else:
                yield from walk(value, here)

    yield from walk(data, ())


def _column(path: Path_, *rest: object) -> str:
    """The column of a value: its key path, then the row's field (and the item's index)."""
    if path == ("devices",) and rest:
        return str(rest[-1])
    return ".".join([*path, *(str(r) for r in rest)])


def _cells(value: Any, shape: str) -> Iterable[tuple[tuple[object, ...], Any]]:
    """(where in the entry's columns, value) of one device's value in an entry: ``()``
    for a number, ``(field,)`` for a row's field, ``(index, field)`` in a list of rows
    (:func:`_column` makes the column from the entry's path and these)."""
    if shape == "number":
        return (((), value),)
    if shape == "row":
        return (((field,), item) for field, item in value.items())
    return (
        ((index, field), inner) for index, item in enumerate(value) for field, inner in item.items()
    )


class _TextCache:
    """:func:`_text` of values, remembered for numbers and strings (devices alike repeat
    their values: 131,072 devices of a few dozen kinds); 0.0 is not remembered, so -0.0
    keeps its sign."""

    def __init__(self) -> None:
        self._texts: dict[tuple[type, Any], str] = {}

    def __call__(self, item: Any) -> str:
        key = (type(item), item)
        found = self._texts.get(key) if isinstance(item, (int, float, str)) else None
        if found is None:
            found = _text(item)
            if isinstance(item, (int, float, str)) and item != 0 and len(self._texts) < _TEXTS_KEPT:
                self._texts[key] = found
        return found


_TEXTS_KEPT = 1 << 16
"""Distinct values whose text :func:`device_table` remembers."""


def _text(value: Any) -> str:
    """A value as devices.csv writes it (floats as summary.json holds them)."""
    value = canonical_value(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return "" if value is None else str(value)
    return cell(float(value) if isinstance(value, float) else int(value))


def device_table(summary: Summary | Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The columns and rows of ``devices.csv`` (see the module docstring)."""
    typed = Summary.of(summary)
    data = summary if isinstance(summary, Mapping) else typed.as_dict()
    columns: dict[str, None] = dict.fromkeys(("device", *TIMES, BUBBLE))
    rows: dict[str, dict[str, str]] = {}
    for device, bubble in device_bubbles(typed).items():
        rows.setdefault(device, {})[BUBBLE] = "" if bubble is None else _text(bubble)
    text_of = _TextCache()
    for path, entry, shape in device_entries(data):
        named: dict[tuple[object, ...], str] = {}  # (field, index) -> column, once per entry
        for device, value in entry.items():
            row = rows.setdefault(device, {})
            for where, item in _cells(value, shape):
                column = named.get(where)
                if column is None:
                    column = named[where] = _column(path, *where)
                    columns.setdefault(column)
                row[column] = text_of(item)
    header = list(columns)
    if TYPE in columns:  # a mixed cluster's device types: beside the names
        header.remove(TYPE)
        header.insert(1, TYPE)
    return header, [[device] + [row.get(c, "") for c in header[1:]] for device, row in rows.items()]


def devices_csv(summary: Summary | Mapping[str, Any]) -> str:
    """The text of ``devices.csv``; empty when the summary has no per-device entry."""
    header, rows = device_table(summary)
    return csv_text(header, rows) if rows else ""


def rank_field(entry: Mapping[str, Any], shape: str) -> str:
    """What an entry is ranked by: ``value`` for numbers, else the first of
    :data:`RANK_FIELDS` its rows have, else their first numeric field."""
    if shape == "number":
        return "value"
    first = next(iter(entry.values()))
    row = first[0] if shape == "rows" and first else first
    fields = [k for k, v in (row or {}).items() if isinstance(v, (int, float))]
    fields = [k for k in fields if not isinstance(row[k], bool)]
    return next((f for f in RANK_FIELDS if f in fields), fields[0] if fields else "")


def _quantity(value: Any, shape: str, by: str) -> float | None:
    if shape == "number":
        number = value
    elif shape == "row":
        number = value.get(by)
    else:
        items = [i.get(by) for i in value if isinstance(i.get(by), (int, float))]
        number = sum(items) / len(items) if items else None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number != number:
        return None
    return float(number)


def extremes(entry: Mapping[str, Any], shape: str, by: str, shown: int = SHOWN) -> dict[str, Any]:
    """The ``shown`` highest devices of an entry by ``by``, then its ``shown`` lowest
    (highest first; ties in device order; unknown quantities lowest)."""

    def key(device: str) -> tuple[Any, ...]:
        q = _quantity(entry[device], shape, by)
        return (q is None, -(q or 0.0), natural_key(device))

    ranked = sorted(entry, key=key)
    kept = ranked[:shown] + ranked[-shown:] if len(ranked) > 2 * shown else ranked
    return {device: entry[device] for device in kept}


def fold_entries(
    data: Mapping[str, Any], shown: int = SHOWN
) -> tuple[dict[str, Any], FoldedSummary | None]:
    """The summary mapping with each entry of more than 2 x ``shown`` devices cut to its
    :func:`extremes`, and what was cut (None: nothing)."""
    out = dict(data)
    cut: dict[str, FoldedEntry] = {}
    for path, entry, shape in list(device_entries(data)):
        if len(entry) <= 2 * shown:
            continue
        by = rank_field(entry, shape)
        _set(out, path, extremes(entry, shape, by, shown))
        cut[".".join(path)] = FoldedEntry(by, len(entry), 2 * shown)
    return out, FoldedSummary(DEVICES_CSV, cut) if cut else None


def _set(data: dict[str, Any], path: Path_, value: Any) -> None:
    """Put ``value`` at ``path``, copying the mappings on the way (the input stays whole)."""
    node = data
    for key in path[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    node[path[-1]] = value


def read_devices(path: str | os.PathLike[str]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a ``devices.csv`` as text; a missing or unreadable file is a
    ScenarioError naming it."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            table = list(csv.reader(fh))
    except FileNotFoundError:
        raise file_problem(path, "missing (summary.json is folded: it holds the rest)") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise file_problem(path, f"cannot be read as CSV: {exc}") from None
    if not table or table[0][:1] != ["device"]:
        raise file_problem(path, "no header starting with 'device'")
    return table[0], table[1:]


def _value(text: str) -> Any:
    """A cell back as summary.json held it: a bool, a whole number, a float or text."""
    if text in ("True", "False"):
        return text == "True"
    if _WHOLE.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def unfold_entries(data: Mapping[str, Any], table: tuple[list[str], list[list[str]]]) -> dict:
    """The summary mapping with every entry of ``folded.summary`` whole again, from the
    rows of ``devices.csv`` (:func:`read_devices`)."""
    folded = data.get("folded") or {}
    entries = (folded.get("summary") or {}).get("entries") or {}
    header, rows = table
    out = dict(data)
    for key in entries:
        path = tuple(key.split("."))
        spots = _spots(path, header)
        whole = {}
        for row in rows:
            value = _unfold_value(spots, row)
            if value is not None:
                whole[row[0]] = value
        _set(out, _real_path(data, key), whole)
    return out


def _real_path(data: Mapping[str, Any], key: str) -> Path_:
    """The key path an entry's dotted name stands for (a job's name may hold a dot)."""
    for path, _entry, _shape in device_entries(data):
        if ".".join(path) == key:
            return path
    return tuple(key.split("."))


def _spots(path: Path_, header: Sequence[str]) -> list[tuple[int, int | None, str | None]]:
    """(column index, item index or None, field or None) of an entry's columns."""
    if path == ("devices",):
        return [(header.index(f), None, f) for f in TIMES if f in header]
    prefix = ".".join(path)
    spots: list[tuple[int, int | None, str | None]] = []
    for index, column in enumerate(header):
        if column == prefix:
            spots.append((index, None, None))
        elif column.startswith(prefix + "."):
            rest = column[len(prefix) + 1 :].split(".")
            if len(rest) == 1:
                spots.append((index, None, rest[0]))
            elif len(rest) == 2 and rest[0].isdigit():
                spots.append((index, int(rest[0]), rest[1]))
    return spots


def _unfold_value(spots: Sequence[tuple[int, int | None, str | None]], row: Sequence[str]) -> Any:
    """One device's value of an entry from its row (None: not in the entry)."""
    cells = [(item, field, row[i]) for i, item, field in spots if i < len(row) and row[i] != ""]
    if not cells:
        return None
    if cells[0][1] is None:
        return _value(cells[0][2])
    if cells[0][0] is None:
        return {field: _value(text) for _item, field, text in cells}
    items: dict[int, dict[str, Any]] = {}
    for item, field, text in cells:
        items.setdefault(item or 0, {})[str(field)] = _value(text)
    return [items[i] for i in sorted(items)]
