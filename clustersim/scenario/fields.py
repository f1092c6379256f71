"""Field types shared by every scenario section, and the base of every section model.

Quantities written with a unit (:data:`Size`, :data:`Bandwidth`, :data:`TimeSpan`,
:data:`FlopRate`, :data:`FlopCount`, :data:`Power`) are parsed to SI by :mod:`clustersim.units`,
which refuses negative, NaN and infinite values; a bandwidth and a FLOP rate must
also be above 0 (zero would never deliver a byte or finish a computation);
numbers are strict (``true`` and ``"2"`` are refused); :func:`_tagged` makes the
discriminators of tagged unions, whose errors
:func:`~clustersim.scenario.validation.validate_model` words itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    WithJsonSchema,
)

from clustersim import units
from clustersim.errors import Problem


def _quantity(parse: Callable[[object], float], key: str, positive: bool = False) -> Any:
    """A float field written with a unit in YAML, parsed to SI by ``parse``.

    Negative, NaN and infinite values are refused by the parser; ``positive`` also
    refuses zero (for quantities where zero means nothing usable).
    """
    q = units.QUANTITIES[key]
    if q.bare_numbers:
        number: dict[str, Any] = {"type": "number", "minimum": 0}
        if positive:
            number = {"type": "number", "exclusiveMinimum": 0}
        choices = [{"type": "string", "pattern": units.unit_pattern(key)}, number]
    elif positive:
        choices = [{"type": "string", "pattern": units.unit_pattern(key)}]
    else:
        choices = [{"type": "string", "pattern": units.unit_pattern(key)}, {"enum": [0, "0"]}]
    above = " above 0" if positive else ""
    schema = {
        "anyOf": choices,
        "description": f"{q.name[2:]}{above} with a unit ({q.allowed})",
        "examples": list(q.examples),
    }
    if positive:
        read = parse

        def parse(value: object) -> float:
            return units.require_positive(read(value), value, key)

    return Annotated[float, BeforeValidator(parse), WithJsonSchema(schema)]


Size = _quantity(units.parse_size, "size")
"""Bytes (0 or more), written ``160MB``, ``1GiB``, ``8Gb``."""
PositiveSize = _quantity(units.parse_size, "size", positive=True)
"""Bytes, more than 0 (a pipelining chunk)."""


def _memory_bytes(value: object) -> float:
    """Bytes above 0: a size with a unit (``8GB``, ``512MiB``) or a plain number of bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return float(value)
        q = units.QUANTITIES["size"]
        raise units.UnitError(f"must be a size above 0, got {value!r}", q.allowed)
    return units.require_positive(units.parse_size(value), value, "size")


MemoryBytes = Annotated[
    float,
    BeforeValidator(_memory_bytes),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": units.unit_pattern("size")},
                {"type": "number", "exclusiveMinimum": 0},
            ],
            "description": "bytes of memory above 0: a size with a unit or a plain number",
            "examples": ["8GB", "512MiB", 8000000000],
        }
    ),
]
"""Bytes of memory, more than 0, written ``8GB``, ``512MiB`` or as a plain number of bytes
(``engine.max_memory``)."""
Bandwidth = _quantity(units.parse_bandwidth, "bandwidth", positive=True)
"""Bytes per second, more than 0, written ``100Gb/s``, ``12.5GB/s``."""
TimeSpan = _quantity(units.parse_time, "time")
"""Seconds (0 or more), written ``1us``, ``1.5ms``, ``2s``."""
PositiveTime = _quantity(units.parse_time, "time", positive=True)
"""Seconds, more than 0, written ``10min``, ``6h``, ``30d``."""
FlopRate = _quantity(units.parse_flop_rate, "flop_rate", positive=True)
"""FLOP/s, more than 0, written ``312TFLOPS``."""
FlopCount = _quantity(units.parse_flops, "flops")
"""FLOPs (0 or more), written ``1.2TFLOP`` or as a plain number."""
Power = _quantity(units.parse_power, "power", positive=True)
"""Watts, more than 0, written ``700W``, ``1.2kW``."""

_COUNT_SUFFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
MAX_LARGE_COUNT = 1e24
"""Largest :data:`LargeCount` (a count of tokens or samples of a whole training run)."""


