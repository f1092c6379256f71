"""Compute devices of the ``cluster:`` section: :class:`DeviceSpec` (a GPU or a CPU), its
``compute`` model, hardware presets, and peaks by number format.

A device names a catalog entry with ``preset`` (``clustersim list gpus``, or a YAML file of
one, relative to the scenario file): the preset's values are the device's, and keys given
beside the preset replace them (deep merge; :mod:`clustersim.hardware.presets`).  Paths of
preset files are resolved against ``base_dir`` in the validation context (the scenario's
folder; :func:`clustersim.scenario.document.parse_scenario` passes it).

A device may give ``peaks`` by precision instead of one ``flops``: :meth:`DeviceSpec.priced`
then takes the peak (and the efficiency curve) of the training precision; the scenario does
that once it knows the precision (:func:`price_devices`).  A device with ``flops`` keeps it
whatever the precision -- the meaning ``flops`` always had.  Units: FLOP/s, bytes, B/s, s.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from clustersim.errors import Problem, ScenarioError, hinted, join_path

from .fields import Bandwidth as _Bandwidth
from .fields import Float, FlopRate, Invalid, Size, TimeSpan, _Spec, _unit
from .plugins import plugin_name

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
"""A number format: what ``training.precision`` takes and what ``peaks`` are given for."""
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
"""Every :data:`Precision`, narrowest peak first."""
WORKLOAD_PRECISIONS = ("bf16", "fp16")
"""What a scenario without a training section prices a GPU with ``peaks`` at: the first of
these its peaks have (else its first peak)."""

CPU_DEFAULTS: dict[str, Any] = {
    "flops": "2TFLOPS",
    "efficiency": 1.0,
    "memory": "1TB",
    "memory_bandwidth": "200GB/s",
}
"""What a CPU has when the scenario does not say (YAML keys and spellings)."""


def base_dir(info: ValidationInfo) -> Path | None:
    """The folder preset files are relative to (the scenario's), from the validation context."""
    context = info.context if isinstance(info.context, dict) else {}
    folder = context.get("base_dir")
    return Path(folder) if folder is not None else None


def expanded(data: Any, kind: str, info: ValidationInfo) -> Any:
    """``data`` with its ``preset`` expanded (the values it names, under the keys ``data``
    gives), keeping the preset's canonical name under ``preset``; ``data`` itself when it
    names none.  Problems of the preset at key ``preset``."""
    if not isinstance(data, dict) or not isinstance(data.get("preset"), str):
        return data
    from clustersim.hardware import deep_merge, find

    try:
        preset = find(data["preset"], kind, base_dir(info))
    except ScenarioError as exc:
        raise Invalid(exc.problems) from None
    given = {key: value for key, value in data.items() if key != "preset"}
    return {**deep_merge(preset.spec, given), "preset": preset.name}


FP8 = "fp8"
"""The precision whose attention core and output layer run in 16 bits."""
SIXTEEN_BIT = ("bf16", "fp16")
"""Where fp8 training's attention core and output layer run, in order of preference."""


class CurveSpec(_Spec):
    """The efficiency curve of matrix products (docs/compute.md): a product of F FLOPs reaches
    ``e_max F / (F + F_half)`` of the peak, ``F_half = kernel_time x e_max x peak``."""

    e_max: Float = Field(gt=0, le=1)
    """Ceiling: the share of the peak large products reach (0 < e_max <= 1)."""
    kernel_time_s: TimeSpan = Field(alias="kernel_time")
    """Fixed cost of every product (launch, ramp-up, last wave), seconds."""


class ProductRateSpec(_Spec):
    """The peak and curve a set of products runs at where they differ from the other
    products' (``attention``: the attention core's; ``sixteen_bit``: the output layer's in an
    fp8 run; docs/compute.md)."""

    peak_flops: FlopRate = Field(alias="peak")
    """Peak FLOP/s of these products."""
    curve: CurveSpec
    """Their efficiency curve."""


ComputeModelName = plugin_name("compute-models")
"""The name of a registered compute model (``clustersim list compute-models``)."""


class ComputeSpec(_Spec):
    """How the device prices shaped work (``cluster.node.gpu.compute``; docs/compute.md)."""

    model: ComputeModelName = "roofline"
    """A compute model: ``roofline`` (default) or ``flat`` (``clustersim list compute-models``)."""
    kernels: str | None = None
    """A CSV of measured matrix products (m,n,k,dtype,tflops|seconds[,batch]) to fit the
    efficiency curve to; relative to the scenario file's folder.  None: ``curve``, else the
    built-in curve."""
    curve: CurveSpec | None = None
    """The efficiency curve (``kernels`` wins when given); None: the one of ``curves`` for the
    training precision, else the built-in (A100) curve."""
    curves: dict[Precision, CurveSpec] = {}
    """Efficiency curves by precision (a preset's); a precision without one takes the bf16
    curve, else the fp16 one."""
    memory_efficiency: Float = Field(1.0, gt=0, le=1)
    """The share of ``memory_bandwidth`` memory-bound kernels (norms, softmax, activations,
    the cross-entropy) reach under ``roofline`` (0 < m <= 1; default 1, the full bandwidth):
    what ``clustersim calibrate profile --scenario`` fits to a profiler trace."""
    attention: ProductRateSpec | None = None
    """The attention core's own peak and curve (None: the products'); a device priced at fp8
    by its ``peaks`` gets its 16-bit ones, as Transformer Engine's fp8 recipes keep the
    attention in 16 bits."""
    sixteen_bit: ProductRateSpec | None = None
    """The peak and curve of the products an fp8 run keeps in 16 bits besides the attention
    core -- the output layer's ``logits`` and their gradients' products, BERT's pooler
    (None: the products'); a device priced at fp8 by its ``peaks`` gets its 16-bit ones (not
    ``attention``'s), as Megatron-Core runs its output layer outside Transformer Engine's
    ``fp8_autocast``."""

    @model_validator(mode="after")
    def _known_model(self) -> ComputeSpec:
        from clustersim.compute import ComputeModel

        registry = ComputeModel.registry
        if registry.get(self.model) is None:
            message = hinted(f"unknown compute model {self.model!r}", self.model, registry.names())
            raise Invalid(Problem("model", message, " | ".join(registry.names())))
        return self


class DeviceSpec(_Spec):
    """A compute device.  The defaults are those of a GPU (an A100); see :data:`CPU_DEFAULTS`."""

    flops_per_s: FlopRate = _unit("312TFLOPS", "flops")
    """Peak compute rate, FLOP/s: the one used whatever the precision when given; a device
    with ``peaks`` and no ``flops`` is priced at its peak for the training precision."""
    efficiency: Float = Field(1.0, gt=0, le=1)
    """Fraction of the peak that is reached (0 < e <= 1)."""
    memory_bytes: Size = _unit("80GB", "memory")
    """Memory capacity, bytes."""
    memory_bandwidth_Bps: _Bandwidth = _unit("2TB/s", "memory_bandwidth")
    """Memory bandwidth, bytes per second."""
    compute: ComputeSpec = Field(default_factory=ComputeSpec)
    """The compute model of shaped work (transformer layers, under every training strategy)."""
    peaks: dict[Precision, FlopRate] = {}
    """Dense peak FLOP/s by precision (fp32, tf32, fp16, bf16, fp8): without ``flops``, the
    device runs at the peak of the training precision (fp8 only where it has one)."""
    preset: str | None = None
    """A catalog GPU (``clustersim list gpus``) or a YAML file of one (``./my_gpu.yaml``,
    relative to the scenario file): its values are this device's; keys beside it replace them."""
    type: str | None = Field(None, min_length=1)
    """What the device is, for the summary's ``gpu_types`` on a mixed cluster (default: its
    preset's name); a run folder's scenario.resolved.yaml writes it for each preset it
    expands."""

    @property
    def type_name(self) -> str:
        """What the device is: ``type``, else its preset's name, else ""."""
        return self.type or self.preset or ""

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any, info: ValidationInfo) -> Any:
        return expanded(data, "gpu", info)

    @model_validator(mode="after")
    def _usable_rate(self) -> DeviceSpec:
        if not self.flops_per_s * self.efficiency > 0:
            message = f"flops x efficiency is {self.flops_per_s * self.efficiency!r} FLOP/s"
            raise Invalid(Problem("efficiency", message, "a product above 0"))
        return self

    @property
    def priced_by_precision(self) -> bool:
        """True when the device's peak depends on the precision: ``peaks`` and no ``flops``."""
        return bool(self.peaks) and "flops_per_s" not in self.model_fields_set

    def precision_of(self, precision: str | None) -> str:
        """The precision the device is priced at for ``precision`` (None: a workload without
        training -- the 16-bit peak, :data:`WORKLOAD_PRECISIONS`)."""
        if precision is not None:
            return precision
        found = [p for p in WORKLOAD_PRECISIONS if p in self.peaks]
        return found[0] if found else next(iter(self.peaks), "bf16")

    def priced(self, precision: str | None) -> DeviceSpec:
        """This device at ``precision``: ``flops`` the peak of ``peaks`` for it (unless
        ``flops`` is given) and ``compute.curve`` the curve of ``compute.curves`` for it
        (unless a curve is given).  KeyError (the precision) if the peaks lack it."""
        from clustersim.hardware import curve_for

        chosen = self.precision_of(precision)
        update: dict[str, Any] = {}
        if self.priced_by_precision:
            if chosen not in self.peaks:
                raise KeyError(chosen)
            update["flops_per_s"] = self.peaks[chosen]
        compute: dict[str, Any] = {}
        if self.compute.curve is None and self.compute.curves:
            curve = curve_for(self.compute.curves, chosen)
            if curve is not None:
                compute["curve"] = curve
        if chosen == FP8:
            rate = self._sixteen_bit_rate()
            if self.compute.attention is None:
                compute["attention"] = rate
            if self.compute.sixteen_bit is None:
                compute["sixteen_bit"] = rate
        if compute:
            update["compute"] = self.compute.model_copy(update=compute)
        return self.model_copy(update=update) if update else self

    def sixteen_bit(self) -> str | None:
        """The 16-bit precision fp8 training's attention core and output layer run at: the
        first of :data:`SIXTEEN_BIT` the device has a peak and a curve for (None: neither)."""
        from clustersim.hardware import curve_for

        curves = self.compute.curves
        found = (p for p in SIXTEEN_BIT if p in self.peaks and curve_for(curves, p) is not None)
        return next(found, None)

    def _sixteen_bit_rate(self) -> ProductRateSpec | None:
        """The 16-bit peak and curve of fp8 training's attention core and output layer (None
        if the device lacks a 16-bit peak or curve)."""
        from clustersim.hardware import curve_for

        precision = self.sixteen_bit()
        if precision is None:
            return None
        curve = curve_for(self.compute.curves, precision)
        return ProductRateSpec.model_construct(peak_flops=self.peaks[precision], curve=curve)


