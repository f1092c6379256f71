"""A PyTorch profiler trace read for calibration: its matrix products with their shapes,
precisions and GPU kernel times, and the rest of its GPU work by kind.

The file is the Chrome-trace JSON of ``torch.profiler`` (``export_chrome_trace``, or the
``tensorboard_trace_handler``'s ``*.pt.trace.json``), plain or gzipped (``.json.gz``),
recorded with ``record_shapes=True`` on one GPU.  What is read:

* **Products**: CPU ops named in :data:`PRODUCT_OPS` (``aten::mm``, ``aten::addmm``,
  ``aten::bmm``, ``aten::baddbmm``, ``aten::linear``, ``aten::matmul``, ``aten::_scaled_mm``)
  with their ``Input Dims`` and ``Input type``; ``m``, ``n``, ``k`` and ``batch`` from the
  operands' shapes (:func:`product_shape`).
* **Their kernels**: each GPU kernel (``cat: kernel``) is linked to the CPU call that
  launched it by its ``correlation`` id (the ``cuda_runtime`` or ``cuda_driver`` event of the
  same id, else the start of the flow event of that id), and to the innermost product op
  running on that thread at that instant; a kernel without a launch event in the trace is
  linked by its ``External id`` to the product op of that id.  A product's time is the sum of
  its kernels' durations (a GEMM and its split-K reduction).
* **Precision**: ``c10::BFloat16`` bf16, ``c10::Half`` fp16, ``c10::Float8_*`` fp8,
  ``float`` fp32 -- or tf32 when any float product ran a TF32 tensor-core kernel (``tf32``,
  ``s1688`` in its name: the math mode is the process's, so all of them did).
* **Other work**: attention kernels (``flash``, ``fmha``, ``attention`` in the name), NCCL
  kernels, the optimizer's kernels (``multi_tensor_apply``, ``Adam``, ``_adam`` in the name),
  memory copies and sets, and every other kernel (:data:`ELEMENTWISE`: element-wise, norms,
  reductions) -- counted and timed; the last are the memory-bound work
  :mod:`.memory_fit` fits the memory efficiency to, and each attention kernel is kept with
  its name and time (:attr:`Profile.attention`) for :mod:`.attention_fit`.  Transformer
  Engine's fp8 casts and transposes (``cast_transpose_*``, ``transpose_*`` kernels) are
  element-wise kernels here: clustersim lists them among an fp8 run's memory-bound operations
  (:mod:`clustersim.model.fp8_casts`), so the fit weighs them on both sides; a kind of their
  own, left out of the measured time, would leave them priced and unmeasured.
* **Steps**: the ``ProfilerStep#N`` annotations ``prof.step()`` leaves (0 when there are
  none); and whether the trace holds backward work: autograd's CPU ops
  (``autograd::engine::evaluate_function: ...``, ``...Backward0``), counted.
* **The device**: ``deviceProperties`` (name, memory) of the GPU the kernels ran on; a trace
  of several GPUs keeps the one with the most kernels.

Units: seconds (Kineto's microseconds converted), FLOPs.  Problems are ScenarioErrors naming
the file.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Problem, ScenarioError

PRODUCT_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::linear",
    "aten::matmul",
    "aten::_scaled_mm",
)
"""CPU ops whose kernels are matrix products."""
DTYPES = {
    "c10::bfloat16": "bf16",
    "c10::half": "fp16",
    "float": "fp32",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
}
"""``Input type`` (lower case) -> the precision clustersim prices it at."""
TF32_KERNEL = re.compile(r"tf32|s1688|s16816", re.IGNORECASE)
"""A kernel name of a TF32 tensor-core GEMM (cuBLAS, CUTLASS)."""
ATTENTION_KERNEL = re.compile(r"flash|fmha|attention", re.IGNORECASE)
"""A kernel name of fused attention (FlashAttention, cuDNN/CUTLASS FMHA, SDPA)."""
OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply|Adam|_adam")
"""A kernel name of an optimizer step (PyTorch's fused and foreach optimizers, Apex's);
case-sensitive, so that ``hadamard`` is not one."""
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")
"""The name of a CPU op of autograd's backward pass (``autograd::engine::evaluate_function:
MmBackward0``, ``MmBackward0``)."""
STEP = re.compile(r"^ProfilerStep#\d+$")
"""The name of the annotation ``torch.profiler``'s ``prof.step()`` puts around each step."""
ELEMENTWISE = "other kernels (element-wise, norms, reductions, ...)"
"""The kind of the kernels that are neither products, attention, NCCL, the optimizer's,
nor copies: the memory-bound work of the layers."""
ATTENTION = "attention kernels"
"""The kind of the fused attention kernels."""
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
"""Categories of the CPU-side events that launch kernels."""
MAX_BYTES = 1024**3
"""Largest trace read (after decompression), bytes."""
RECORD_SHAPES = "profile with torch.profiler.profile(record_shapes=True, activities=[CPU, CUDA])"