def parse_large_count(value: object) -> float:
    """A count written as a number or with a suffix k, M, G, T, P (``2T`` -> 2e12), above 0."""
    allowed = f"a number above 0 or with a suffix k, M, G, T, P (e.g. 2T, 300G), at most {MAX_LARGE_COUNT:g}"
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value) if abs(value) < 1e300 else math.inf
    elif isinstance(value, str):
        text = value.strip()
        scale = _COUNT_SUFFIXES.get(text[-1:], 1.0) if text else 1.0
        if scale != 1.0:
            text = text[:-1].strip()
        try:
            number = float(text) * scale
        except ValueError:
            number = None
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            number = math.nan
    if number is None:
        raise units.UnitError(f"{value!r} is not a count such as 2T or 5e9", allowed)
    if not (0 < number <= MAX_LARGE_COUNT):
        raise units.UnitError(f"{value!r} is out of range", allowed)
    return number


LargeCount = Annotated[
    float,
    BeforeValidator(parse_large_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {
                    "type": "string",
                    "pattern": r"^\s*\+?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*[kKMGTP]?\s*$",
                },
            ],
            "description": "a count above 0, plain or with a suffix k, M, G, T, P",
            "examples": ["2T", "5e9"],
        }
    ),
]
"""A large count (tokens of a run), above 0, written ``2T``, ``300G`` or ``5e9``."""

Int = Annotated[int, Strict()]
"""A whole number (``true`` and ``2.0`` are refused)."""
Count = Annotated[int, Strict(), Field(ge=1)]
"""A whole number, at least 1."""
Float = Annotated[float, Strict(), AllowInfNan(False)]
"""A finite number (whole numbers accepted; ``true`` and ``"2"`` refused)."""
Bool = Annotated[bool, Strict()]
"""``true`` or ``false``."""
MAX_SEED = 2**32 - 1
"""Largest seed (seeds run from 0 to 2**32 - 1, the range every NumPy generator takes)."""
Seed = Annotated[int, Strict(), Field(ge=0, le=MAX_SEED)]
"""A random seed, 0 .. 2**32 - 1."""
GpuIndex = Annotated[int, Strict(), Field(ge=0)]
"""Index of a GPU inside its node, from 0."""
Glob = Annotated[str, Field(min_length=1)]
"""A shell-style pattern over names, e.g. ``rack0/node1/*``."""


def _unit(default: str, alias: str) -> Any:
    """A unit-bearing field whose default is written like the YAML (and parsed like it)."""
    return Field(default, alias=alias, validate_default=True)


class Invalid(ValueError):
    """Raise inside a model validator to report problems below the model.

    Each problem's path is relative to the model being validated (``"nvlink.pairs[2]"``);
    :func:`validate_model` puts the model's own path in front.
    """

    def __init__(self, problems: Problem | Sequence[Problem]) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        """The problems found."""
        super().__init__("; ".join(p.render() for p in self.problems))


class _Spec(BaseModel):
    """Base of every scenario model: unknown keys are errors, instances are immutable.  The
    docstring under a field describes its key in the JSON Schema and the reference pages,
    read when a schema is made (:mod:`clustersim.scenario.docstrings`), not at import."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- tagged unions


TAG_ERROR = "clustersim_tag"
"""Error type of the discriminators below; :func:`validate_model` explains it."""


def _tag_of(key: str, default: str | None = None) -> Callable[[Any], str | None]:
    """Discriminator function: the string under ``key`` of a mapping (or its attribute)."""

    def tag(data: Any) -> str | None:
        value = data.get(key, default) if isinstance(data, dict) else getattr(data, key, None)
        return value if isinstance(value, str) else None

    return tag


def _tagged(
    key: str,
    choices: Sequence[str],
    default: str | None = None,
    tag: Callable[[Any], str | None] | None = None,
) -> Discriminator:
    """A discriminator on ``key`` whose errors :func:`validate_model` words itself (``tag``:
    the function choosing the member, by default the value under ``key``)."""
    return Discriminator(
        tag or _tag_of(key, default),
        custom_error_type=TAG_ERROR,
        custom_error_message=f"unknown {key}",
        custom_error_context={"key": key, "choices": ", ".join(choices)},
    )
