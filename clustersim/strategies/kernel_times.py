"""Seconds of a transformer's layers under each device's compute model, for every strategy.

A transformer layer (``attention``, ``mlp``, ``head``; :mod:`clustersim.model.operators`)
is a list of kernels at their own shapes; the device's compute model
(:mod:`clustersim.compute`, ``cluster.node.gpu.compute``) prices them.  Three pieces, shared
by the pipeline (hybrid) strategy's :class:`~clustersim.strategies.hybrid.compute_time.StageTimes`
and the data-parallel, ZeRO and parameter-server workers' :class:`LayerTimes`:

* :class:`DeviceModels` -- the compute model of each device spec (``compute.model``, its
  curve: fitted to a ``kernels`` file, else given as ``curve``, else the built-in one),
  built once per spec; a kernels file is read once per (file, peak).
* :class:`LayerKernels` -- the kernels of one layer's forward, or of its backward with the
  recomputation (``full``: the forward kernels of each attention, MLP and MoE layer again;
  ``selective``: the attention's ``scores``, ``softmax`` and ``context``, none with the
  fused FlashAttention kernel), for ``b`` samples on one of ``tp`` GPUs, built once per
  (layer shape, pass, b); in fp8 training with Transformer Engine's casts
  (:mod:`clustersim.model.fp8_casts`), and the weights' casts of a layer apart (once per
  step under the pipeline strategy; the data-parallel workers' forward holds them).
* :class:`LayerTimes` -- a data-parallel worker's seconds of each layer's forward and
  backward for its samples per pass, as the pipeline strategy prices a stage of the same
  layers with tp = 1 (in fp8 its forward casts the weights each time, where the pipeline
  strategy casts them once per step): the layer's FLOPs (what the records count) times the
  seconds per FLOP of its kernels.  Computed once per (device spec, samples).

None (or a None entry) means "price the FLOPs as before": the model is ``flat``, the model
is not a transformer, the samples are not a whole number, or the layer is memory-bound
(a sparse embedding's ``forward_bytes``) or has no kernel FLOPs.  Units: seconds, FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..compute import (
    DEFAULT_CURVE,
    EfficiencyCurve,
    ProductRate,
    compute_model,
    curve_at,
    fit_curve,
    read_kernels,
)
from ..compute.models import ComputeModel, Operation
from ..model.fp8_casts import Fp8Casts, weight_casts
from ..model.layers import Layer, Model, with_recompute
from ..model.operators import backward_operations, forward_operations
from ..parallel.tensor_parallel import SPLIT_KINDS
from ..scenario.presets import scenario_folder
from ..topology import Device

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


class DeviceModels:
    """The compute model of each device spec; ``base_dir`` anchors relative kernels files."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._models: dict[tuple[Any, ...], ComputeModel] = {}
        self._curves: dict[str, EfficiencyCurve] = {}

    def of(self, device: Device) -> ComputeModel:
        """The compute model of ``device`` (its spec's ``compute``; roofline when none), with
        the curve fitted to its ``kernels`` file, else its ``curve`` (a preset's, at the
        training precision), else the built-in curve, its ``memory_efficiency``, and the own
        rates of its attention core and of the products an fp8 run keeps in 16 bits
        (``attention``, ``sixteen_bit``)."""
        spec = device.compute
        name = spec.model if spec is not None else "roofline"
        kernels = spec.kernels if spec is not None else None
        given = getattr(spec, "curve", None)
        attention = getattr(spec, "attention", None)
        sixteen_bit = getattr(spec, "sixteen_bit", None)
        memory_efficiency = getattr(spec, "memory_efficiency", 1.0)
        rates = (device.flops_per_s, device.efficiency, device.memory_bandwidth_Bps)
        key = (name, kernels, given, attention, sixteen_bit, memory_efficiency, *rates)
        found = self._models.get(key)
        if found is None:
            curve = DEFAULT_CURVE
            if kernels:
                curve = self._curve(kernels, device.flops_per_s)
            elif given is not None:
                curve = curve_at(given.e_max, given.kernel_time_s, device.flops_per_s)
            found = compute_model(
                name,
                *rates,
                curve,
                attention=_product_rate(attention),
                memory_efficiency=memory_efficiency,
                sixteen_bit=_product_rate(sixteen_bit),
            )
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


