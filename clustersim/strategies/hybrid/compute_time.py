"""Seconds of a stage's forward or backward of one micro-batch under the device's compute model.

The hybrid strategy asks :meth:`StageTimes.seconds` for virtual stage ``k``, ``forward`` or
``backward`` and micro-batch size ``b``; the answer is the sum, over the stage's layers, of
their kernels (:mod:`clustersim.model.operators`) priced by the device's compute model
(:mod:`clustersim.compute`), cached per (device spec, stage, kind, b).  Backward includes
the recomputation: with ``full`` the forward kernels of the attention and MLP layers again,
with ``selective`` their attention scores, softmax and context.  None means "price the
FLOPs as before": the model is ``flat``, or the model is not a transformer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...compute import (
    DEFAULT_CURVE,
    EfficiencyCurve,
    compute_model,
    curve_at,
    fit_curve,
    read_kernels,
)
from ...compute.models import ComputeModel, Operation
from ...model.operators import backward_operations, forward_operations
from ...parallel.tensor_parallel import SPLIT_KINDS
from ...scenario.presets import scenario_folder
from ...topology import Device
from .. import training

KERNELS_PATH = "cluster.node.gpu.compute.kernels"
"""Key path named by problems with a kernels file."""
SELECTIVE = frozenset({"scores", "softmax", "context"})
"""Forward kernels selective recomputation re-runs."""


def anchor_kernel_paths(doc: Any, source: str) -> Any:
    """``doc`` with every relative ``compute.kernels`` path (a GPU spec's, wherever the
    cluster puts it) made absolute from the folder of the scenario file ``source``: what
    ``scenario.resolved.yaml`` holds, so that it runs from its own folder too."""
    base = scenario_folder(source).resolve()
    if isinstance(doc, list):
        return [anchor_kernel_paths(item, source) for item in doc]
    if not isinstance(doc, dict):
        return doc
    out = {key: anchor_kernel_paths(value, source) for key, value in doc.items()}
    compute = out.get("compute")
    kernels = compute.get("kernels") if isinstance(compute, dict) else None
    if isinstance(kernels, str) and kernels and not Path(kernels).is_absolute():
        out["compute"] = {**compute, "kernels": str(base / kernels)}
    return out


class StageTimes:
    """Per-stage compute seconds of the hybrid strategy (see the module docstring)."""

    def __init__(
        self,
        model: training.Model,
        stage_layers: Sequence[tuple[int, int]],
        tp: int,
        recompute: str,
        base_dir: Path,
        devices: Sequence[Device] = (),
    ) -> None:
        """``devices``: the workers, whose compute models (and kernels files) are read now,
        before the simulation runs, so that a bad file is a ScenarioError, not a failed run."""
        self.model = model
        self.stage_layers = stage_layers
        self.tp = tp
        self.recompute = recompute
        self.base_dir = base_dir
        self._models: dict[tuple[Any, ...], ComputeModel] = {}
        self._curves: dict[str, EfficiencyCurve] = {}
        self._cache: dict[tuple[Any, ...], float | None] = {}
        self._operations: dict[tuple[int, bool, int], list[Operation]] = {}
        if model.transformer is not None:
            for device in devices:
                self.device_model(device)

    def device_model(self, device: Device) -> ComputeModel:
        """The compute model of ``device`` (its spec's ``compute``; roofline when none), with
        the curve fitted to its ``kernels`` file, else its ``curve`` (a preset's, at the
        training precision), else the built-in curve."""
        spec = device.compute
        name = spec.model if spec is not None else "roofline"
        kernels = spec.kernels if spec is not None else None
        given = getattr(spec, "curve", None)
        rates = (device.flops_per_s, device.efficiency, device.memory_bandwidth_Bps)
        key = (name, kernels, given, *rates)
        found = self._models.get(key)
        if found is None:
            curve = DEFAULT_CURVE
            if kernels:
                curve = self._curve(kernels, device.flops_per_s)
            elif given is not None:
                curve = curve_at(given.e_max, given.kernel_time_s, device.flops_per_s)
            found = compute_model(name, *rates, curve)
            self._models[key] = found
        return found

    def _curve(self, kernels: str, peak: float) -> EfficiencyCurve:
        file = Path(kernels)
        if not file.is_absolute():
            file = self.base_dir / file
        key = f"{file}@{peak!r}"
        if key not in self._curves:
            self._curves[key] = fit_curve(read_kernels(file, peak, KERNELS_PATH), peak)
        return self._curves[key]

    def operations(self, k: int, forward: bool, b: int) -> list[Operation]:
        """The kernels of virtual stage ``k``'s forward (or backward, with recomputation),
        built once per (stage, pass, micro-batch size)."""
        key = (k, forward, b)
        found = self._operations.get(key)
        if found is None:
            found = self._operations[key] = self._build_operations(k, forward, b)
        return found

    def _build_operations(self, k: int, forward: bool, b: int) -> list[Operation]:
        first, count = self.stage_layers[k]
        shape = self.model.transformer
        ops: list[Operation] = []
        for layer in self.model.layers[first : first + count]:
            fwd = forward_operations(layer, shape, b, self.tp)
            if forward:
                ops += fwd
                continue
            if layer.kind in SPLIT_KINDS and self.recompute == "full":
                ops += fwd
            elif layer.kind == "attention" and self.recompute == "selective":
                ops += [op for op in fwd if op.name in SELECTIVE]
            ops += backward_operations(fwd)
        return ops

    def seconds(self, device: Device, k: int, forward: bool, b: float) -> float | None:
        """Seconds of stage ``k``'s forward or backward of ``b`` samples on ``device``;
        None when the FLOPs should be priced as before (flat model, not a transformer, or a
        fractional micro-batch)."""
        if self.model.transformer is None or b != int(b) or b < 1:
            return None
        model = self.device_model(device)
        if not model.shaped:
            return None
        key = (id(model), k, forward, b)  # devices of one spec share their stage times
        if key not in self._cache:
            self._cache[key] = model.seconds(self.operations(k, forward, int(b)))
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
