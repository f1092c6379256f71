"""How the global batch is shared among data-parallel ranks: evenly, by weights, or by speed
(``data_parallel.balance``; docs/mixed-clusters.md, "Balancing data parallelism").

A *rank* is what holds one share: a data-parallel worker (the ``data_parallel`` and
``zero`` strategies), or a replica of the 3D hybrid (all its devices share its
micro-batches).  A share counts whole *units* -- samples, or micro-batches of one size --
and the shares add up exactly to the total.

* :func:`weighted_shares` -- in proportion to weights, by largest remainder (Hamilton's
  method): each rank the floor of its quota ``total x w / sum(w)``, then the units left one
  each to the largest remainders, ties to the lower rank.  Exact: the quotas are rationals.
* :func:`balanced_shares` -- the shares whose estimated times are as equal as whole units
  allow (the slowest rank's time smallest).  Ranks come in classes of equal speed
  (:class:`RankClass`: one GPU type, one replica shape), each with its time for n units,
  nondecreasing in n.  Linearised as ``fixed + n x per_unit`` (a secant), the shares that
  end together are a water level T: ``n_k = (T - fixed_k) / per_unit_k``, at least the
  minimum, adding up to the total; the secants are taken again at the shares found, twice
  (a roofline's time is not linear in the batch).  Each class then keeps one unit less than
  its level's floor (at least the minimum), and what is left goes, one level of the class
  at a time, to the class whose time after taking it is the smallest (ties to the lower
  class): the min-max greedy, optimal for nondecreasing times when it starts at or below
  an optimum, here a few levels per class.  Inside a class the shares differ by at most
  one unit, the first ranks taking the extra.  O(ranks + classes x levels x log classes).

:func:`rank_classes` groups ranks by the speed of their devices (:func:`speed_key`),
:func:`rank_weights` reads a mapping of device patterns to weights for the ranks, and
:func:`refuse_short_shares` refuses a share below the minimum.  Units: whatever the caller's
unit is; seconds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import Problem, ScenarioError, join_path

BALANCE_KEY = "data_parallel.balance"
"""The scenario key every problem of this module names."""
REFINEMENTS = 2
"""Times the secants are taken again at the shares found (after the even share's)."""


@dataclass(frozen=True)
class RankClass:
    """Ranks of equal speed: their positions in rank order, and the estimated seconds of
    one of them holding n units (nondecreasing in n)."""

    ranks: tuple[int, ...]
    seconds: Callable[[int], float]


def even_shares(total: int, ranks: int) -> list[int]:
    """``total`` units over ``ranks`` as evenly as whole units allow, the first ranks one more."""
    base, extra = divmod(total, ranks)
    return [base + (1 if i < extra else 0) for i in range(ranks)]


def weighted_shares(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` units in proportion to ``weights`` (each above 0), by largest remainder."""
    exact = [Fraction(w) for w in weights]
    whole = sum(exact)
    quotas = [total * w / whole for w in exact]
    shares = [math.floor(q) for q in quotas]
    left = total - sum(shares)
    order = sorted(range(len(shares)), key=lambda i: (shares[i] - quotas[i], i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def balanced_shares(total: int, classes: Sequence[RankClass], minimum: int = 1) -> list[int]:
    """``total`` units over the ranks of ``classes`` so that the largest estimated time is
    the smallest whole units allow, each rank at least ``minimum`` (module docstring).
    ValueError if ``total`` cannot give every rank the minimum."""
    sizes = [len(c.ranks) for c in classes]
    if total < minimum * sum(sizes):
        raise ValueError(f"{total} units cannot give {sum(sizes)} ranks {minimum} each")
    times = [_Memo(c.seconds) for c in classes]
    levels = _levels(total, sizes, times, minimum)
    base = [max(minimum, math.floor(x) - 1) for x in levels]
    left = total - sum(b * n for b, n in zip(base, sizes, strict=True))
    extra = [0] * len(classes)
    heap = [(times[k](base[k] + 1), k) for k in range(len(classes))]
    heapq.heapify(heap)
    while left > 0:
        _, k = heapq.heappop(heap)
        if left < sizes[k]:
            extra[k] = left
            break
        left -= sizes[k]
        base[k] += 1
        heapq.heappush(heap, (times[k](base[k] + 1), k))
    shares = [0] * sum(sizes)
    for k, c in enumerate(classes):
        for i, rank in enumerate(c.ranks):
            shares[rank] = base[k] + (1 if i < extra[k] else 0)
    return shares


class _Memo:
    """A class's seconds of n units, each n priced once."""

    def __init__(self, seconds: Callable[[int], float]) -> None:
        self.seconds = seconds
        self.known: dict[int, float] = {}

    def __call__(self, n: int) -> float:
        found = self.known.get(n)
        if found is None:
            found = self.known[n] = float(self.seconds(n))
        return found


def _levels(total: int, sizes: Sequence[int], times: Sequence[_Memo], minimum: int) -> list[float]:
    """Each class's fractional share at the water level: from secants at the even share,
    then :data:`REFINEMENTS` times at the shares found."""
    shares = [total / sum(sizes)] * len(sizes)
    for _ in range(1 + REFINEMENTS):
        lines = [_secant(f, x, minimum) for f, x in zip(times, shares, strict=True)]
        shares = _water_fill(total, sizes, lines, minimum)
    return shares


def _secant(seconds: _Memo, share: float, minimum: int) -> tuple[float, float]:
    """(fixed seconds, seconds per unit) of the line through the class's times at its
    share's whole neighbour a and a little above it; (0, 1) when time does not grow (then
    nothing tells the classes apart)."""
    a = max(minimum, round(share), 1)
    b = a + max(1, a // 8)
    per_unit = (seconds(b) - seconds(a)) / (b - a)
    if not per_unit > 0:
        return 0.0, 1.0
    return seconds(a) - a * per_unit, per_unit


def _water_fill(
    total: int, sizes: Sequence[int], lines: Sequence[tuple[float, float]], minimum: int
) -> list[float]:
    """Shares ``max(minimum, (T - fixed) / per_unit)`` per class, adding up to ``total``
    over the classes' ``sizes``: the level T found over the classes sorted by the level at
    which each rises above the minimum."""
    rises = sorted(range(len(sizes)), key=lambda k: (lines[k][0] + minimum * lines[k][1], k))
    floor_units = minimum * sum(sizes)
    rate = offset = 0.0  # over the rising classes: sum n / per_unit, sum n fixed / per_unit
    level = 0.0
    for j, k in enumerate(rises):
        fixed, per_unit = lines[k]
        floor_units -= minimum * sizes[k]
        rate += sizes[k] / per_unit
        offset += sizes[k] * fixed / per_unit
        level = (total - floor_units + offset) / rate
        following = rises[j + 1] if j + 1 < len(rises) else None
        if following is None or level <= lines[following][0] + minimum * lines[following][1]:
            break
    return [max(float(minimum), (level - fixed) / per_unit) for fixed, per_unit in lines]


# --------------------------------------------------------------------------- ranks


@dataclass(frozen=True)
class Ranks:
    """The ranks a batch is shared among, as :func:`share_out` needs them."""

    devices: Sequence[Sequence[Any]]
    """Each rank's devices (topology :class:`~clustersim.topology.Device`)."""
    names: Sequence[str]
    """Each rank's name in messages (a worker's device, ``replica 3``)."""
    what: str
    """What a rank is: ``worker`` or ``replica``."""
    units: str
    """What a share counts, plural: ``samples``, ``micro-batches`` ..."""


def share_out(
    balance: str | Mapping[str, float],
    total: int,
    ranks: Ranks,
    topology: Any,
    seconds_of: Callable[[int], Callable[[int], float]],
    minimum: int = 1,
    fix: str = "",
) -> list[int]:
    """``total`` units over ``ranks`` by ``balance`` (``speed``, or weights by device
    pattern): :func:`balanced_shares` with ``seconds_of(rank)`` the time of that rank (the
    first of its class) holding n units, or :func:`weighted_shares` with a ScenarioError at
    ``data_parallel.balance`` (saying ``fix``) if a rank gets fewer than ``minimum``."""
    if isinstance(balance, Mapping):
        names = [[d.name for d in devices] for devices in ranks.devices]
        shares = weighted_shares(total, rank_weights(topology, balance, names, ranks.what))
        refuse_short_shares(shares, minimum, ranks.names, ranks.units, fix)
        return shares
    classes = rank_classes(ranks.devices)
    return balanced_shares(total, [RankClass(tuple(c), seconds_of(c[0])) for c in classes], minimum)


def speed_key(device: Any, reprs: dict[int, str] | None = None) -> tuple[Any, ...]:
    """What makes two devices compute alike: kind, type, peak, efficiency, memory bandwidth
    and compute model (a topology :class:`~clustersim.topology.Device`).

    ``reprs`` (id of a compute model -> its repr) spares the repr of a compute model that
    many devices share, the costly part at 100,000 devices; the caller keeps the models
    alive while it uses the dict."""
    compute = device.compute
    if reprs is None:
        text = repr(compute)
    elif (text := reprs.get(id(compute))) is None:
        text = reprs[id(compute)] = repr(compute)
    return (
        device.kind,
        device.type,
        device.flops_per_s,
        device.efficiency,
        device.memory_bandwidth_Bps,
        text,
    )


def rank_classes(ranks: Sequence[Sequence[Any]]) -> list[list[int]]:
    """Positions of the ranks (each a sequence of devices) whose devices compute alike, one
    list per class, classes and ranks in rank order."""
    classes: dict[tuple[Any, ...], list[int]] = {}
    reprs: dict[int, str] = {}
    for i, devices in enumerate(ranks):
        classes.setdefault(tuple(speed_key(d, reprs) for d in devices), []).append(i)
    return list(classes.values())


def rank_label(devices: Sequence[Any]) -> str:
    """A rank's type for reports: its devices' types in order, joined by ``+`` (a device
    naming no preset shows its peak, ``312TFLOPS``)."""
    labels = [d.type or f"{d.flops_per_s / 1e12:.4g}TFLOPS" for d in devices]
    return "+".join(dict.fromkeys(labels))


def rank_weights(
    topology: Any, weights: Mapping[str, float], ranks: Sequence[Sequence[str]], what: str
) -> list[float]:
    """The weight of each rank (a sequence of device names) from ``weights``, device
    patterns (:meth:`~clustersim.topology.Topology.select`) to weights.  A ScenarioError at
    ``data_parallel.balance`` for a device matched by no pattern, by two of different
    weights, or a rank (``what``: worker, replica) whose devices have different weights."""
    wanted = {device for devices in ranks for device in devices}
    of: dict[str, tuple[str, float]] = {}
    for glob, weight in weights.items():
        path = join_path(BALANCE_KEY, glob)
        matched = [d.name for d in topology.select(glob, path) if d.name in wanted]
        if not matched:
            raise ScenarioError(
                Problem(
                    path,
                    f"{glob!r} matches no device of a {what}",
                    f"a pattern of {what}s' devices",
                )
            )
        for name in matched:
            if name in of and of[name][1] != weight:
                other, earlier = of[name]
                raise ScenarioError(
                    Problem(
                        path,
                        f"{name} is matched by {glob!r} (weight {weight:g}) and by {other!r} "
                        f"(weight {earlier:g})",
                        "patterns that match each device once, or agree on its weight",
                    )
                )
            of.setdefault(name, (glob, weight))
    out = []
    for i, devices in enumerate(ranks):
        missing = next((d for d in devices if d not in of), None)
        if missing is not None:
            raise ScenarioError(
                Problem(
                    BALANCE_KEY,
                    f"{missing} ({what} {i}) is matched by no pattern, so it has no weight",
                    f"patterns that match every {what}'s devices (e.g. '*': 1 for the rest)",
                )
            )
        found = {of[d][1] for d in devices}
        if len(found) > 1:
            raise ScenarioError(
                Problem(
                    BALANCE_KEY,
                    f"the devices of {what} {i} ({devices[0]} ... {devices[-1]}) have different "
                    f"weights {sorted(found)}; they hold one share of the batch together",
                    f"one weight for all the devices of a {what}",
                )
            )
        out.append(found.pop())
    return out


def refuse_short_shares(
    shares: Sequence[int], minimum: int, names: Sequence[str], units: str, fix: str
) -> None:
    """A ScenarioError at ``data_parallel.balance`` if a share is below ``minimum`` units
    (``names[i]`` the rank's name in the message, ``units`` what they count, ``fix`` what
    would help)."""
    short = next((i for i, n in enumerate(shares) if n < minimum), None)
    if short is None:
        return
    raise ScenarioError(
        Problem(
            BALANCE_KEY,
            f"the weights give {names[short]} {shares[short]} of the batch's {units}",
            f"at least {minimum} each: {fix}",
        )
    )
