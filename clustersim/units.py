"""Quantities with units: read ``"100Gb/s"``, ``"1.5us"``, ``"160MB"``, ``"312TFLOPS"``
into SI floats, and write SI floats back for people.

SI here means seconds, bytes, bytes per second, FLOPs, FLOP/s and watts.  One table maps
every accepted unit spelling to its quantity and its factor to SI; the parsers
differ only in which quantity they expect.

* ``b`` is a bit and ``B`` a byte, everywhere: ``100Gb/s`` is 1.25e10 B/s.
* Decimal prefixes ``k``/``K`` (1e3), ``M``, ``G``, ``T``, ``P``, ``E``; binary
  prefixes ``Ki`` (2**10), ``Mi``, ``Gi``, ``Ti``, ``Pi``, ``Ei``.
* A lower-case ``m`` before ``b``/``B`` (``mb``) is rejected: milli or mega?
* A number without a unit is an error, except ``0`` (and FLOP counts, which
  may be plain numbers).  Negative, NaN and infinite values are errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from clustersim.errors import did_you_mean

__all__ = [
    "QUANTITIES",
    "Quantity",
    "UnitError",
    "format_bandwidth",
    "format_flop_rate",
    "format_flops",
    "format_power",
    "format_size",
    "format_time",
    "parse_bandwidth",
    "parse_flop_rate",
    "parse_flops",
    "parse_power",
    "parse_size",
    "parse_time",
    "require_positive",
    "unit_pattern",
]


class UnitError(ValueError):
    """A quantity could not be read.

    ``str()`` says what was wrong and gives examples of what is allowed;
    :attr:`allowed` lists the accepted units.
    """

    def __init__(self, message: str, allowed: str = "") -> None:
        super().__init__(message)
        self.message = message
        """What was wrong, with examples of correct values."""
        self.allowed = allowed
        """The units accepted for the expected quantity."""


@dataclass(frozen=True)
class Quantity:
    """One kind of quantity and how it is written."""

    key: str
    """Short identifier: ``size``, ``bandwidth``, ``time``, ``flop_rate``, ``flops``, ``power``."""
    name: str
    """Name with article, for messages: ``a bandwidth``."""
    examples: tuple[str, ...]
    """Correct values to show in messages and schemas."""
    allowed: str
    """The accepted units, in words."""
    bare_numbers: bool = False
    """Whether a plain number (no unit) is accepted."""

    def such_as(self) -> str:
        """``"a bandwidth such as 100Gb/s or 12.5GB/s"``."""
        return f"{self.name} such as {' or '.join(self.examples)}"


_PREFIX_TEXT = (
    "prefixes k, M, G, T, P, E (powers of 1000) or Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024)"
)

QUANTITIES: dict[str, Quantity] = {
    q.key: q
    for q in (
        Quantity(
            "size",
            "a size",
            ("160MB", "1GiB"),
            f"B or byte (bytes), b or bit (bits), with {_PREFIX_TEXT}",
        ),
        Quantity(
            "bandwidth",
            "a bandwidth",
            ("100Gb/s", "12.5GB/s"),
            f"B/s, Bps, byte/s (bytes), b/s, bps, bit/s (bits), with {_PREFIX_TEXT}",
        ),
        Quantity("time", "a time", ("1.5us", "2ms"), "ns, us, µs, ms, s, min, h, d"),
        Quantity(
            "flop_rate",
            "a FLOP rate",
            ("312TFLOPS", "312TFLOP/s"),
            "FLOPS, FLOP/s, flops, flop/s with prefixes k, M, G, T, P, E",
        ),
        Quantity(
            "flops",
            "a FLOP count",
            ("1.2TFLOP", "5e12"),
            "a plain number, or FLOP, FLOPs, flop with prefixes k, M, G, T, P, E",
            bare_numbers=True,
        ),
        Quantity("power", "a power", ("700W", "1.2kW"), "W (watts) with prefixes k, M, G"),
    )
}
"""Every quantity, by key."""

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {f"{p}i": 1024.0**n for n, p in enumerate("KMGTPE", start=1)}
_DATA = {"B": 1.0, "byte": 1.0, "bytes": 1.0, "b": 0.125, "bit": 0.125, "bits": 0.125}
_PER_SECOND = ("/s", "/sec")
_FLOP_RATES = ("FLOPS", "FLOP/s", "FLOPs/s", "flops", "flop/s", "flops/s")
_FLOP_COUNTS = ("FLOP", "FLOPs", "flop")
_POWER_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
"""Prefixes of watts: ``mW`` would be milliwatts, and no GPU draws a few of them."""
_TIMES = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek small letter mu
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


def _unit_table() -> dict[str, tuple[str, float]]:
    """Every accepted unit spelling -> (quantity key, factor to SI)."""
    table: dict[str, tuple[str, float]] = {}
    for prefix, scale in {**_DECIMAL, **_BINARY}.items():
        for base, factor in _DATA.items():
            table[prefix + base] = ("size", scale * factor)
            rates = [*_PER_SECOND, "ps"] if len(base) == 1 else _PER_SECOND
            for per in rates:
                table[prefix + base + per] = ("bandwidth", scale * factor)
    for prefix, scale in _DECIMAL.items():
        table.update({prefix + base: ("flop_rate", scale) for base in _FLOP_RATES})
        table.update({prefix + base: ("flops", scale) for base in _FLOP_COUNTS})
    table.update({unit: ("time", factor) for unit, factor in _TIMES.items()})
    table.update({prefix + "W": ("power", scale) for prefix, scale in _POWER_PREFIXES.items()})
    return table


_UNITS = _unit_table()
_NUMBER = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*?)\s*", re.DOTALL)
_AMBIGUOUS_MILLI = re.compile(r"mi?(b|B)")


def _alternatives(spellings: Iterable[str]) -> str:
    """A regex alternation of ``spellings``, longest first."""
    return "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))


def _unit_regexes() -> dict[str, str]:
    """Regex of the unit spellings of each quantity (what :data:`_UNITS` holds, compactly)."""
    data_prefix = f"(?:{_alternatives(p for p in {**_DECIMAL, **_BINARY} if p)})?"
    flop_prefix = f"(?:{_alternatives(p for p in _DECIMAL if p)})?"
    data = _alternatives(_DATA)
    per_second = _alternatives(_PER_SECOND)
    return {
        "size": f"{data_prefix}(?:{data})",
        "bandwidth": f"{data_prefix}(?:(?:{data})(?:{per_second})|[Bb]ps)",
        "time": _alternatives(_TIMES),
        "flop_rate": f"{flop_prefix}(?:{_alternatives(_FLOP_RATES)})",
        "flops": f"{flop_prefix}(?:{_alternatives(_FLOP_COUNTS)})",
        "power": f"(?:{_alternatives(p for p in _POWER_PREFIXES if p)})?W",
    }


_UNIT_REGEXES = _unit_regexes()


def unit_pattern(key: str) -> str:
    """A regular expression (JSON Schema / ECMA-262 dialect) matching a value of quantity ``key``."""
    optional = "?" if QUANTITIES[key].bare_numbers else ""
    number = r"\+?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
    return rf"^\s*{number}\s*(?:{_UNIT_REGEXES[key]}){optional}\s*$"


def _split(value: object, q: Quantity) -> tuple[float, str]:
    """The number and the unit spelling of ``value`` (unit ``""`` when absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(f"{_show(value)} is not {q.name}; write e.g. {q.examples[0]}", q.allowed)
    if isinstance(value, int) and abs(value) > 2**1023:
        raise UnitError(f"a number of {len(str(abs(value)))} digits is too large", q.allowed)
    if isinstance(value, (int, float)):
        return float(value), ""
    if not value.strip():
        raise UnitError(f"empty text is not {q.name}; write e.g. {q.examples[0]}", q.allowed)
    match = _NUMBER.fullmatch(value)
    if match is None:
        raise UnitError(
            f"{value!r} does not start with a number; expected {q.such_as()}", q.allowed
        )
    return float(match.group(1)), match.group(2)


def _show(value: object) -> str:
    """``value`` as it would be quoted in a message."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _check_number(number: float, value: object, q: Quantity) -> None:
    """Reject NaN, infinite and negative numbers."""
    if math.isnan(number):
        raise UnitError(f"{_show(value)} is not a number; expected {q.such_as()}", q.allowed)
    if math.isinf(number):
        raise UnitError(f"{_show(value)} is infinite; expected {q.such_as()}", q.allowed)
    if number < 0:
        raise UnitError(f"{_show(value)} is negative; expected {q.such_as()}", q.allowed)


def _unit_hint(unit: str, key: str) -> str:
    """A did-you-mean hint for an unknown unit spelling, among those of quantity ``key``."""
    spellings = [u for u, (k, _) in _UNITS.items() if k == key]
    same = [u for u in spellings if u.lower() == unit.lower()]
    if same:
        choices = " or ".join(repr(u) for u in same)
        return f"; did you mean {choices}? (case matters: b is bits, B is bytes)"
    hint = did_you_mean(unit, spellings)
    return f";{hint}" if hint else ""


def _lookup(unit: str, value: object, q: Quantity) -> tuple[str, float]:
    """(quantity key, factor to SI) of ``unit``; raise when it is unknown or ambiguous."""
    if _AMBIGUOUS_MILLI.match(unit):
        raise UnitError(
            f"{value!r} is ambiguous: lower-case 'm' means milli; "
            "write MB for megabytes or Mb for megabits",
            q.allowed,
        )
    if unit not in _UNITS:
        hint = _unit_hint(unit, q.key)
        raise UnitError(
            f"{value!r} has an unknown unit {unit!r}{hint}; expected {q.such_as()}", q.allowed
        )
    return _UNITS[unit]


def _parse(value: object, key: str) -> float:
    """``value`` as an SI float of quantity ``key``."""
    q = QUANTITIES[key]
    number, unit = _split(value, q)
    _check_number(number, value, q)
    if not unit:
        if number == 0 or q.bare_numbers:
            return number
        raise UnitError(f"{_show(value)} has no unit; expected {q.such_as()}", q.allowed)
    found, factor = _lookup(unit, value, q)
    if found != key:
        raise UnitError(f"{value!r} is {QUANTITIES[found].name}, expected {q.such_as()}", q.allowed)
    result = number * factor
    if math.isinf(result):
        raise UnitError(f"{value!r} is too large; expected {q.such_as()}", q.allowed)
    return result


def require_positive(result: float, value: object, key: str) -> float:
    """``result`` (``value`` read as quantity ``key``) if it is above 0, else a UnitError.

    For quantities where zero means nothing usable: a link of 0 B/s never delivers a
    byte and a device of 0 FLOP/s never finishes its work.
    """
    if result > 0:
        return result
    q = QUANTITIES[key]
    message = f"must be greater than 0, got {_show(value)}; expected {q.such_as()}"
    raise UnitError(message, q.allowed)


def parse_size(value: object) -> float:
    """A size in bytes: ``"160MB"`` -> 1.6e8, ``"1GiB"`` -> 2**30, ``"8Gb"`` -> 1e9."""
    return _parse(value, "size")


def parse_bandwidth(value: object) -> float:
    """A bandwidth in bytes per second: ``"100Gb/s"`` -> 1.25e10, ``"16 GB/s"`` -> 1.6e10."""
    return _parse(value, "bandwidth")


def parse_time(value: object) -> float:
    """A duration in seconds: ``"1us"`` -> 1e-6, ``"1.5ms"`` -> 1.5e-3, ``"1min"`` -> 60."""
    return _parse(value, "time")


def parse_flop_rate(value: object) -> float:
    """A compute rate in FLOP/s: ``"312TFLOPS"`` -> 3.12e14, ``"1.5PFLOP/s"`` -> 1.5e15."""
    return _parse(value, "flop_rate")


def parse_flops(value: object) -> float:
    """A FLOP count: ``"1.2TFLOP"`` -> 1.2e12; a plain number (``5e12``, ``"5e12"``) is a count."""
    return _parse(value, "flops")


def parse_power(value: object) -> float:
    """A power in watts: ``"700W"`` -> 700, ``"1.2kW"`` -> 1200, ``"6.5 kW"`` -> 6500."""
    return _parse(value, "power")


_SIZE_SCALES = (("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15))
_TIME_SCALES = (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0))
_POWER_SCALES = (("W", 1.0), ("kW", 1e3), ("MW", 1e6), ("GW", 1e9))
_FLOP_SCALES = (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12), ("P", 1e15))


def _format(value: float, scales: tuple[tuple[str, float], ...], suffix: str = "") -> str:
    """``value`` in the largest unit of ``scales`` it reaches, with 4 significant digits.

    Values below the smallest unit use the smallest; 0, inf and NaN use the unit of scale 1.
    """
    symbol, scale = next(s for s in scales if s[1] == 1.0)
    if math.isfinite(value) and value != 0:
        symbol, scale = scales[0]
        for candidate, candidate_scale in scales:
            if abs(value) >= candidate_scale:
                symbol, scale = candidate, candidate_scale
    return f"{value / scale:.4g} {symbol}{suffix}"


def format_size(size_bytes: float) -> str:
    """Bytes for people: ``format_size(1.6e8) == "160 MB"`` (decimal prefixes)."""
    return _format(size_bytes, _SIZE_SCALES)


def size_flag(size_bytes: float) -> str:
    """A size as a flag takes it, exact where it can be: the shortest whole number of B, kB,
    MB, GB, TB, KiB, MiB, GiB or TiB (``16B``, ``2KiB``, ``4MB``), else
    :func:`format_size`'s figures without the space (``1.234MB``)."""
    exact = [
        f"{size_bytes / 1000**i:.0f}{prefix}B"
        for i, prefix in enumerate(("", "k", "M", "G", "T"))
        if (size_bytes / 1000**i).is_integer()
    ] + [
        f"{size_bytes / 1024**i:.0f}{prefix}B"
        for i, prefix in enumerate(("Ki", "Mi", "Gi", "Ti"), start=1)
        if (size_bytes / 1024**i).is_integer()
    ]
    if size_bytes > 0 and exact:
        return min(exact, key=len)
    return format_size(size_bytes).replace(" ", "")


def format_bandwidth(bandwidth_Bps: float) -> str:
    """Bytes per second for people: ``format_bandwidth(1.25e10) == "12.5 GB/s"``."""
    return _format(bandwidth_Bps, _SIZE_SCALES, "/s")


def format_time(time_s: float) -> str:
    """Seconds for people, in ns, us, ms or s: ``format_time(1.5e-6) == "1.5 us"``."""
    return _format(time_s, _TIME_SCALES)


def format_flop_rate(flops_per_s: float) -> str:
    """FLOP/s for people: ``format_flop_rate(3.12e14) == "312 TFLOP/s"``."""
    return _format(flops_per_s, _FLOP_SCALES, "FLOP/s")


def format_flops(flops: float) -> str:
    """A FLOP count for people: ``format_flops(1.2e12) == "1.2 TFLOP"``."""
    return _format(flops, _FLOP_SCALES, "FLOP")


def format_power(power_W: float) -> str:
    """Watts for people: ``format_power(1200) == "1.2 kW"``."""
    return _format(power_W, _POWER_SCALES)