def _with_cpu_defaults(device: object, model: type[BaseModel] = DeviceSpec) -> object:
    """``device`` (raw YAML mapping) with the CPU defaults for every key it does not give (a
    device naming a preset takes the preset's instead)."""
    if not isinstance(device, dict) or "preset" in device:
        return device
    filled = dict(device)
    for key, value in CPU_DEFAULTS.items():
        name = next(n for n, f in model.model_fields.items() if (f.alias or n) == key)
        if key not in filled and name not in filled:
            filled[key] = value
    return filled


def _yaml_name(model: BaseModel, name: str) -> str:
    field = type(model).model_fields[name]
    return field.alias or name


def price_devices(model: BaseModel, precision: str | None, path: str = "cluster") -> Any:
    """``model`` (a cluster spec, or any part of one) with every :class:`DeviceSpec` in it
    :meth:`~DeviceSpec.priced` at ``precision``; the same object when nothing changes.
    A device whose peaks lack the precision raises :class:`MissingPeak`."""
    if isinstance(model, DeviceSpec):
        try:
            return model.priced(precision)
        except KeyError:
            raise MissingPeak(path, model, model.precision_of(precision)) from None
    update: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        where = join_path(path, _yaml_name(model, name))
        if isinstance(value, BaseModel):
            new: Any = price_devices(value, precision, where)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            new = [price_devices(v, precision, join_path(where, i)) for i, v in enumerate(value)]
            new = value if all(a is b for a, b in zip(new, value)) else new
        else:
            continue
        if new is not value:
            update[name] = new
    return model.model_copy(update=update) if update else model


