"""Devices: how long work takes on them, and stragglers that slow them down.

A device has peak FLOP/s, an efficiency factor and a memory bandwidth (see
:class:`clustersim.topology.Device`).  Work is given in one of three ways:

* ``flops``   -- time = flops / (peak FLOP/s x efficiency)
* ``bytes``   -- memory-bound work, time = bytes / memory bandwidth (B/s)
* ``seconds`` -- time given directly

and then multiplied by the device's slowdown factor for that iteration
(:class:`Stragglers`).  Compute streams are FIFO: work submitted to a busy
device starts when the previous work on it ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import Problem, ScenarioError, SimulationError, join_path
from .scenario import LinkStraggler, RandomStraggler, RandomStragglerSpec
from .topology import Device, Topology


def work_seconds(
    device: Device,
    *,
    flops: float | None = None,
    seconds: float | None = None,
    bytes: float | None = None,
) -> float:
    """Duration in seconds of one piece of work on ``device`` (no slowdown).

    Exactly one of ``flops`` (FLOPs), ``seconds`` (s) or ``bytes`` (bytes moved
    through device memory) must be given.
    """
    given = [v is not None for v in (flops, seconds, bytes)]
    if sum(given) != 1:
        raise ScenarioError(
            Problem(
                "",
                "give exactly one of flops, seconds or bytes for a compute",
                "flops | seconds | bytes",
            )
        )
    if seconds is not None:
        return float(seconds)
    if flops is not None:
        return float(flops) / (device.flops_per_s * device.efficiency)
    return float(bytes) / device.memory_bandwidth_Bps  # type: ignore[arg-type]


@dataclass(slots=True)
class ComputeStream:
    """The FIFO compute stream of one device: it is busy until ``free_at_s``."""

    device: Device
    free_at_s: float = 0.0
    """Simulated time (s) at which the last submitted work ends."""


def compute_overflow(
    device: str, label: str, iteration: int, duration: float, flops: float | None
) -> str:
    """The message of a compute whose end time is not finite."""
    work = f"{flops:g} FLOPs" if flops is not None else "its work"
    when = f" in iteration {iteration}" if iteration >= 0 else ""
    return (
        f"compute '{label}' on {device}{when} overflowed: it would take {duration!r} s "
        f"({work}, times the device's slowdown); the inputs are too large or too small"
    )


# ---------------------------------------------------------------------------
# Stragglers


def _draw_lognormal(rng: np.random.Generator, p: dict[str, float]) -> float:
    return float(rng.lognormal(p.get("mu", 0.0), p["sigma"]))


def _draw_exponential(rng: np.random.Generator, p: dict[str, float]) -> float:
    return 1.0 + float(rng.exponential(p["scale"]))


def _draw_uniform(rng: np.random.Generator, p: dict[str, float]) -> float:
    return float(rng.uniform(p["low"], p["high"]))


SLOWDOWN_DISTRIBUTIONS = {
    "lognormal": _draw_lognormal,
    "exponential": _draw_exponential,
    "uniform": _draw_uniform,
}
"""Distributions of random slowdown factors, by name.