@dataclass(frozen=True)
class Product:
    """One matrix product of the trace: its shape, precision and GPU time."""

    op: str
    """The CPU op (``aten::mm``)."""
    m: int
    n: int
    k: int
    batch: int
    precision: str
    """``bf16``, ``fp16``, ``fp32``, ``tf32`` or ``fp8``."""
    time_s: float
    """Its kernels' GPU time, summed (s)."""
    kernels: tuple[str, ...]
    """Names of its kernels."""

    @property
    def flops(self) -> float:
        """2 batch m n k."""
        return 2.0 * self.batch * self.m * self.n * self.k


@dataclass
class Profile:
    """What a trace holds for a calibration (see the module docstring)."""

    file: str
    device: str
    """The GPU's name as CUDA reports it (``NVIDIA A100-SXM4-80GB``), or empty."""
    memory_bytes: float
    """Its memory (``totalGlobalMem``), or 0."""
    products: list[Product]
    unshaped: int = 0
    """Product ops with kernels but no ``Input Dims``."""
    other: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Kind of GPU work (``attention``, ``communication``, ``memory copies``, ``other
    kernels``) -> (count, seconds)."""
    notes: list[str] = field(default_factory=list)
    """What the reader chose that the user should know (tf32, a GPU kept of several)."""
    steps: int = 0
    """Training steps the trace marks (distinct ``ProfilerStep#N`` annotations; 0: none)."""
    attention: tuple[tuple[str, float], ...] = ()
    """Each fused attention kernel (:data:`ATTENTION_KERNEL`): its name and seconds, in the
    order they ran (what :mod:`.attention_fit` fits the attention core to)."""
    backward_ops: int = 0
    """CPU ops of autograd's backward pass (:data:`BACKWARD_OP`); 0 for a trace of forward
    passes alone (or one recorded without its CPU ops' names)."""

    @property
    def product_s(self) -> float:
        """GPU seconds of the products."""
        return sum(p.time_s for p in self.products)


def _fail(file: str, message: str, allowed: str) -> ScenarioError:
    return ScenarioError(Problem("trace", message, allowed), file)


def load_document(path: Path) -> Any:
    """The JSON document of ``path`` (gzipped or not); ScenarioError if it is neither."""
    file = str(path)
    allowed = "a PyTorch profiler trace (.json or .json.gz)"
    try:
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "no such file"
            raise _fail(file, what, allowed)
        if path.stat().st_size > MAX_BYTES:
            raise _fail(file, "is larger than 1 GiB", "a trace of one training step")
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            with gzip.open(path) as stream:
                raw = stream.read(MAX_BYTES + 1)
    except (OSError, EOFError, ValueError) as exc:
        raise _fail(file, f"cannot be read ({exc})", "a readable .json or .json.gz") from None
    if len(raw) > MAX_BYTES:
        raise _fail(file, "is larger than 1 GiB", "a trace of one training step")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(
            file, f"not JSON ({exc.__class__.__name__})", "a Kineto trace (.json or .json.gz)"
        ) from None


def read_profile(path: str | Path) -> Profile:
    """The products and other GPU work of the trace at ``path`` (see the module docstring).
    ScenarioError for a file that is not a Kineto trace, one without GPU kernels, or one
    whose products carry no shapes."""
    path = Path(path)
    file = str(path)
    doc = load_document(path)
    events = doc.get("traceEvents") if isinstance(doc, Mapping) else doc
    if not isinstance(events, list):
        raise _fail(
            file,
            "not a Kineto trace (neither a traceEvents list nor a list of events)",
            "the JSON torch.profiler writes (export_chrome_trace, tensorboard_trace_handler)",
        )
    complete = [e for e in events if isinstance(e, Mapping) and e.get("ph") == "X"]
    kernels = [e for e in complete if e.get("cat") == "kernel" and _timed(e)]
    if not kernels:
        raise _fail(
            file,
            "has no GPU kernels (a CPU-only trace?)",
            "a trace with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU",
        )
    notes: list[str] = []
    device = _device(kernels, notes)
    kernels = [k for k in kernels if (k.get("args") or {}).get("device", device) == device]
    ops = [e for e in complete if e.get("name") in PRODUCT_OPS and _timed(e)]
    if not ops:
        raise _fail(
            file,
            "has no matrix products (aten::mm, addmm, bmm, linear, matmul ops)",
            "a trace of a training step with its CPU ops (ProfilerActivity.CPU)",
        )
    owner = _link(events, complete, kernels, ops)
    products, unshaped, precisions = _products(ops, kernels, owner)
    if not products:
        raise _fail(file, "its matrix products carry no shapes (no Input Dims)", RECORD_SHAPES)
    products = _tf32(products, notes)
    linked = {id(k) for k in kernels if id(k) in owner}
    props = _properties(doc, device) if isinstance(doc, Mapping) else {}
    return Profile(
        file,
        str(props.get("name", "")),
        float(props.get("totalGlobalMem", 0) or 0),
        products,
        unshaped,
        _other(kernels, linked, complete),
        notes + precisions,
        len({e["name"] for e in complete if STEP.match(str(e.get("name", "")))}),
        _attention(kernels, linked),
        sum(1 for e in complete if BACKWARD_OP.search(str(e.get("name", "")))),
    )


def _timed(event: Mapping[str, Any]) -> bool:
    return all(
        isinstance(event.get(k), (int, float)) and math.isfinite(event[k]) for k in ("ts", "dur")
    )


def _device(kernels: list[Mapping[str, Any]], notes: list[str]) -> Any:
    """The device most kernels ran on (a note when there are others)."""
    counts = Counter((k.get("args") or {}).get("device") for k in kernels)
    device, _ = counts.most_common(1)[0]
    if len(counts) > 1:
        notes.append(
            f"kernels on {len(counts)} devices: device {device} read ({counts[device]} kernels)"
        )
    return device


def _properties(doc: Mapping[str, Any], device: Any) -> Mapping[str, Any]:
    props = doc.get("deviceProperties")
    if not isinstance(props, list):
        return {}
    found = [p for p in props if isinstance(p, Mapping) and p.get("id") == device]
    return found[0] if found else (props[0] if props and isinstance(props[0], Mapping) else {})


def _link(
    events: list[Any],
    complete: list[Mapping[str, Any]],
    kernels: list[Mapping[str, Any]],
    ops: list[Mapping[str, Any]],
) -> dict[int, Mapping[str, Any]]:
    """Kernel (by ``id``) -> the product op that launched it, where one did."""
    launches: dict[Any, tuple[Any, Any, float]] = {}
    for e in events:
        if isinstance(e, Mapping) and e.get("ph") == "s" and "id" in e and _has_ts(e):
            launches.setdefault(e["id"], (e.get("pid"), e.get("tid"), e["ts"]))
    for e in complete:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in LAUNCH_CATEGORIES and corr is not None:
            launches[corr] = (e.get("pid"), e.get("tid"), e["ts"])
    threads: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for op in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        threads.setdefault((op.get("pid"), op.get("tid")), []).append(op)
    starts = {key: [op["ts"] for op in chain] for key, chain in threads.items()}
    longest = max(op["dur"] for op in ops)
    by_external = {(op.get("args") or {}).get("External id"): op for op in ops}
    by_external.pop(None, None)
    owner: dict[int, Mapping[str, Any]] = {}
    for kernel in kernels:
        args = kernel.get("args") or {}
        launch = launches.get(args.get("correlation"))
        if launch is None:
            found = by_external.get(args.get("External id"))
        else:
            pid, tid, ts = launch
            chain = threads.get((pid, tid), [])
            found = _innermost(chain, starts.get((pid, tid), []), ts, longest)
        if found is not None:
            owner[id(kernel)] = found
    return owner


def _has_ts(event: Mapping[str, Any]) -> bool:
    return isinstance(event.get("ts"), (int, float))


def _innermost(
    chain: Sequence[Mapping[str, Any]], starts: Sequence[float], ts: float, longest: float
) -> Mapping[str, Any] | None:
    """The op of ``chain`` (by start) running at ``ts`` that started last."""
    i = bisect_right(starts, ts) - 1
    while i >= 0 and chain[i]["ts"] + longest >= ts:
        if chain[i]["ts"] + chain[i]["dur"] >= ts:
            return chain[i]
        i -= 1
    return None


def _products(
    ops: list[Mapping[str, Any]],
    kernels: list[Mapping[str, Any]],
    owner: Mapping[int, Mapping[str, Any]],
) -> tuple[list[Product], int, list[str]]:
    """The shaped products with kernels, the count of those without shapes, and notes on
    products of types clustersim has no precision for."""
    launched: dict[int, list[Mapping[str, Any]]] = {}
    for kernel in kernels:
        op = owner.get(id(kernel))
        if op is not None:
            launched.setdefault(id(op), []).append(kernel)
    out, unshaped, skipped = [], 0, Counter()
    for op in sorted(ops, key=lambda e: e["ts"]):
        mine = launched.get(id(op))
        if not mine:
            continue
        args = op.get("args") or {}
        shape = product_shape(str(op["name"]), args.get("Input Dims"))
        if shape is None:
            unshaped += 1
            continue
        types = args.get("Input type") or []
        kind = str(types[1] if op["name"] in ("aten::addmm", "aten::baddbmm") else types[0])
        precision = DTYPES.get(kind.lower()) if types else None
        if precision is None:
            skipped[kind] += 1
            continue
        seconds = sum(k["dur"] for k in mine) * 1e-6
        names = tuple(str(k.get("name", "")) for k in mine)
        out.append(Product(str(op["name"]), *shape, precision, seconds, names))
    notes = [f"{n} products of type {kind!r} left out" for kind, n in sorted(skipped.items())]
    return out, unshaped, notes


def _dims(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(d, int) and d > 0 for d in value):
        return value
    return None


def product_shape(op: str, dims: Any) -> tuple[int, int, int, int] | None:
    """``(m, n, k, batch)`` of the product ``op`` from its ``Input Dims`` (None where they are
    missing or not those of a product)."""
    if not isinstance(dims, list):
        return None
    if op in ("aten::addmm", "aten::baddbmm"):
        dims = dims[1:]
    shapes = [_dims(d) for d in dims[:2]]
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    a, b = shapes
    if op == "aten::linear":  # input [..., k], weight [n, k]
        if len(b) != 2 or a[-1] != b[1]:
            return None
        return math.prod(a[:-1]), b[0], a[-1], 1
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    if len(b) == 2:  # mm, addmm, _scaled_mm, matmul by a matrix: the batch folds into m
        return math.prod(a[:-1]), b[-1], a[-1], 1
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    return a[-2], b[-1], a[-1], batch


def _tf32(products: list[Product], notes: list[str]) -> list[Product]:
    """fp32 products as tf32 where any ran a TF32 tensor-core kernel."""
    fp32 = [p for p in products if p.precision == "fp32"]
    tensor = next((n for p in fp32 for n in p.kernels if TF32_KERNEL.search(n)), None)
    if tensor is None:
        return products
    notes.append(
        f"fp32 products ran TF32 tensor-core kernels ({_short(tensor)}): all priced as tf32, "
        "the math mode being the process's"
    )
    return [
        Product(p.op, p.m, p.n, p.k, p.batch, "tf32", p.time_s, p.kernels)
        if p.precision == "fp32"
        else p
        for p in products
    ]


def _short(name: str) -> str:
    """The word of a kernel's name that says it is TF32 (``cutlass_80_tensorop_s1688gemm_...``)."""
    found = re.search(r"\w*(?:tf32|s1688|s16816)\w*", name, re.IGNORECASE)
    return found.group(0) if found else name[:60]


def _kind(name: str) -> str:
    """The kind of GPU work a kernel of no product op is, by its name."""
    if name.lower().startswith("nccl"):
        return "communication (NCCL)"
    if ATTENTION_KERNEL.search(name):
        return ATTENTION
    if OPTIMIZER_KERNEL.search(name):
        return "optimizer kernels (multi_tensor_apply, Adam)"
    return ELEMENTWISE


def _attention(kernels: list[Mapping[str, Any]], linked: set[int]) -> tuple[tuple[str, float], ...]:
    """(name, seconds) of each fused attention kernel no product op launched, by start."""
    found = [
        (kernel["ts"], str(kernel.get("name", "")), kernel["dur"] * 1e-6)
        for kernel in kernels
        if id(kernel) not in linked and _kind(str(kernel.get("name", ""))) == ATTENTION
    ]
    return tuple((name, seconds) for _, name, seconds in sorted(found))


def _other(
    kernels: list[Mapping[str, Any]], linked: set[int], complete: list[Mapping[str, Any]]
) -> dict[str, tuple[int, float]]:
    """GPU work besides the products: kind -> (count, seconds)."""
    kinds: dict[str, list[float]] = {}
    for kernel in kernels:
        if id(kernel) in linked:
            continue
        kind = _kind(str(kernel.get("name", "")))
        kinds.setdefault(kind, []).append(kernel["dur"] * 1e-6)
    copies = [e["dur"] * 1e-6 for e in complete if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    if copies:
        kinds["memory copies and sets"] = copies
    return {kind: (len(times), sum(times)) for kind, times in sorted(kinds.items())}
