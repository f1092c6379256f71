"""``pipeline.stages: balanced``: the hybrid's layers split over its stages by the speed and
memory of each stage's devices (a mixed cluster's A100 and H100 stages).

* **Units.** A transformer is split between blocks (attention + MLP, or + MoE), as
  Megatron-LM splits it: the embedding goes with the first block, the final norm and head
  with the last.  Any other model is split between layers.
* **Time.** A virtual stage's time is the compute of one micro-batch through it: forward
  plus backward with the recomputation chosen, on one GPU of its tensor (and context)
  group, priced exactly as the run prices it -- each layer's kernels under the device's
  compute model (:class:`~clustersim.strategies.hybrid.compute_time.StageTimes`), or its
  FLOPs at the device's peak x efficiency where the run prices FLOPs (flat compute, not a
  transformer, fractional micro-batches), plus a mixture of experts' busiest-GPU FLOPs,
  plus the time the stage holds its tensor group for the tensor-parallel collectives
  (alpha-beta on the group's links; with ``tp_comm_overlap`` what the products leave
  exposed).  The pipeline transfers, the data-parallel sync, expert all-to-alls and
  context-parallel rings are not in it.
* **Pace-setter.** Stage ``s`` runs on ``dp`` replicas' groups, which a mixed cluster may
  put on several GPU types; they run in lock step (the gradient sync waits for the last),
  so the stage's time is that of its slowest device: the *pace-setter* the summary names.
* **Memory.** A run of layers fits a stage when the hybrid's memory plan
  (:meth:`~clustersim.strategies.hybrid.strategy.Pipeline.memory_plan`: model states with
  ZeRO, the activations the schedule keeps in flight at its peak, the recompute working set,
  the buffers, ``training.memory``'s fragmentation) of that stage holding them is within the
  smallest memory of its devices.  With ``chunks`` > 1 a virtual stage fits when its device
  would hold ``chunks`` stages like it.  If no split fits, the time-optimal split is taken
  and the run's memory check reports the devices over capacity.
* **Split.** :func:`~clustersim.parallel.stages.minimax_split`: the slowest stage as fast as
  it can be, then the least total time, then the most even stages.

Units: seconds, bytes.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...model.memory import DeviceMemory
from ...parallel.stages import minimax_split, split_seconds
from ...topology import Device
from . import tp_overlap
from .compute_time import StageTimes, run_casts, scenario_folder
from .stages import layer_backward_flops, plan_range


@dataclass(frozen=True)
class StageBalance:
    """The balanced split and what it was chosen by."""

    counts: list[int]
    """Layers per virtual stage, input first."""
    seconds: list[float]
    """Per virtual stage: compute seconds of one micro-batch (forward + backward) on its
    pace-setter."""
    pace_devices: list[str]
    """Per virtual stage: the device setting its pace (the first of the slowest kind)."""
    even_seconds: list[float] | None
    """The same seconds for the even split (None when the model has no even split)."""
    memory_bound: bool
    """Memory moved layers away from the time-optimal split."""
    fits: bool
    """A split fitting every stage's memory exists (else the time-optimal one is taken)."""


def units_of(model: Any) -> list[int]:
    """Layers per unit, input first: a transformer's blocks, each from its attention layer to
    the next (the layers before the first block go with it, those after the last with it),
    else one layer each."""
    kinds = [layer.kind for layer in model.layers]
    starts = [i for i, kind in enumerate(kinds) if kind == "attention"]
    if model.transformer is None or not starts:
        return [1] * len(kinds)
    edges = [0, *starts[1:], len(kinds)]
    return [b - a for a, b in zip(edges, edges[1:])]


