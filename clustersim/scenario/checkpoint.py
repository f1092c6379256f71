"""The ``checkpoint:`` section: how often the training state is saved, and where to.

``every`` is a number of iterations (``100``, ``"100 iterations"``) or a time (``30min``),
or the mapping ``{iterations: N}`` / ``{time: TIME}``.  ``storage`` is a storage service
attached to the cluster's network (:func:`clustersim.topology.storage.attach_storage`):
writing a checkpoint moves every rank's weights and optimizer states to it as flows that
share the links with everything else.  Without ``storage`` each rank writes to its own
node over PCIe and nothing crosses the network.  ``async`` copies the state to host memory
first (training waits for that copy only) and drains it to storage in the background.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from clustersim import units
from clustersim.errors import Problem

from .fields import Bandwidth, Bool, Count, Glob, Invalid, PositiveTime, TimeSpan, _Spec, _unit

EVERY_FORMS = "a number of iterations (100 or '100 iterations') or a time above 0 (30min)"
"""What ``checkpoint.every`` accepts, for messages."""
_ITERATIONS = re.compile(r"\s*\+?(\d+)\s*(?:iterations?|it)\s*", re.IGNORECASE)


class CheckpointInterval(_Spec):
    """How often a checkpoint is written: every N iterations or every TIME, not both."""

    iterations: Count | None = None
    """Iterations between checkpoints."""
    time_s: PositiveTime | None = Field(None, alias="time")
    """Simulated seconds between checkpoints (the first iteration boundary after each)."""

    @model_validator(mode="after")
    def _one_form(self) -> CheckpointInterval:
        given = (self.iterations is not None) + (self.time_s is not None)
        if given != 1:
            message = "give either iterations or time, not both" if given else "give one of them"
            raise Invalid(Problem("", message, "{iterations: N} or {time: TIME}"))
        return self


def _interval(value: Any) -> Any:
    """``every``'s short forms as the mapping :class:`CheckpointInterval` reads."""
    if isinstance(value, dict) or isinstance(value, CheckpointInterval):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise units.UnitError(f"{value} iterations: must be at least 1", EVERY_FORMS)
        return {"iterations": value}
    if isinstance(value, str):
        match = _ITERATIONS.fullmatch(value)
        if match is not None:
            count = int(match.group(1))
            if count < 1 or count > 2**63:
                raise units.UnitError(f"{value!r}: must be 1 or more iterations", EVERY_FORMS)
            return {"iterations": count}
        seconds = units.require_positive(units.parse_time(value), value, "time")
        return {"time": f"{seconds!r}s"}
    raise units.UnitError(f"{value!r} is neither a number of iterations nor a time", EVERY_FORMS)


Every = Annotated[CheckpointInterval, BeforeValidator(_interval)]
"""``checkpoint.every``: iterations or a time, in a short form or as a mapping."""


class StorageSpec(_Spec):
    """The storage service checkpoints are written to: one device on the network."""

    bandwidth_Bps: Bandwidth = Field(alias="bandwidth")
    """Bandwidth of the storage's attachment to the network (all its cables together)."""
    latency_s: TimeSpan = _unit("5us", "latency")
    """Latency of that attachment."""
    attach: Glob | None = None
    """Switches the storage is cabled to (a pattern over switch names; the bandwidth is split
    evenly over the cables).  Default: the top tier (spines, cores, the single top-of-rack
    switch of a one-rack cluster, the switch of a flat cluster)."""

    @model_validator(mode="before")
    @classmethod
    def _attach_not_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and "attach" in data and data["attach"] is None:
            raise Invalid(Problem("attach", "must be a pattern over switch names", "e.g. spine0"))
        return data


class CheckpointSpec(_Spec):
    """Periodic checkpoints of the training state (weights and optimizer states)."""

    every: Every
    """How often: ``100`` (iterations), ``'100 iterations'``, ``30min``, or ``{iterations: N}``
    / ``{time: TIME}``."""
    storage: StorageSpec | None = None
    """Where to: a storage service on the network (default: each node's own storage, over
    PCIe, no network traffic)."""
    async_: Bool = Field(False, alias="async")
    """Copy to host memory first (training waits for that copy only), then drain to storage in
    the background while training goes on."""
