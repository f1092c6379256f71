"""Seconds of a stage's forward or backward of one micro-batch under the device's compute model.

The hybrid strategy asks :meth:`StageTimes.seconds` for virtual stage ``k``, ``forward`` or
``backward`` and micro-batch size ``b``; the answer is the sum, over the stage's layers, of
their kernels (:class:`~clustersim.strategies.kernel_times.LayerKernels`, with the
recomputation: ``full`` the forward kernels of the attention and MLP layers again,
``selective`` their attention scores, softmax and context) priced by the device's compute
model (:class:`~clustersim.strategies.kernel_times.DeviceModels`), cached per (device spec,
stage, kind, b).  None means "price the FLOPs as before": the model is ``flat``, or the
model is not a transformer.  The data-parallel, ZeRO and parameter-server strategies price
each layer alike (:class:`~clustersim.strategies.kernel_times.LayerTimes`).

In fp8 training (:func:`run_casts`) the kernels hold Transformer Engine's casts and
transposes of each micro-batch, and :meth:`StageTimes.weight_seconds` prices the casts of a
stage's weights, which Megatron-Core runs once per step, in the stage's first forward
(:mod:`clustersim.model.fp8_casts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...compute.models import ComputeModel, Operation
from ...model.fp8_casts import Fp8Casts
from ...scenario.presets import scenario_folder
from ...topology import Device
from .. import training
from ..kernel_times import DeviceModels, LayerKernels, whole_samples

__all__ = ["StageTimes", "run_casts", "scenario_folder"]


def run_casts(layout: Any) -> Fp8Casts | None:
    """The fp8 casts of a hybrid ``layout``'s run (its ``train``, ``model``, ``tp`` and
    resolved ``parallelism``): None unless it trains a transformer in fp8."""
    return Fp8Casts.of(
        layout.train.precision,
        layout.model.transformer,
        layout.tp,
        layout.parallelism.sequence_parallel,
    )


class StageTimes:
    """Per-stage compute seconds of the hybrid strategy (see the module docstring)."""

    def __init__(
        self,
        model: training.Model,
        stage_layers: Sequence[tuple[int, int]],
        tp: int,
        recompute: str | Sequence[str],
        base_dir: Path,
        devices: Sequence[Device] = (),
        fp8: Fp8Casts | None = None,
        ep: int = 1,
    ) -> None:
        """``recompute``: one mode for every stage, or each stage's (stages differ);
        ``devices``: the workers, whose compute models (and kernels files) are read now,
        before the simulation runs, so that a bad file is a ScenarioError, not a failed run;
        ``fp8``: the run's fp8 casts (:func:`run_casts`; None: not in fp8); ``ep``: the
        expert-parallel GPUs of its MoE layers (``parallelism.ep``)."""
        self.model = model
        self.stage_layers = stage_layers
        self.models = DeviceModels(base_dir)
        modes = [recompute] * len(stage_layers) if isinstance(recompute, str) else recompute
        by_mode = {mode: LayerKernels(model, tp, mode, fp8, ep=ep) for mode in sorted(set(modes))}
        self.kernels_of = [by_mode[mode] for mode in modes]
        """Per stage: the kernels of its layers with its recomputation."""
        self._cache: dict[tuple[Any, ...], float | None] = {}
        self._operations: dict[tuple[int, bool, int], list[Operation]] = {}
        if model.transformer is not None:
            for device in devices:
                self.models.of(device)

    def device_model(self, device: Device) -> ComputeModel:
        """The compute model of ``device`` (:meth:`DeviceModels.of`)."""
        return self.models.of(device)

    def operations(self, k: int, forward: bool, b: int) -> list[Operation]:
        """The kernels of virtual stage ``k``'s forward (or backward, with recomputation),
        built once per (stage, pass, micro-batch size)."""
        key = (k, forward, b)
        found = self._operations.get(key)
        if found is None:
            first, count = self.stage_layers[k]
            layers = self.model.layers[first : first + count]
            found = self._operations[key] = self.kernels_of[k].of_layers(layers, forward, b)
        return found

    def weight_operations(self, k: int) -> list[Operation]:
        """The fp8 casts of virtual stage ``k``'s weights (none unless the run is in fp8)."""
        first, count = self.stage_layers[k]
        return self.kernels_of[k].weights_of_layers(self.model.layers[first : first + count])

    def weight_seconds(self, device: Device, k: int) -> float:
        """Seconds of the fp8 casts of virtual stage ``k``'s weights on ``device``, once per
        step (0 unless the run is in fp8 and its kernels are priced)."""
        key = ("weights", id(self.models.of(device)), k)
        if key not in self._cache:
            ops = self.weight_operations(k)
            model = self.device_model(device)
            shaped = ops and model.shaped and self.model.transformer is not None
            self._cache[key] = model.seconds(ops) if shaped else 0.0
        return self._cache[key] or 0.0

    def seconds(self, device: Device, k: int, forward: bool, b: float) -> float | None:
        """Seconds of stage ``k``'s forward or backward of ``b`` samples on ``device``;
        None when the FLOPs should be priced as before (flat model, not a transformer, or a
        fractional micro-batch)."""
        whole = whole_samples(b)
        if self.model.transformer is None or whole is None:
            return None
        model = self.device_model(device)
        if not model.shaped:
            return None
        key = (id(model), k, forward, b)  # devices of one spec share their stage times
        if key not in self._cache:
            self._cache[key] = model.seconds(self.operations(k, forward, whole))
        return self._cache[key]

    def seconds_per_flop(self, device: Device, k: int, forward: bool, b: float) -> float | None:
        """Seconds per FLOP of stage ``k``'s forward or backward of ``b`` samples on
        ``device`` (:meth:`seconds` over the kernels' FLOPs, memory-bound kernels' time
        included); None as for :meth:`seconds`.  The hybrid strategy multiplies an
        operation's FLOPs by it, so what changes an operation's FLOPs (the split of a
        backward into B and W, 1/cp of each sequence, the busiest expert's extra tokens)
        keeps the stage's shape-aware rate."""
        key = ("per_flop", device.name, k, forward, b)
        if key in self._cache:
            return self._cache[key]
        seconds = self.seconds(device, k, forward, b)
        found = None
        if seconds is not None:
            flops = sum(op.flops for op in self.operations(k, forward, int(b)))
            found = seconds / flops if flops > 0 else None
        self._cache[key] = found
        return found