def needs_precision(model: BaseModel) -> str:
    """The key path of the first device of ``model`` priced by precision ("" if none)."""
    found: list[str] = []

    def visit(value: Any, path: str) -> None:
        if found:
            return
        if isinstance(value, DeviceSpec):
            if value.priced_by_precision:
                found.append(path)
            return
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                visit(getattr(value, name), join_path(path, _yaml_name(value, name)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                visit(item, join_path(path, i))

    visit(model, "cluster")
    return found[0] if found else ""


class MissingPeak(Exception):
    """A device priced by precision has no peak for the training precision."""

    def __init__(self, path: str, device: DeviceSpec, precision: str) -> None:
        super().__init__(precision)
        self.path = path
        """Key path of the device (``cluster.node.gpu``)."""
        self.precision = precision
        """The precision it lacks."""
        self.has = [p for p in PRECISIONS if p in device.peaks]
        """The precisions its peaks have."""
        self.name = device.preset or "the device"
        """Its preset's name."""

    def problem(self, precision_path: str) -> Problem:
        """The problem, at the key that chose the precision."""
        what = f"the GPU {self.name}" if self.name != "the device" else "the device"
        message = (
            f"{what} at {self.path} has no {self.precision} peak (it has {', '.join(self.has)})"
        )
        allowed = f"{' | '.join(self.has)}, or give {self.path}.flops"
        return Problem(precision_path, message, allowed)
