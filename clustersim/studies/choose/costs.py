"""What a cluster costs to train on: GPU-hours, their price, the energy and its price.

One small function per concept, each with its units:

* :func:`gpu_types` -- a cluster's GPUs counted by type: a device's ``type`` when the
  topology gives one (mixed clusters), else the GPU preset its cluster section names;
* :func:`per_type_total` -- a per-GPU quantity (a price, a power), one number for every GPU
  or a mapping from type to number, summed over the cluster's GPUs: currency per hour for
  the whole cluster, or watts;
* :func:`cluster_bill` -- from a configuration's iteration time and throughput: tokens/s,
  time to train, GPU-hours (the training summaries' formulas,
  :func:`clustersim.metrics.usage.usage_summary`), cost, energy (kWh) and its cost.

Time to train is the job without failures: ``ceil(tokens / (global_batch x sequence
length))`` iterations (:func:`clustersim.resilience.iterations_for`) of the simulated
iteration time, as ``clustersim run`` reports ``time_to_train_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import Problem, ScenarioError
from ...metrics.usage import usage_summary
from ...resilience import iterations_for

UNTYPED = "untyped"
"""How a GPU without a type (no preset, no ``type``) is named in ``gpu_types``."""

PerType = float | Mapping[str, float]
"""One number for every GPU, or a mapping from GPU type to its number."""


def device_type(device: Any, fallback: Callable[[Any], str | None]) -> str | None:
    """The GPU type of a topology device: its ``type`` if it has one, else ``fallback(device)``
    (the preset of its cluster section, :func:`spec_type`)."""
    return getattr(device, "type", None) or fallback(device)


def spec_type(cluster: Any) -> Callable[[Any], str | None]:
    """The GPU type a cluster section gives a device: the ``preset`` of its entry in a custom
    cluster's ``devices``, else of its node's ``gpu`` (or of a flat cluster's ``device``)."""
    listed = getattr(cluster, "devices", None)
    if isinstance(listed, list):
        by_name = {d.name: d.preset for d in listed}
        return lambda device: by_name.get(device.name)
    node = getattr(cluster, "node", None)
    spec = getattr(node, "gpu", None) if node is not None else getattr(cluster, "device", None)
    preset = getattr(spec, "preset", None)
    return lambda device: preset


def gpu_types(
    devices: Iterable[Any], fallback: Callable[[Any], str | None]
) -> dict[str | None, int]:
    """GPUs (devices of kind ``gpu``) counted by type (None: no type), sorted by type name."""
    counts: dict[str | None, int] = {}
    for device in devices:
        if device.kind == "gpu":
            kind = device_type(device, fallback)
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (item[0] is None, item[0] or "")))


def types_text(counts: Mapping[str | None, int]) -> str:
    """``a100-sxm4-80gb:256;h100-sxm5-80gb:128``: the GPU types and their counts."""
    return ";".join(f"{kind or UNTYPED}:{n}" for kind, n in counts.items())


def per_type_total(value: PerType, counts: Mapping[str | None, int], path: str) -> float:
    """``value`` summed over the GPUs of ``counts``: number x GPUs, or for a mapping each
    type's number x its GPUs.  A ScenarioError at ``path`` when the mapping misses a type of
    the cluster (or the cluster has GPUs without a type)."""
    if not isinstance(value, Mapping):
        return float(value) * sum(counts.values())
    total = 0.0
    for kind, n in counts.items():
        if kind is None:
            raise ScenarioError(
                Problem(
                    path,
                    f"{n} GPU(s) of the cluster have no type (no preset): a mapping by GPU "
                    "type cannot price them",
                    "one number for every GPU, or presets on the cluster's GPUs",
                )
            )
        if kind not in value:
            given = ", ".join(value) or "none"
            raise ScenarioError(
                Problem(
                    path,
                    f"no entry for GPU type {kind!r} ({n} GPU(s) of the cluster; given: {given})",
                    "a mapping naming every GPU type of the cluster, or one number",
                )
            )
        total += float(value[kind]) * n
    return total


def energy_kwh(watts: float, seconds: float) -> float:
    """Energy of ``watts`` drawn for ``seconds``, in kWh."""
    return watts * seconds / 3600.0 / 1000.0


@dataclass(frozen=True)
class Bill:
    """What training on one cluster takes and costs (currency: the prices')."""

    tokens_per_s: float
    """Tokens trained per second: samples/s x sequence length."""
    time_to_train_s: float
    """Seconds to train the tokens, without failures."""
    gpu_hours: float
    """GPUs x time to train, in hours."""
    cost: float
    """Price of the GPU-hours."""
    energy_kwh: float | None = None
    """Energy the GPUs draw meanwhile (None: no ``gpu_power``)."""
    energy_cost: float | None = None
    """Price of that energy (None: no ``energy_price``)."""

    @property
    def total_cost(self) -> float:
        """The GPU-hours' price and the energy's."""
        return self.cost + (self.energy_cost or 0.0)


def cluster_bill(
    *,
    iteration_time_s: float,
    samples_per_s: float,
    seq: int,
    tokens: float,
    tokens_per_iteration: float,
    gpus: int,
    hourly_price: float,
    watts: float | None = None,
    energy_price: float | None = None,
) -> Bill:
    """The :class:`Bill` of training ``tokens`` on a cluster of ``gpus`` GPUs whose whole
    price is ``hourly_price`` per hour (:func:`per_type_total` of the GPU-hour price) and
    whose GPUs draw ``watts`` together, at a configuration of ``iteration_time_s`` seconds
    per iteration and ``samples_per_s``."""
    usage = usage_summary(
        model_tflops_per_gpu=None,
        peak_flops_per_gpu=None,
        samples_per_s=samples_per_s,
        seq=seq,
        job_iterations=iterations_for(tokens, tokens_per_iteration),
        duration_s=None,
        iteration_time_s=iteration_time_s,
        gpus=gpus,
        gpu_hour_price=None,
    )
    assert usage is not None and usage.time_to_train_s is not None
    assert usage.tokens_per_s is not None and usage.gpu_hours is not None
    seconds = usage.time_to_train_s
    kwh = energy_kwh(watts, seconds) if watts is not None else None
    return Bill(
        tokens_per_s=usage.tokens_per_s,
        time_to_train_s=seconds,
        gpu_hours=usage.gpu_hours,
        cost=hourly_price * seconds / 3600.0,
        energy_kwh=kwh,
        energy_cost=kwh * energy_price if kwh is not None and energy_price is not None else None,
    )
