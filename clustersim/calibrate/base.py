"""The base node a calibration starts from, made ready from what the logs say.

The base is a catalog node (``--base dgx-a100``) or a node file; without ``--base`` it is the
catalog node of the GPUs the logs name.  nccl-tests prints each rank's device name as CUDA
reports it (``NVIDIA A100-SXM4-40GB``, ``NVIDIA H100 80GB HBM3``); the first pattern that
matches wins.  What the logs say directly goes into the node as it is, not fitted: the GPU
(``A100-SXM4-40GB``: ``a100-sxm4-40gb``), the NICs per node NCCL's debug lines list, and the
socket transport where NCCL used it.  A log of another number of GPUs per node than the base
has is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import Problem, ScenarioError
from ..hardware import Preset
from .figures import Spec, working_spec
from .logs import Run

BASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"H200"), "hgx-h200"),
    (re.compile(r"H100"), "dgx-h100"),
    (re.compile(r"B200"), "dgx-b200"),
    (re.compile(r"A100"), "dgx-a100"),
    (re.compile(r"V100"), "dgx-1-v100"),
    (re.compile(r"MI300X"), "mi300x-platform"),
)
"""Device name pattern -> the catalog node whose figures a calibration starts from."""

GPUS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"A100.*40GB"), "a100-sxm4-40gb"),
    (re.compile(r"A100.*80GB"), "a100-sxm4-80gb"),
    (re.compile(r"H100.*PCIe", re.I), "h100-pcie"),
    (re.compile(r"H100"), "h100-sxm5-80gb"),
    (re.compile(r"H200"), "h200-sxm-141gb"),
    (re.compile(r"B200"), "b200"),
    (re.compile(r"V100"), "v100-sxm2-32gb"),
    (re.compile(r"MI300X"), "mi300x"),
)
"""Device name pattern -> the catalog GPU it is."""


def _first(table: tuple[tuple[re.Pattern[str], str], ...], names: Sequence[str]) -> str | None:
    for name in names:
        for pattern, entry in table:
            if pattern.search(name):
                return entry
    return None


def base_for(names: Sequence[str]) -> str | None:
    """The catalog node for GPUs called ``names`` (None: none known)."""
    return _first(BASES, names)


def gpu_for(names: Sequence[str]) -> str | None:
    """The catalog GPU called ``names`` (None: none known)."""
    return _first(GPUS, names)


MEMORY_GB = (16, 24, 32, 40, 48, 64, 80, 94, 96, 141, 180, 186, 192)
"""GPU memory sizes as product names give them (GB), tried in turn by :func:`gpu_of_device`."""


def gpu_of_device(name: str, memory_bytes: float = 0.0) -> str | None:
    """The catalog GPU of a device CUDA calls ``name`` (a profiler trace's
    ``deviceProperties``); where the name gives no memory (``NVIDIA A100-PG509-200``), the
    one of the nearest size to ``memory_bytes`` (``totalGlobalMem``); None: none known."""
    found = gpu_for([name])
    if found is not None or memory_bytes <= 0:
        return found
    for gb in sorted(MEMORY_GB, key=lambda gb: abs(gb - memory_bytes / 1e9)):
        found = gpu_for([f"{name} {gb}GB"])
        if found is not None:
            return found
    return None


def prepare(
    base: Preset, runs: Sequence[Run], nics: int | None = None
) -> tuple[Spec, dict[str, tuple[str, str]]]:
    """The working node spec (:func:`.figures.working_spec` of ``base``) with what ``runs``
    say set in it, and a note per key so set: dotted ``spec.`` path -> (source, note).
    ``nics``: the NICs per node where the logs do not list them.  ScenarioError at the first
    run whose GPUs per node differ from the base's."""
    spec = working_spec(base.spec)
    notes: dict[str, tuple[str, str]] = {}
    gpus = int(spec.get("gpus", 8))
    for run in runs:
        if run.gpus_per_node != gpus:
            raise ScenarioError(
                Problem(
                    f"line {run.line}",
                    f"the run has {run.gpus_per_node} GPUs per node; the node file "
                    f"{base.name} has {gpus}",
                    f"logs of runs on all {gpus} GPUs of each node, or a --base node of "
                    f"{run.gpus_per_node} GPUs",
                ),
                run.file,
            )
    names = [name for run in runs for name in run.gpu_names]
    gpu = gpu_for(names)
    old = spec.get("gpu", {}).get("preset") if isinstance(spec.get("gpu"), Mapping) else None
    if gpu is not None and old is not None and gpu != old:
        spec["gpu"] = {"preset": gpu}
    if "nvlink" in spec and isinstance(spec["nvlink"], dict) and "generation" in spec["nvlink"]:
        notes["spec.nvlink.generation"] = (
            base.sources.get("spec.nvlink.bandwidth", "nccl-tests-fit"),
            f"{base.name}'s NVLink generation, written out so that NCCL's figures (its share "
            "of the line rate, its channel speeds) stay the hardware's as the bandwidth is fitted",
        )
    seen = [run.nccl.nics_per_node for run in runs if run.nccl.nics_per_node]
    count = max(seen) if seen else nics
    if count is not None:
        spec["nics"] = min(count, gpus)
        said = "the logs' NCCL_DEBUG lines list" if seen else "--nics gives"
        extra = f"; clustersim puts at most one NIC per GPU: {gpus}" if count > gpus else ""
        notes["spec.nics"] = ("nccl-tests-fit", f"{said} {count} NICs per node{extra}")
    if any(run.nccl.network == "Socket" for run in runs):
        spec["nic"] = {**spec["nic"], "transport": "tcp"}
        notes["spec.nic.transport"] = (
            "nccl-tests-fit",
            "NCCL used its socket transport ('Using network Socket' in the logs)",
        )
    _sharp_note(spec, base, notes)
    return spec, notes


def _sharp_note(spec: Mapping[str, Any], base: Preset, notes: dict[str, tuple[str, str]]) -> None:
    nvlink = spec.get("nvlink")
    if isinstance(nvlink, Mapping) and base.spec.get("nvlink", {}).get("sharp") is True:
        notes["spec.nvlink.sharp"] = (
            base.sources.get("spec.nvlink.sharp", "nccl-tests-fit"),
            f"{base.name}'s 'sharp: true' written as the throughput it stands for",
        )