def _product_rate(spec: Any) -> ProductRate | None:
    """The rate of a ``compute.attention`` or ``compute.sixteen_bit`` spec (None: the
    products')."""
    if spec is None:
        return None
    curve = spec.curve
    return ProductRate(spec.peak_flops, curve_at(curve.e_max, curve.kernel_time_s, spec.peak_flops))


class LayerKernels:
    """The kernels of ``model``'s layers on one of ``tp`` GPUs with ``recompute`` (none,
    selective, full), built once per (layer shape, pass, micro-batch size); ``fp8``: the fp8
    casts of a run trained in fp8 (None: none), with the weights' casts in every forward
    when ``weights_each_forward``, else apart (:meth:`weights`); ``ep``: the expert-parallel
    GPUs an MoE layer's experts are spread over."""

    def __init__(
        self,
        model: Model,
        tp: int,
        recompute: str,
        fp8: Fp8Casts | None = None,
        weights_each_forward: bool = False,
        ep: int = 1,
    ) -> None:
        self.shape = model.transformer
        self.tp = tp
        self.ep = ep
        """Expert-parallel GPUs of an MoE layer (:mod:`clustersim.model.moe_operators`)."""
        self.recompute = recompute
        self.fp8 = fp8
        self.weights_each_forward = weights_each_forward
        self._lists: dict[tuple[Any, ...], list[Operation]] = {}

    def of(self, layer: Layer, forward: bool, b: int) -> list[Operation]:
        """The kernels of ``layer``'s forward (or backward, with its recomputation) of ``b``
        samples.  Layers of one kind and FLOPs share one list (a transformer's blocks)."""
        key = (layer.kind, layer.forward_flops, forward, b)
        found = self._lists.get(key)
        if found is None:
            found = self._lists[key] = self._build(layer, forward, b)
        return found

    def _build(self, layer: Layer, forward: bool, b: int) -> list[Operation]:
        fwd = forward_operations(layer, self.shape, b, self.tp, self.fp8, self.ep)
        if forward:
            return fwd + self.weights(layer) if self.weights_each_forward else fwd
        again: list[Operation] = []
        if layer.kind in SPLIT_KINDS and self.recompute == "full":
            again = fwd
        elif layer.kind == "attention" and self.recompute == "selective":
            again = [op for op in fwd if op.name in SELECTIVE]
        return again + backward_operations(fwd, self.fp8)

    def weights(self, layer: Layer) -> list[Operation]:
        """The fp8 casts of ``layer``'s weights (none unless the run is in fp8)."""
        if self.fp8 is None:
            return []
        return weight_casts(forward_operations(layer, self.shape, 1, self.tp, ep=self.ep))

    def of_layers(self, layers: Sequence[Layer], forward: bool, b: int) -> list[Operation]:
        """The kernels of ``layers`` one after the other (a pipeline stage)."""
        ops: list[Operation] = []
        for layer in layers:
            ops += self.of(layer, forward, b)
        return ops

    def weights_of_layers(self, layers: Sequence[Layer]) -> list[Operation]:
        """The fp8 casts of the weights of ``layers`` (a pipeline stage)."""
        return [op for layer in layers for op in self.weights(layer)]


def whole_samples(samples: float) -> int | None:
    """``samples`` as a whole number of sequences >= 1, or None (then FLOPs are priced)."""
    return int(samples) if samples == int(samples) and samples >= 1 else None


