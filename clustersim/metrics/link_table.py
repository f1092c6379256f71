"""The link table: every link that carried traffic, busiest first, held as columns.

A 131,072-GPU run moves bytes over about 800,000 links; a dict per link would hold a
quarter of a gigabyte.  :class:`LinkTable` keeps the numbers in numpy arrays and makes a
row (the dict :func:`clustersim.metrics.link_table` documents) when one is read, so it is
used like the list of rows it stands for: ``len``, indexing, slicing, iteration, ``==``.

Units: bytes, seconds, bytes/s.  ``utilisation`` = bytes / (bandwidth x makespan),
``busy_fraction`` = busy seconds / makespan (0 when either denominator is 0).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class LinkTable(Sequence[dict[str, Any]]):
    """Rows of :func:`clustersim.metrics.link_table` (see the module docstring), in the
    table's order: ``names`` and the arrays are per row."""

    __slots__ = ("_names", "_bandwidth", "_bytes", "_busy", "_peak", "_makespan")

    def __init__(
        self,
        names: Sequence[str],
        bandwidth_Bps: np.ndarray,
        nbytes: np.ndarray,
        busy_s: np.ndarray,
        peak_flows: np.ndarray,
        makespan_s: float,
    ) -> None:
        self._names = names
        """Per row, the link's name: a list, or :class:`_LinkNames` (names made when read)."""
        self._bandwidth = bandwidth_Bps
        self._bytes = nbytes
        self._busy = busy_s
        self._peak = peak_flows
        self._makespan = float(makespan_s)

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(f"link table row {index} of {len(self)}")
        return self._row(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._row(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LinkTable({len(self)} links)"

    def __getstate__(self) -> tuple[Any, ...]:
        """Pickled with the names themselves (not the topology's links they are read from)."""
        names = list(self._names)
        return (names, self._bandwidth, self._bytes, self._busy, self._peak, self._makespan)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for slot, value in zip(self.__slots__, state, strict=True):
            object.__setattr__(self, slot, value)

    def fold(self, count_column: str) -> list[dict[str, Any]]:
        """Rows equal in every column but the name, merged into their first (in the table's
        order), each with ``count_column``: how many rows it stands for.  Equal bandwidth,
        bytes, busy time and peak make the rest equal (the same makespan divides them), so
        numpy groups on those four."""
        if not len(self):
            return []
        keys = np.column_stack(
            (self._bandwidth, self._bytes, self._busy, self._peak.astype(np.float64))
        )
        _, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        return [{**self._row(int(first[i])), count_column: int(counts[i])} for i in order.tolist()]

    def _row(self, i: int) -> dict[str, Any]:
        bandwidth = float(self._bandwidth[i])
        nbytes = float(self._bytes[i])
        busy = float(self._busy[i])
        makespan = self._makespan
        capacity = bandwidth * makespan
        return {
            "link": self._names[i],
            "bandwidth_Bps": bandwidth,
            "bytes": nbytes,
            "busy_s": busy,
            "busy_fraction": busy / makespan if makespan > 0 else 0.0,
            "utilisation": nbytes / capacity if capacity > 0 else 0.0,
            "peak_flows": int(self._peak[i]),
        }


class _LinkNames(Sequence[str]):
    """The names of some links, read from the links when asked (a link may make its name
    from its ends rather than hold it: :class:`clustersim.topology.builder.WiredLink`)."""

    __slots__ = ("_links", "_index")

    def __init__(self, links: Sequence[Any], index: np.ndarray) -> None:
        self._links = links
        self._index = index

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._links[j].name for j in self._index[i].tolist()]
        return self._links[int(self._index[i])].name


def build_link_table(
    index: np.ndarray,
    nbytes: np.ndarray,
    busy_s: np.ndarray,
    peak_flows: np.ndarray,
    links: Sequence[Any],
    makespan_s: float,
) -> LinkTable:
    """The table of the links ``index`` (their traffic in the other arrays, per link):
    those that carried bytes or held a flow, sorted by utilisation, then bytes (both
    highest first), then name."""
    keep = (nbytes > 0) | (peak_flows > 0)
    index, nbytes, busy_s, peak_flows = index[keep], nbytes[keep], busy_s[keep], peak_flows[keep]
    rows = index.tolist()
    bandwidth = np.fromiter((links[i].bandwidth_Bps for i in rows), float, len(rows))
    capacity = bandwidth * float(makespan_s)
    utilisation = np.zeros(len(rows))
    np.divide(nbytes, capacity, out=utilisation, where=capacity > 0)
    by_name = np.empty(len(rows), dtype=np.int64)
    by_name[sorted(range(len(rows)), key=lambda j: links[rows[j]].name)] = np.arange(len(rows))
    order = np.lexsort((by_name, -nbytes, -utilisation)).tolist()
    return LinkTable(
        _LinkNames(links, index[order]),
        bandwidth[order],
        nbytes[order],
        busy_s[order],
        peak_flows[order],
        makespan_s,
    )