class StageCosts:
    """Time and memory of any run of layers on each virtual stage of a checked hybrid
    layout (the module docstring says how)."""

    def __init__(self, layout: Any) -> None:
        self.layout = layout
        schedule = layout.schedule
        self.stage_of = [schedule.device_of(k)[0] for k in range(schedule.virtual_stages)]
        devices = layout.topology.devices
        self.capacity = [
            min(devices[x].memory_bytes for d in range(layout.dp) for x in layout.groups[d][s])
            for s in range(layout.pp)
        ]
        times = StageTimes(
            layout.model,
            [(i, 1) for i in range(len(layout.model.layers))],
            layout.tp,
            layout.recompute,
            scenario_folder(layout.scenario.source or ""),
            fp8=run_casts(layout),
            ep=layout.parallelism.ep,
        )
        compute: dict[int, list[float]] = {}  # per compute model: each layer's seconds
        self.kinds: list[list[tuple[Device, list[float]]]] = []
        """Per device stage: (first device, prefix sums of its layers' seconds) per kind of
        device it runs on (one compute model), in replica order."""
        for s in range(layout.pp):
            found: dict[int, tuple[Device, list[float]]] = {}
            for d in range(layout.dp):
                for device in (devices[x] for x in layout.groups[d][s]):
                    key = id(times.device_model(device))
                    if key in found:
                        continue
                    if key not in compute:
                        compute[key] = self._layer_seconds(times, device)
                    seconds = compute[key]
                    if layout.tp > 1:  # its group's collectives, priced once per kind
                        held = self._layer_tp_seconds(times, d, s)
                        seconds = [a + b for a, b in zip(seconds, held, strict=True)]
                    found[key] = (device, _prefix(seconds))
            self.kinds.append(list(found.values()))
        self._memory: dict[tuple[int, int, int], float] = {}

    def _layer_seconds(self, times: StageTimes, device: Device) -> list[float]:
        """Seconds of each layer's forward + backward of one micro-batch on ``device`` (one
        GPU of a tensor and context group), as the run prices them."""
        layout = self.layout
        model, mb = layout.model, layout.micro_batch
        share = mb / (layout.tp * layout.cp)
        extra_forward, extra_backward = self._expert_flops()
        out = []
        for i, layer in enumerate(model.layers):
            moe = layer.kind == "moe"
            passes = (
                (layer.forward_flops + (extra_forward if moe else 0.0), True),
                (
                    layer_backward_flops(model, layer, layout.recompute)
                    + (extra_backward if moe else 0.0),
                    False,
                ),
            )
            total = 0.0
            for flops, forward in passes:
                rate = times.seconds_per_flop(device, i, forward, mb)
                work = flops * share
                total += work * rate if rate is not None else work / _flop_rate(device)
            out.append(total)
        return out

    def _layer_tp_seconds(self, times: StageTimes, d: int, s: int) -> list[float]:
        """Seconds each layer holds the tensor group of stage ``s`` of replica ``d`` for its
        collectives in one micro-batch's forward and backward (the backward with full
        recomputation runs the forward's again), as the run holds it: their alpha-beta time,
        or with ``tp_comm_overlap`` what the matrix products leave exposed."""
        layout = self.layout
        passes = 2 if layout.recompute == "full" else 1
        if layout.recipes.tp_comm_overlap:
            view = copy.copy(layout)  # the overlap prices products with the run's stage times
            view.stage_times = times
            return [
                tp_overlap.exposed_seconds(view, d, s, range(i, i + 1), "fwd", 1)
                + tp_overlap.exposed_seconds(view, d, s, range(i, i + 1), "bwd", passes)
                for i in range(len(layout.model.layers))
            ]
        timer = layout.tp_timers[d, s]
        out = []
        for layer in layout.model.layers:
            ops = []
            for phase in ("fwd", "bwd", *["fwd"] * (passes - 1)):
                ops += layout.tp_mode.layer_collectives(
                    layer,
                    layout.model,
                    layout.micro_batch / layout.cp,
                    phase=phase,
                    bytes_per_value=layout.options.bytes_per_value,
                    sequence_parallel=layout.options.sequence_parallel,
                )
            out.append(timer.seconds(ops))
        return out

    def _expert_flops(self) -> tuple[float, float]:
        """Forward and backward FLOPs per sample the busiest expert GPU adds per MoE layer
        (:func:`~clustersim.strategies.hybrid.experts.extra_flops`)."""
        experts = self.layout.experts
        if experts is None:
            return 0.0, 0.0
        forward = (experts.busiest_load - 1.0) * experts.routed_flops
        passes = 2 if self.layout.recompute == "full" else 1
        return forward, forward * (2 + passes - 1)

    # -- per virtual stage, layers [first, first + count) --------------------------

    def seconds(self, k: int, first: int, count: int) -> float:
        """Compute seconds of one micro-batch on virtual stage ``k``'s pace-setter."""
        return max(p[first + count] - p[first] for _, p in self.kinds[self.stage_of[k]])

    def pace_device(self, k: int, first: int, count: int) -> str:
        """The device setting virtual stage ``k``'s pace (the first of the slowest kind)."""
        kinds = self.kinds[self.stage_of[k]]
        device, _ = max(kinds, key=lambda kind: kind[1][first + count] - kind[1][first])
        return device.name

    def fits(self, k: int, first: int, count: int) -> bool:
        """Whether virtual stage ``k`` holding those layers fits its devices' memory."""
        return self.memory(k, first, count) <= self.capacity[self.stage_of[k]]

    def memory(self, k: int, first: int, count: int) -> float:
        """Peak bytes of one GPU of virtual stage ``k``'s device stage holding those layers
        (every chunk of it alike, when there are several), as the memory plan counts them."""
        s = self.stage_of[k]
        key = (s, first, count)
        if key not in self._memory:
            self._memory[key] = self._stage_peak(s, first, count)
        return self._memory[key]

    def _stage_peak(self, s: int, first: int, count: int) -> float:
        layout = self.layout
        schedule = layout.schedule
        chunks = [schedule.virtual_stage(s, c) for c in range(schedule.chunks)]
        plan = plan_range(layout.model, chunks[0], first, count, layout.options)
        view = copy.copy(layout)  # the layout with those plans on stage s
        view.plans = list(layout.plans)
        for k in chunks:
            view.plans[k] = dataclasses.replace(plan, index=k)
        if layout.experts is not None:
            moe = sum(1 for x in layout.model.layers[first : first + count] if x.kind == "moe")
            counts = list(layout.experts.moe_layers)
            for k in chunks:
                counts[k] = moe
            view.experts = dataclasses.replace(layout.experts, moe_layers=tuple(counts))
        m = max(view.micro_batch_counts())  # the replica holding the most micro-batches
        states, activations, other = view._stage_memory(s, m)
        memory = layout.train.memory
        device = DeviceMemory.of(states, activations, other, self.capacity[s])
        return device.with_settings(memory.fragmentation, memory.buffers, memory.context).peak