class PassTimes(NamedTuple):
    """Seconds of each layer's forward and backward on one worker (None: price its FLOPs)."""

    forward: Sequence[float | None]
    backward: Sequence[float | None]


class LayerTimes:
    """Per-layer compute seconds of data-parallel workers (see the module docstring).

    ``model`` is the model without recomputation; ``recompute`` what the workers run (their
    backward FLOPs are :func:`~clustersim.model.layers.with_recompute`'s).  ``devices``: the
    workers, whose compute models (and kernels files) are read now, before the simulation
    runs, so that a bad file is a ScenarioError, not a failed run.  ``precision``: the
    training precision; in fp8 each forward casts the layer's weights too (Transformer
    Engine's default without ``is_first_microbatch``: :mod:`clustersim.model.fp8_casts`)."""

    def __init__(
        self,
        model: Model,
        recompute: str,
        base_dir: Path,
        devices: Sequence[Device] = (),
        precision: str | None = None,
    ) -> None:
        self.model = model
        self.run_model = with_recompute(model, recompute)
        self.models = DeviceModels(base_dir)
        fp8 = Fp8Casts.of(precision, model.transformer, 1, False)
        self.kernels = LayerKernels(model, 1, recompute, fp8, weights_each_forward=True)
        self._rates: dict[tuple[Any, ...], float | None] = {}
        self._passes: dict[tuple[int, float], PassTimes] = {}
        nothing = [None] * len(model.layers)
        self._flat = PassTimes(nothing, nothing)
        if model.transformer is not None:
            for device in devices:
                self.models.of(device)

    @classmethod
    def of_workers(cls, strategy: Any, recompute: str) -> LayerTimes:
        """The layer times of a data-parallel ``strategy``'s workers (its ``model``,
        ``workers``, ``topology`` and ``scenario``, whose file anchors kernels files)."""
        folder = scenario_folder(strategy.scenario.source or "")
        devices = [strategy.topology.devices[name] for name in strategy.workers]
        return cls(strategy.model, recompute, folder, devices, strategy.train.precision)

    def passes(self, device: Device, samples: float) -> PassTimes:
        """Seconds of every layer's forward and backward of ``samples`` samples on
        ``device``; all None when the FLOPs are priced as before."""
        b = whole_samples(samples)
        if self.model.transformer is None or b is None:
            return self._flat
        compute = self.models.of(device)
        if not compute.shaped:
            return self._flat
        key = (id(compute), samples)  # workers of one spec share their times
        found = self._passes.get(key)
        if found is None:
            found = self._passes[key] = PassTimes(
                [self._seconds(compute, layer, True, b) for layer in self.model.layers],
                [self._seconds(compute, layer, False, b) for layer in self.run_model.layers],
            )
        return found

    def _seconds(self, compute: ComputeModel, layer: Layer, forward: bool, b: int) -> float | None:
        """The layer's FLOPs of one pass of ``b`` samples at its kernels' seconds per FLOP."""
        if (layer.forward_bytes if forward else layer.backward_bytes) > 0:
            return None  # memory-bound (a sparse embedding): priced by its bytes
        flops = (layer.forward_flops if forward else layer.backward_flops) * b
        rate = self.seconds_per_flop(compute, layer, forward, b)
        return None if rate is None else flops * rate

    def seconds_per_flop(
        self, compute: ComputeModel, layer: Layer, forward: bool, b: int
    ) -> float | None:
        """Seconds per FLOP of ``layer``'s kernels for one pass of ``b`` samples under
        ``compute`` (memory-bound kernels' time included); None without kernel FLOPs.
        Priced once per (device spec, layer shape, pass, b)."""
        key = (id(compute), layer.kind, layer.forward_flops, forward, b)
        if key not in self._rates:
            ops = self.kernels.of(layer, forward, b)
            flops = sum(op.flops for op in ops)
            self._rates[key] = compute.seconds(ops) / flops if flops > 0 else None
        return self._rates[key]
