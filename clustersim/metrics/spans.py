"""Every device's busy intervals as arrays, and their unions for all devices at once.

The per-device breakdown (:func:`clustersim.metrics.breakdown.device_breakdown`) and the
per-iteration bubbles of the 3D hybrid add up, per device, the length of the union of its
compute intervals, of its communication intervals and of both.  A 1T-parameter run has
1.6 million records over 3,456 devices, a 131,072-GPU run a few intervals on each of its
devices: a union per device in Python (or a numpy call per device) was most of the
summary's time.  Here the intervals of all devices sit in one set of arrays sorted by
device, then start, and one pass of numpy takes every device's union together.

Exactness: a device's union is the sum of its busy periods' lengths (a period ends where
the next start lies beyond every end so far), added one by one in time order from 0.0,
as the sequential sweep (:func:`clustersim.metrics.breakdown._union`) adds them, so every
number is the same to the last bit.  Units: seconds.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from operator import itemgetter

import numpy as np

from ..records import COMMUNICATION_KINDS, Record, RecordLog

Interval = tuple[float, float]


@dataclass(frozen=True)
class DeviceSpans:
    """The compute and communication intervals of every device that had any, sorted by
    device, then start (ties in no particular order: a union does not depend on it)."""

    names: list[str]
    """Device names by id, in the order their first interval was recorded."""
    device: np.ndarray
    """Per interval, its device's id (int32, non-decreasing)."""
    start_s: np.ndarray
    """Per interval, its start (s)."""
    end_s: np.ndarray
    """Per interval, its end (s)."""
    compute: np.ndarray
    """Per interval, True for compute, False for communication (bool)."""

    @classmethod
    def of(
        cls,
        names: list[str],
        device: Sequence[int],
        start_s: Sequence[float],
        end_s: Sequence[float],
        compute: Sequence[bool],
    ) -> DeviceSpans:
        """The spans of intervals given in any order (sorted here)."""
        starts = np.asarray(start_s, dtype=float)
        devices = np.asarray(device, dtype=np.int32)
        order = np.lexsort((starts, devices))
        return cls(
            names,
            devices[order],
            starts[order],
            np.asarray(end_s, dtype=float)[order],
            np.asarray(compute, dtype=bool)[order],
        )

    def unions(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Per device id, the length (s) of the union of its intervals (those ``mask``
        keeps: all when None)."""
        return self._unions(mask, None)

    def busy(self) -> dict[str, tuple[float, float, float]]:
        """Per device: seconds of compute, of communication, and of either (unions)."""
        compute = self.unions(self.compute).tolist()
        communication = self.unions(~self.compute).tolist()
        either = self.unions().tolist()
        return {
            name: (compute[i], communication[i], either[i]) for i, name in enumerate(self.names)
        }

    def busy_in_windows(self, windows: Sequence[Interval]) -> list[tuple[list[float], list[float]]]:
        """Per window ``(lo, hi)`` (s): per device id, its compute seconds and its busy
        seconds (compute or communication) inside the window, each interval clipped to it.

        Clipping a start to ``lo`` keeps the intervals in order of start, so the window's
        intervals need no sorting again."""
        return [
            (self._unions(self.compute, window).tolist(), self._unions(None, window).tolist())
            for window in windows
        ]

    def _unions(self, mask: np.ndarray | None, window: Interval | None) -> np.ndarray:
        """:meth:`unions` of the intervals ``mask`` keeps, clipped to ``window`` (when
        given), taken :data:`CHUNK` intervals at a time (whole devices in each): the
        temporaries of a union take 50 bytes an interval, 100 MB for all of a 1T-parameter
        run's at once."""
        totals = np.zeros(len(self.names))
        for part in self._chunks():
            device, starts, ends = self.device[part], self.start_s[part], self.end_s[part]
            keep = None if mask is None else mask[part]
            if window is not None:
                lo, hi = window
                inside = (ends > lo) & (starts < hi)
                keep = inside if keep is None else keep & inside
            if keep is not None:
                device, starts, ends = device[keep], starts[keep], ends[keep]
            if window is not None:
                starts, ends = np.maximum(starts, window[0]), np.minimum(ends, window[1])
            totals += union_by_device(device, starts, ends, len(self.names))  # 0.0 elsewhere
        return totals

    def _chunks(self) -> Iterator[slice]:
        """Slices of about :data:`CHUNK` intervals in order, each ending where a device's
        intervals end."""
        n, start = len(self.device), 0
        while start < n:
            stop = start + CHUNK
            if stop < n:
                stop = int(np.searchsorted(self.device, self.device[stop - 1], side="right"))
            else:
                stop = n
            yield slice(start, stop)
            start = stop


CHUNK = 1 << 18
"""Intervals whose unions :class:`DeviceSpans` takes at once (more for a device with more)."""


def device_spans(records: Sequence[Record]) -> DeviceSpans:
    """The :class:`DeviceSpans` of ``records``: a compute record's interval on its
    resource, a transfer's or collective's on its source and (when another device) its
    destination.  Kept once per run for a :class:`~clustersim.records.RecordLog`."""
    if isinstance(records, RecordLog):
        return records.derived("device_spans", _device_spans)
    return _device_spans(records)


_FIELDS = itemgetter(1, 0, 3, 4, 7, 8)
"""A record's kind, resource, start_s, end_s, src and dst."""


def _device_spans(records: Sequence[Record]) -> DeviceSpans:
    """One pass over the records (a million at scale: the loop does no more than append),
    into typed arrays (8 bytes a time, 4 a device id, 1 a flag: no list of pointers and
    no copy to make them numpy's)."""
    ids: defaultdict[str, int] = defaultdict(count().__next__)  # a new name: the next id
    device, starts, ends, compute = array("i"), array("d"), array("d"), array("b")
    communication = COMMUNICATION_KINDS
    for kind, resource, start, end, src, dst in map(_FIELDS, records):
        if kind == "compute":
            device.append(ids[resource])
            starts.append(start)
            ends.append(end)
            compute.append(True)
        elif kind in communication:
            for name in (src, dst) if dst != src else (src,):
                device.append(ids[name])
                starts.append(start)
                ends.append(end)
                compute.append(False)
    order = np.lexsort((np.frombuffer(starts), np.frombuffer(device, dtype=np.int32)))
    columns = [device, starts, ends, compute]
    del device, starts, ends, compute
    sorted_columns = []
    for dtype in (np.int32, float, float, bool):  # each array let go once sorted: a smaller peak
        sorted_columns.append(np.frombuffer(columns.pop(0), dtype=dtype)[order])
    return DeviceSpans(list(ids), *sorted_columns)


def union_by_device(
    device: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, devices: int
) -> np.ndarray:
    """Per device id below ``devices``, the length (s) of the union of its intervals
    ``[start_s[i], end_s[i]]``, given sorted by device, then start.

    The reach of a period (the latest end so far) is a running maximum that starts again
    at each device: numpy's maximum orders complex numbers by real part, then imaginary,
    so the running maximum of ``device + 1j * end`` is, at each interval, its device and
    the latest end of that device so far (the ends kept exactly as the imaginary parts)."""
    totals = np.zeros(devices)
    if not len(device):
        return totals
    keyed = np.empty(len(device), dtype=complex)
    keyed.real = device
    keyed.imag = end_s
    reach = np.maximum.accumulate(keyed).imag
    new = np.empty(len(device), dtype=bool)
    new[0] = True
    new[1:] = (device[1:] != device[:-1]) | (start_s[1:] > reach[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(device) - 1)
    return sums_in_order(reach[last] - start_s[first], device[first], devices)


SEQUENTIAL_BELOW = 256
"""Once fewer devices than this have periods left to add, :func:`sums_in_order` adds
their rest in Python (a numpy step costs about as much as adding 500 numbers one by one)."""


def sums_in_order(values: np.ndarray, owner: np.ndarray, owners: int) -> np.ndarray:
    """Per owner below ``owners``, the sum of its ``values`` (grouped by owner, in order)
    added one by one from 0.0, as the sequential sweep adds them: the same to the last bit.

    numpy's ``add.reduceat`` adds pairwise (another last bit); here the k-th values of all
    owners are added in one step, owners with the most values first, until few are left."""
    totals = np.zeros(owners)
    if not len(values):
        return totals
    first = np.flatnonzero(np.append(True, owner[1:] != owner[:-1]))
    counts = np.diff(np.append(first, len(values)))
    busiest = np.argsort(-counts, kind="stable")
    first, fewer = first[busiest], -counts[busiest]  # fewer: increasing
    who = owner[first]
    step, live = 0, len(first)
    while live >= SEQUENTIAL_BELOW:
        totals[who[:live]] += values[first[:live] + step]
        step += 1
        live = int(np.searchsorted(fewer, -step))  # owners with more than ``step`` values
    if live:
        rest = values.tolist()
        for owner_id, start, n in zip(
            who[:live].tolist(), first[:live].tolist(), (-fewer[:live]).tolist(), strict=True
        ):
            total = float(totals[owner_id])
            for value in rest[start + step : start + n]:
                total += value
            totals[owner_id] = total
    return totals