def balance_stages(layout: Any, even: Sequence[int] | None) -> StageBalance:
    """The balanced split of a checked hybrid ``layout`` (its provisional split in place);
    ``even`` the even split in layers, if the model has one (for the summary)."""
    costs = StageCosts(layout)
    units = units_of(layout.model)
    edges = _prefix(units)  # unit i is layers [edges[i], edges[i + 1])

    def seconds(k: int, first: int, count: int) -> float:
        return costs.seconds(k, edges[first], edges[first + count] - edges[first])

    def fits(k: int, first: int, count: int) -> bool:
        return costs.fits(k, edges[first], edges[first + count] - edges[first])

    parts = layout.schedule.virtual_stages
    fastest = minimax_split(len(units), parts, seconds)
    assert fastest is not None  # without memory every split packs
    chosen = minimax_split(len(units), parts, seconds, fits)
    fitting = chosen is not None
    if chosen is None:
        chosen = fastest
    counts = _layers(chosen, units)
    times = _stage_seconds(costs, counts)
    firsts = _prefix(counts)
    return StageBalance(
        counts=counts,
        seconds=times,
        pace_devices=[costs.pace_device(k, firsts[k], n) for k, n in enumerate(counts)],
        even_seconds=_stage_seconds(costs, even) if even is not None else None,
        memory_bound=max(times) > split_seconds(fastest, seconds)[0] * (1 + 1e-9),
        fits=fitting,
    )


def _stage_seconds(costs: StageCosts, counts: Sequence[int]) -> list[float]:
    return split_seconds(counts, costs.seconds)[1]


def _layers(unit_counts: Sequence[int], units: Sequence[int]) -> list[int]:
    """Layer counts of a split given in units."""
    out, first = [], 0
    for count in unit_counts:
        out.append(sum(units[first : first + count]))
        first += count
    return out


def _prefix(values: Sequence[float]) -> list[Any]:
    out = [0]
    for value in values:
        out.append(out[-1] + value)
    return out


def _flop_rate(device: Device) -> float:
    """FLOP/s a device computes FLOPs at where no compute model prices them (:mod:`clustersim.devices`)."""
    return device.flops_per_s * device.efficiency
