"""The ``stragglers:`` section: slow devices (fixed or random slowdowns) and degraded links.

A straggler has one of three forms, told apart by its keys (:data:`StragglerSpec`).

Every factor is bounded so that the times it multiplies stay finite: a fixed
slowdown, the bounds of a uniform one and a link's bandwidth factor lie in
[:data:`MIN_FACTOR`, :data:`MAX_FACTOR`] (a link's factor may also be 0: the link is
down for the window, see :mod:`clustersim.network.failures`); a lognormal's ``sigma`` is at most
:data:`MAX_SIGMA` and its ``mu`` within +-:data:`MAX_MU`; an exponential's ``scale``
is at most :data:`MAX_SCALE`.  (NumPy's normal draws stay within +-14 and its
exponential ones below 45, so every drawn factor is finite and above 0: a lognormal
one between about 3e-20 and 3e19; the engine still checks each draw.)
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, model_validator

from clustersim.errors import Problem

from .fields import TAG_ERROR, Float, Glob, Invalid, TimeSpan, _Spec, _tagged, _unit

MIN_FACTOR = 1e-6
"""Smallest slowdown or bandwidth factor (a device a million times faster)."""
MAX_FACTOR = 1e6
"""Largest slowdown or bandwidth factor (a device a million times slower)."""
MAX_SIGMA = 3.0
"""Largest ``sigma`` of a lognormal slowdown (exp(3 sigma) is already 8103)."""
MAX_MU = 3.0
"""Largest ``|mu|`` of a lognormal slowdown (median factor from exp(-3) to exp(3))."""
MAX_SCALE = 1e3
"""Largest ``scale`` of an exponential slowdown (mean factor 1 + scale)."""


def _factor(default: Any = ...) -> Any:
    """A slowdown or bandwidth factor field, from :data:`MIN_FACTOR` to :data:`MAX_FACTOR`."""
    return Field(default, ge=MIN_FACTOR, le=MAX_FACTOR)


class LognormalSlowdown(_Spec):
    """Slowdown factor exp(N(mu, sigma))."""

    dist: Literal["lognormal"]
    """The distribution."""
    sigma: Float = Field(ge=0, le=MAX_SIGMA)
    """Standard deviation of the underlying normal, 0 .. 3."""
    mu: Float = Field(0.0, ge=-MAX_MU, le=MAX_MU)
    """Mean of the underlying normal, -3 .. 3 (0: median factor 1)."""


class ExponentialSlowdown(_Spec):
    """Slowdown drawn from an exponential distribution."""

    dist: Literal["exponential"]
    """The distribution."""
    scale: Float = Field(gt=0, le=MAX_SCALE)
    """Mean of the exponential added to 1, above 0 and at most 1000."""


class UniformSlowdown(_Spec):
    """Slowdown factor uniform in [low, high]."""

    dist: Literal["uniform"]
    """The distribution."""
    low: Float = _factor()
    """Smallest factor, 1e-6 .. 1e6."""
    high: Float = _factor()
    """Largest factor (at least ``low``), 1e-6 .. 1e6."""

    @model_validator(mode="after")
    def _ordered(self) -> UniformSlowdown:
        if self.high < self.low:
            raise Invalid(
                Problem("high", f"must be at least low ({self.low:g}), got {self.high:g}")
            )
        return self


SLOWDOWN_DISTS = ("lognormal", "exponential", "uniform")
"""Every value of ``slowdown.dist``."""

SlowdownDist = Annotated[
    Annotated[LognormalSlowdown, Tag("lognormal")]
    | Annotated[ExponentialSlowdown, Tag("exponential")]
    | Annotated[UniformSlowdown, Tag("uniform")],
    _tagged("dist", SLOWDOWN_DISTS),
]
"""A random slowdown distribution; ``dist`` chooses."""


class FixedStraggler(_Spec):
    """Devices that are always slower by a fixed factor."""

    devices: Glob
    """Which devices (pattern over device names)."""
    slowdown: Float = _factor()
    """Compute time multiplier (2 = twice as slow), 1e-6 .. 1e6."""


class RandomStragglerSpec(_Spec):
    """Per-iteration random slowdowns drawn from a seeded distribution."""

    devices: Glob = "*"
    """Which devices may straggle."""
    fraction: Float = Field(1.0, gt=0, le=1)
    """Fraction of those devices that straggle in each iteration."""
    slowdown: SlowdownDist
    """Distribution of the slowdown factor."""


class RandomStraggler(_Spec):
    """Random stragglers: ``{random: {...}}``."""

    random: RandomStragglerSpec
    """The random slowdown."""


class LinkStraggler(_Spec):
    """Links whose bandwidth is scaled during a time window."""

    links: Glob
    """Which links (pattern over link names ``src->dst``)."""
    bandwidth_factor: Float = Field(ge=0, le=MAX_FACTOR)
    """Bandwidth multiplier during the window (0.5 = half speed), 1e-6 .. 1e6; 0: the link is
    down (its flows move to another equal-cost route, or stall until the window ends)."""
    start_s: TimeSpan = _unit("0", "start")
    """Window start, seconds of simulated time."""
    end_s: TimeSpan = Field(math.inf, alias="end")
    """Window end, seconds of simulated time (default: never)."""

    @model_validator(mode="after")
    def _ordered(self) -> LinkStraggler:
        factor = self.bandwidth_factor
        if 0.0 < factor < MIN_FACTOR:
            raise Invalid(
                Problem(
                    "bandwidth_factor",
                    f"must be 0 (the link is down) or at least {MIN_FACTOR:g}, got {factor:g}",
                    f"0, or {MIN_FACTOR:g} .. {MAX_FACTOR:g}",
                )
            )
        if self.end_s <= self.start_s:
            raise Invalid(Problem("end", "must be later than start"))
        return self


STRAGGLER_FORMS = (
    "{devices: GLOB, slowdown: FACTOR} | {random: {devices, fraction, slowdown: {dist, ...}}} "
    "| {links: GLOB, bandwidth_factor: 0 | FACTOR, start: TIME, end: TIME}"
)
"""The three straggler forms, for messages."""


_STRAGGLER_TAGS: dict[type[BaseModel], str] = {
    FixedStraggler: "fixed straggler",
    RandomStraggler: "random straggler",
    LinkStraggler: "link straggler",
}
"""Internal union tags of the straggler forms (never a YAML key, so never in a path)."""


def _straggler_form(data: Any) -> str | None:
    """Which straggler form ``data`` is, told by its keys."""
    if isinstance(data, BaseModel):
        return _STRAGGLER_TAGS.get(type(data))
    if not isinstance(data, dict):
        return None
    if "random" in data:
        return _STRAGGLER_TAGS[RandomStraggler]
    if "links" in data or "bandwidth_factor" in data:
        return _STRAGGLER_TAGS[LinkStraggler]
    if "devices" in data or "slowdown" in data:
        return _STRAGGLER_TAGS[FixedStraggler]
    return None


StragglerSpec = Annotated[
    Annotated[FixedStraggler, Tag(_STRAGGLER_TAGS[FixedStraggler])]
    | Annotated[RandomStraggler, Tag(_STRAGGLER_TAGS[RandomStraggler])]
    | Annotated[LinkStraggler, Tag(_STRAGGLER_TAGS[LinkStraggler])],
    Discriminator(
        _straggler_form,
        custom_error_type=TAG_ERROR,
        custom_error_message="matches none of the three straggler forms",
        custom_error_context={"allowed": STRAGGLER_FORMS},
    ),
]
"""A straggler of one of three forms: fixed, random or link."""
