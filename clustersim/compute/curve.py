"""The efficiency of a matrix product by its size, and its calibration from measured kernels.

A matrix product of ``F`` FLOPs (``F = 2 batch m n k``) reaches the fraction::

    eff(F) = e_max x F / (F + F_half)

of the device's peak: ``e_max`` is the ceiling of large products (cuBLAS's best), ``F_half``
the size at which half of it is reached.  Equivalently its time is
``F / (peak e_max) + F_half / (peak e_max)``: a rate and a fixed cost per kernel (launch,
ramp-up, the last partial wave), the alpha-beta form of a kernel.  Fitted to OpenXLA's
measured H100 bf16 table (scenarios/kernels/h100_bf16_xla.csv) this form is within 12.5%
(root mean square of the log ratio) of the 41 measured shapes; the cube root of m n k or
the smallest dimension as the size were worse (62% and 92%).

:func:`read_kernels` reads a CSV of measured kernels (columns ``m,n,k,dtype`` and one of
``tflops`` (TFLOP/s) or ``seconds``; ``batch`` optional, default 1; ``#`` lines are comments)
and :func:`fit_curve` fits ``(e_max, F_half)`` by least squares on the log of the efficiency
(or ``F_half`` alone, ``e_max`` held).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, ScenarioError

DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
"""Kernel data types a kernels file may name."""
REQUIRED = ("m", "n", "k", "dtype")
"""Columns every kernels file has (plus ``tflops`` or ``seconds``)."""
MAX_ROWS = 100_000
"""Largest number of kernels a file may hold."""


@dataclass(frozen=True, slots=True)
class EfficiencyCurve:
    """``eff(F) = e_max F / (F + half_flops)``: the fraction of peak a product of F FLOPs reaches."""

    e_max: float
    """Ceiling: the fraction of peak of very large products (0 < e_max <= 1)."""
    half_flops: float
    """FLOPs of the product that reaches e_max / 2 (>= 0; 0 = no size effect)."""

    def __call__(self, flops: float) -> float:
        """Fraction of peak reached by one product of ``flops`` FLOPs."""
        if flops <= 0:
            return self.e_max
        return self.e_max * flops / (flops + self.half_flops)


def curve_at(e_max: float, kernel_s: float, peak_flops: float) -> EfficiencyCurve:
    """The curve of a device of peak ``peak_flops`` (FLOP/s) whose large products reach ``e_max``
    of it and whose every product pays a fixed ``kernel_s`` seconds (launch, ramp-up, last
    wave): ``F_half = kernel_s x e_max x peak`` -- the FLOPs done in that time at the ceiling."""
    return EfficiencyCurve(e_max, kernel_s * e_max * peak_flops)


A100_MAMF_TFLOPS = 271.2
"""Maximum achievable bf16 matmul TFLOP/s of an A100 SXM (Bekman, "Machine Learning
Engineering", compute/accelerator/README.md, Maximum Achievable Matmul FLOPS table:
1024x10240x5120, torch 2.6.0+cu126)."""
A100_PEAK_TFLOPS = 312.0
"""Dense bf16 peak of an A100 SXM, TFLOP/s (NVIDIA A100 datasheet; docs/hardware.md)."""
H100_KERNEL_OVERHEAD_S = 6.7e-6
"""Fixed cost of one product, s: F_half / (peak e_max) of the curve fitted to the H100 table
(F_half 5.10e9 FLOPs, e_max 0.767, peak 989 TFLOP/s)."""
DEFAULT_CURVE = curve_at(
    A100_MAMF_TFLOPS * 1e12 / (A100_PEAK_TFLOPS * 1e12),
    H100_KERNEL_OVERHEAD_S,
    A100_PEAK_TFLOPS * 1e12,
)
"""The built-in curve (A100 bf16): e_max = 271.2 / 312 = 0.869 (the A100's MAMF), and the
H100 table's fixed kernel cost, 6.7 us, at that rate: F_half = 1.82e9 FLOPs.  The catalog's
A100 presets (``a100-sxm4-80gb``, ``a100-sxm4-40gb``; docs/hardware.md) give exactly this curve.
Give ``compute.kernels`` to calibrate on measured shapes instead."""


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One measured product: its shape and the fraction of peak it reached."""

    m: int
    n: int
    k: int
    batch: int
    dtype: str
    seconds: float

    @property
    def flops(self) -> float:
        """FLOPs of the product: 2 batch m n k."""
        return 2.0 * self.batch * self.m * self.n * self.k


def _problem(path: str, source: str, message: str, allowed: str) -> ScenarioError:
    return ScenarioError(Problem(path, f"{source}: {message}", allowed))


def _number(text: str, where: str, column: str, path: str, integer: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    ok = math.isfinite(value) and value > 0 and (not integer or value == int(value))
    if not ok:
        kind = "a whole number above 0" if integer else "a finite number above 0"
        raise _problem(path, where, f"column {column} is {text!r}", kind)
    return value


def read_kernels(file: str | Path, peak_flops: float, path: str = "") -> list[KernelSample]:
    """The kernels of the CSV ``file`` (a ScenarioError at key ``path`` naming the file, row
    and column of anything wrong).  ``tflops`` rows become seconds with their FLOPs."""
    name = str(file)
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        message = f"cannot be read ({exc.__class__.__name__})"
        raise _problem(path, name, message, "a CSV file") from None
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    numbered = [(i, line) for i, line in numbered if not line.lstrip().startswith("#")]
    if not numbered:
        raise _problem(path, name, "has no header", "m,n,k,dtype and tflops or seconds")
    header = [c.strip() for c in next(csv.reader([numbered[0][1]]))]
    missing = [c for c in REQUIRED if c not in header]
    timing = [c for c in ("tflops", "seconds") if c in header]
    if missing or len(timing) != 1:
        what = f"missing {', '.join(missing)}" if missing else "needs one of tflops or seconds"
        raise _problem(
            path,
            f"{name} line {numbered[0][0]}",
            f"header {what}",
            ", ".join((*REQUIRED, "tflops | seconds", "batch (optional)")),
        )
    rows = numbered[1:]
    if not rows or len(rows) > MAX_ROWS:
        raise _problem(path, name, f"has {len(rows)} kernels", f"1 to {MAX_ROWS}")
    out = []
    for line_no, line in rows:
        cells = [c.strip() for c in next(csv.reader([line]))]
        where = f"{name} line {line_no}"
        if len(cells) != len(header):
            raise _problem(path, where, f"{len(cells)} cells", f"{len(header)} (as the header)")
        row = dict(zip(header, cells, strict=True))
        m, n, k = (int(_number(row[c], where, c, path, True)) for c in ("m", "n", "k"))
        batch = int(_number(row["batch"], where, "batch", path, True)) if "batch" in row else 1
        if row["dtype"] not in DTYPES:
            raise _problem(path, where, f"dtype {row['dtype']!r}", " | ".join(DTYPES))
        value = _number(row[timing[0]], where, timing[0], path, False)
        flops = 2.0 * batch * m * n * k
        seconds = value if timing[0] == "seconds" else flops / (value * 1e12)
        if flops / seconds > peak_flops * 1.0001:
            raise _problem(
                path,
                where,
                f"{flops / seconds / 1e12:.4g} TFLOP/s is above the peak",
                f"at most the device's flops ({peak_flops / 1e12:.4g} TFLOP/s)",
            )
        out.append(KernelSample(m, n, k, batch, row["dtype"], seconds))
    return out


def fit_curve(
    samples: Sequence[KernelSample], peak_flops: float, e_max: float | None = None
) -> EfficiencyCurve:
    """The curve closest to ``samples`` in the log of the efficiency (least squares):
    for each ``F_half`` on a log grid, ``log e_max`` is the mean residual (or ``e_max`` is
    held at the value given); the best pair wins.  Deterministic; ``F_half`` = 0 when every
    kernel is at the same efficiency."""
    flops = [s.flops for s in samples]
    logs = [math.log(s.flops / s.seconds / peak_flops) for s in samples]

    def error(half: float) -> tuple[float, float]:
        shape = [math.log(f / (f + half)) for f in flops]
        level = sum(lg - sh for lg, sh in zip(logs, shape, strict=True)) / len(logs)
        if e_max is not None:
            level = math.log(e_max)
        sq = sum((lg - sh - level) ** 2 for lg, sh in zip(logs, shape, strict=True))
        return sq, level

    lo, hi = math.log(min(flops) / 1e3), math.log(max(flops) * 1e3)
    grid = [0.0] + [math.exp(lo + (hi - lo) * i / 2000) for i in range(2001)]
    best = min(grid, key=lambda half: error(half)[0])
    level = error(best)[1]
    return EfficiencyCurve(min(1.0, math.exp(level)), best)