* ``lognormal``: factor = exp(N(mu, sigma)), mu = 0 by default (median 1)
* ``exponential``: factor = 1 + Exp(scale) (mean 1 + scale)
* ``uniform``: factor = U(low, high)
"""


@dataclass(slots=True)
class _RandomSlowdown:
    index: int
    devices: frozenset[str]
    fraction: float
    dist: str
    params: dict[str, float]


@dataclass(slots=True)
class LinkDegradation:
    """A link whose bandwidth is multiplied by ``factor`` in [start_s, end_s)."""

    link_index: int
    factor: float
    start_s: float
    end_s: float


@dataclass
class Stragglers:
    """Slowdown factors of devices and degradations of links, from the scenario.

    Fixed slowdowns multiply; a random slowdown is drawn per (device,
    iteration) from a generator seeded by (seed, straggler entry, device index,
    iteration), so draws do not depend on the order devices ask for them.
    """

    fixed: dict[str, float] = field(default_factory=dict)
    random: list[_RandomSlowdown] = field(default_factory=list)
    links: list[LinkDegradation] = field(default_factory=list)
    seed: int = 0
    _cache: dict[tuple[str, int], float] = field(default_factory=dict)

    @classmethod
    def from_specs(cls, specs: Sequence[object], topology: Topology, seed: int) -> Stragglers:
        """Resolve the scenario's ``stragglers:`` entries against ``topology``."""
        out = cls(seed=seed)
        for i, spec in enumerate(specs):
            path = join_path("stragglers", i)
            if isinstance(spec, RandomStraggler):
                out._add_random(i, spec.random, topology, path)
            elif isinstance(spec, LinkStraggler):
                out._add_links(spec, topology, path)
            else:
                for dev in topology.select(spec.devices, join_path(path, "devices")):
                    factor = out.fixed.get(dev.name, 1.0) * spec.slowdown
                    if not 0.0 < factor < math.inf:
                        raise ScenarioError(
                            Problem(
                                join_path(path, "slowdown"),
                                f"the slowdowns of {dev.name} multiply to {factor!r}",
                                "stragglers whose product stays finite and above 0",
                            )
                        )
                    out.fixed[dev.name] = factor
        return out

    def _add_random(
        self, index: int, spec: RandomStragglerSpec, topology: Topology, path: str
    ) -> None:
        devices = frozenset(
            d.name for d in topology.select(spec.devices, join_path(path, "random.devices"))
        )
        dist = spec.slowdown
        params = {
            k: float(v) for k, v in dist.model_dump(exclude={"dist"}).items() if v is not None
        }
        self.random.append(_RandomSlowdown(index, devices, spec.fraction, dist.dist, params))

    def _add_links(self, spec: LinkStraggler, topology: Topology, path: str) -> None:
        if spec.end_s <= spec.start_s:
            raise ScenarioError(
                Problem(join_path(path, "end"), "must be later than start", "a time after start")
            )
        for link in topology.select_links(spec.links, join_path(path, "links")):
            self.links.append(
                LinkDegradation(link.index, spec.bandwidth_factor, spec.start_s, spec.end_s)
            )

    def factor(self, device: Device, iteration: int) -> float:
        """Slowdown factor (finite and above 0, 1 = nominal) of ``device`` in ``iteration``."""
        base = self.fixed.get(device.name, 1.0)
        if not self.random:
            return base
        key = (device.name, iteration)
        cached = self._cache.get(key)
        if cached is None:
            cached = base * self._random_factor(device, iteration)
            if not cached < math.inf:
                raise SimulationError(
                    f"straggler slowdown of {device.name} in iteration {iteration} "
                    f"overflowed ({cached!r}: the fixed slowdown {base:g} times the drawn ones)"
                )
            self._cache[key] = cached
        return cached

    def _random_factor(self, device: Device, iteration: int) -> float:
        factor = 1.0
        for entry in self.random:
            if device.name not in entry.devices:
                continue
            rng = np.random.default_rng([self.seed, entry.index, device.index, max(iteration, 0)])
            if entry.fraction < 1.0 and rng.random() >= entry.fraction:
                continue
            drawn = SLOWDOWN_DISTRIBUTIONS[entry.dist](rng, entry.params)
            factor *= drawn
            if not 0.0 < factor < math.inf:
                raise SimulationError(
                    f"straggler slowdown of {device.name} in iteration {iteration} "
                    f"(stragglers[{entry.index}], {entry.dist}) overflowed ({factor!r}); "
                    "a slowdown must be finite and above 0"
                )
        return factor


def stragglers_of(scenario: Any, topology: Topology) -> Stragglers:
    """The stragglers of ``scenario`` resolved against ``topology``; a glob that matches
    nothing is a ScenarioError naming the scenario's file and the key path."""
    try:
        return Stragglers.from_specs(scenario.stragglers, topology, scenario.seed)
    except ScenarioError as exc:
        raise exc.with_source(exc.source or scenario.source) from None
