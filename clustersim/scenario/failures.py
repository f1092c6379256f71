"""The ``failures:`` and ``recovery:`` sections: what fails, when, and how training recovers.

A failure has one of three forms, told apart by its keys (:data:`FailureSpec`):

* a scheduled device failure ``{devices: GLOB, at: TIME, repair: TIME}``: every component
  whose name matches (GPUs, CPUs, nodes, NICs, PCIe and NVSwitches, switches) fails at
  ``at`` and comes back ``repair`` later (default: never);
* a scheduled link failure ``{links: GLOB, at: TIME, repair: TIME}`` over link names
  ``src->dst``;
* a random failure process ``{devices: GLOB, mtbf: TIME, distribution: exponential |
  weibull, shape: K, seed: N, repair: TIME}``: each matching component fails independently,
  with times between failures of mean ``mtbf``.

Nothing here knows the cluster: the globs are resolved against the built topology by
:func:`clustersim.topology.failures.resolve_failures`, whose errors name the key path.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_validator,
)

from clustersim.errors import Problem

from .fields import (
    TAG_ERROR,
    Bool,
    Float,
    Glob,
    Invalid,
    PositiveTime,
    Seed,
    TimeSpan,
    _Spec,
    _unit,
)

MAX_SAMPLES = 100_000
"""Most failure histories ``recovery.samples`` may ask the goodput Monte Carlo for."""

MIN_WEIBULL_SHAPE = 0.05
"""Smallest Weibull shape ``k`` (below it, the mean is over 10**20 times the scale)."""
MAX_WEIBULL_SHAPE = 50.0
"""Largest Weibull shape ``k`` (failures then come almost exactly every mtbf)."""


class ScheduledDeviceFailure(_Spec):
    """Components (devices, nodes, NICs, switches) that fail at a given time."""

    devices: Glob
    """Which components: a pattern over device, node and switch names (``rack0/node1``,
    ``rack0/node1/gpu3``, ``rack0/node1/nic``, ``rack0/tor``, ``spine0``)."""
    at_s: TimeSpan = Field(alias="at")
    """When they fail, seconds of simulated time from the start of training."""
    repair_s: PositiveTime = Field(math.inf, alias="repair")
    """How long they stay down, seconds above 0 (default: never repaired)."""


class ScheduledLinkFailure(_Spec):
    """Links that fail at a given time."""

    links: Glob
    """Which links: a pattern over link names ``src->dst`` (both directions of a cable are two
    links: ``rack0/tor->spine0`` and ``spine0->rack0/tor``)."""
    at_s: TimeSpan = Field(alias="at")
    """When they fail, seconds of simulated time from the start of training."""
    repair_s: PositiveTime = Field(math.inf, alias="repair")
    """How long they stay down, seconds above 0 (default: never repaired)."""


class RandomFailure(_Spec):
    """Components that fail at random, each independently, with a mean time between failures."""

    devices: Glob
    """Which components: a pattern over device, node and switch names."""
    mtbf_s: PositiveTime = Field(alias="mtbf")
    """Mean time between failures of one component, seconds above 0 (e.g. ``50000h``, ``30d``)."""
    distribution: Literal["exponential", "weibull"] = "exponential"
    """Distribution of the times between failures: exponential (memoryless) or Weibull
    (``shape`` below 1: infant mortality, above 1: wear-out), scaled to mean ``mtbf``."""
    shape: Float | None = Field(None, ge=MIN_WEIBULL_SHAPE, le=MAX_WEIBULL_SHAPE)
    """Weibull shape k, 0.05 .. 50 (weibull only, required there)."""
    seed: Seed | None = None
    """Seed of this process's draws, 0 .. 2**32 - 1 (default: from the scenario's seed and the
    entry's position)."""
    repair_s: TimeSpan = _unit("0", "repair")
    """How long a failed component stays down, seconds (default 0: swapped for a spare at
    once; the job still restarts)."""

    @field_validator("shape", "seed", mode="before")
    @classmethod
    def _no_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("must be a number (leave the key out for the default)")
        return value

    @model_validator(mode="after")
    def _shape_for_weibull(self) -> RandomFailure:
        if self.distribution == "weibull" and self.shape is None:
            raise Invalid(
                Problem("shape", "a weibull distribution needs its shape k", "a number 0.05 .. 50")
            )
        if self.distribution == "exponential" and self.shape is not None:
            raise Invalid(
                Problem("shape", "only a weibull distribution has a shape", "distribution: weibull")
            )
        return self


FAILURE_FORMS = (
    "{devices: GLOB, at: TIME, repair: TIME} | {links: GLOB, at: TIME, repair: TIME} "
    "| {devices: GLOB, mtbf: TIME, distribution: exponential | weibull, shape: K, seed: N}"
)
"""The three failure forms, for messages."""

_FAILURE_TAGS: dict[type[BaseModel], str] = {
    ScheduledDeviceFailure: "scheduled device failure",
    ScheduledLinkFailure: "scheduled link failure",
    RandomFailure: "random failure",
}
"""Internal union tags of the failure forms (never a YAML key, so never in a path)."""


def _failure_form(data: Any) -> str | None:
    """Which failure form ``data`` is, told by its keys."""
    if isinstance(data, BaseModel):
        return _FAILURE_TAGS.get(type(data))
    if not isinstance(data, dict):
        return None
    if "mtbf" in data or "distribution" in data or "shape" in data:
        return _FAILURE_TAGS[RandomFailure]
    if "links" in data:
        return _FAILURE_TAGS[ScheduledLinkFailure]
    if "devices" in data or "at" in data:
        return _FAILURE_TAGS[ScheduledDeviceFailure]
    return None


FailureSpec = Annotated[
    Annotated[ScheduledDeviceFailure, Tag(_FAILURE_TAGS[ScheduledDeviceFailure])]
    | Annotated[ScheduledLinkFailure, Tag(_FAILURE_TAGS[ScheduledLinkFailure])]
    | Annotated[RandomFailure, Tag(_FAILURE_TAGS[RandomFailure])],
    Discriminator(
        _failure_form,
        custom_error_type=TAG_ERROR,
        custom_error_message="matches none of the three failure forms",
        custom_error_context={"allowed": FAILURE_FORMS},
    ),
]
"""A failure of one of three forms: scheduled device, scheduled link or random."""


class RecoverySpec(_Spec):
    """How a training job recovers from a failure that stops it."""

    restart_time_s: TimeSpan = _unit("10min", "restart_time")
    """Time from the failure until training runs again from the last checkpoint (detect,
    reschedule, reload): seconds, default 10 minutes."""
    elastic: Bool = False
    """Continue without the failed workers where the strategy allows it (data parallel, a
    parameter server in backup mode) instead of restarting from the checkpoint."""
    samples: Annotated[int, Strict(), Field(ge=1, le=MAX_SAMPLES)] = 1000
    """Failure histories the goodput Monte Carlo samples (1 .. 100,000): its standard
    error falls as 1 / sqrt(samples)."""
