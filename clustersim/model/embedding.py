"""Sparse embedding tables: the layer, and the expected unique rows a batch touches.

A scenario's ``model.embedding: {rows, dim, lookups_per_sample, distribution, tables}``
puts ``tables`` identical tables of ``rows x dim`` parameters in front of the model's
layers (a DLRM-like recommender: the tables, then the dense MLPs).  Each sample looks up
``lookups_per_sample`` rows of each table, drawn i.i.d. from the row distribution
``p_i`` (rank ``i = 1 .. rows``): uniform, ``p_i = 1 / rows``; ``{zipf: s}``,
``p_i = i^-s / H(rows, s)`` with ``H(N, s) = sum_{j=1}^{N} j^-s`` (rank 1, row 0, the
hottest).

**The layer** (named ``embedding``, or ``sparse_embedding`` when the model already has a
layer of that name, e.g. a transformer's token embedding) holds ``tables x rows x dim``
parameters and is memory-bound, costed in bytes over the device's memory bandwidth,
never in FLOPs: forward gathers ``tables x lookups x dim`` fp32 values per sample
(:data:`ROW_VALUE_BYTES` each; the pooling adds are left out as for element-wise work
in :mod:`.presets`); backward writes the same number (one gradient row per lookup).  It
keeps ``tables x lookups`` int64 row ids per sample (:data:`INDEX_BYTES`) for backward.

**Expected unique rows.**  ``L`` lookups touch on average

    U(L) = sum_i [1 - (1 - p_i)^L]

distinct rows (each row is missed by all ``L`` draws with probability
``(1 - p_i)^L``); uniform: ``rows (1 - (1 - 1/rows)^L)``.  ``U(1) = 1`` and
``U(L) -> rows`` as ``L -> inf``; ``L`` may be fractional (the formula is smooth in it).
:func:`unique_rows_by_shard` gives the sum restricted to each shard of rows: ``spread``
(row ``r`` to shard ``r mod S``, as a parameter server hashing row ids spreads hot and
cold rows alike) or ``range`` (shard ``j`` holds rows ``floor(j rows / S)`` up to
``floor((j+1) rows / S) - 1``, so under Zipf shard 0 has the hot rows).

Computation: uniform by its closed form at any size; Zipf exactly (numpy, in chunks of
:data:`CHUNK` ranks, ``-expm1(L log1p(-p))`` so tiny ``p`` keep their digits) for up to
:data:`EXACT_ROWS` rows.  Larger tables: the first :data:`HEAD_ROWS` ranks exactly, the
rest by Euler-Maclaurin: ``sum_{i=a}^{b} f(i) = int_a^b f + (f(a) + f(b))/2 + (f'(b) -
f'(a))/12`` with the integral by composite Simpson in ``log x`` (:data:`SIMPSON_STEPS`
steps), and ``H`` likewise (its integral in closed form).  With ``a > 1e6`` the dropped
terms are below ``1e-15`` of a row; the Simpson error is below ``1e-9`` relative
(tests/test_ps_embedding.py holds the approximation to ``1e-9`` relative of the exact
sum).  Spread shards of a large table take an equal share of the tail: a residue class
of a decreasing ``f`` sums within ``f(a) <= 1`` row of ``1 / S`` of the whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .layers import Layer

ROW_VALUE_BYTES = 4
"""Bytes of one embedding value as a table holds it (fp32)."""
INDEX_BYTES = 8
"""Bytes of one row id kept for backward (int64)."""
EXACT_ROWS = 10_000_000
"""Largest table whose Zipf sums run exactly, term by term."""
HEAD_ROWS = 1 << 20
"""Ranks summed exactly in front of the approximated tail of a larger table."""
CHUNK = 1 << 20
"""Ranks per numpy chunk."""
SIMPSON_STEPS = 4096
"""Steps (even) of the Simpson rule over ``log x`` for a tail integral."""

SHARDINGS = ("spread", "range")
"""How rows map to shards (see the module docstring)."""


@dataclass(frozen=True)
class EmbeddingTable:
    """``tables`` identical tables of ``rows x dim``, ``lookups`` rows per sample each,
    rows drawn with Zipf exponent ``zipf`` (0: uniform)."""

    rows: int
    dim: int
    lookups: int
    zipf: float
    tables: int = 1

    @classmethod
    def from_spec(cls, spec: Any) -> EmbeddingTable:
        """From a scenario's :class:`~clustersim.scenario.training.EmbeddingSpec`."""
        return cls(spec.rows, spec.dim, spec.lookups_per_sample, spec.zipf, spec.tables)

    @property
    def params(self) -> float:
        """Parameters of every table."""
        return float(self.tables * self.rows * self.dim)

    def layer(self, name: str = "embedding") -> Layer:
        """The model layer (see the module docstring)."""
        gathered = self.tables * self.lookups * self.dim * ROW_VALUE_BYTES
        return Layer(
            name,
            self.params,
            0.0,
            0.0,
            float(self.tables * self.lookups * INDEX_BYTES),
            kind="sparse_embedding",
            forward_bytes=float(gathered),
            backward_bytes=float(gathered),
        )

    def unique_rows(self, samples: float) -> float:
        """Expected unique rows ``samples`` samples touch, over every table."""
        return self.tables * unique_rows(self.rows, self.zipf, samples * self.lookups)


def shard_sizes(rows: int, shards: int, sharding: str) -> list[int]:
    """Rows of each shard."""
    if sharding == "spread":
        base, extra = divmod(rows, shards)
        return [base + (j < extra) for j in range(shards)]
    return [(j + 1) * rows // shards - j * rows // shards for j in range(shards)]


def unique_rows(rows: int, s: float, lookups: float) -> float:
    """``U(L)``: expected unique rows ``lookups`` i.i.d. lookups touch (module docstring)."""
    return math.fsum(unique_rows_by_shard(rows, s, lookups, 1, "spread"))


@lru_cache(maxsize=256)
def unique_rows_by_shard(
    rows: int,
    s: float,
    lookups: float,
    shards: int,
    sharding: str,
    exact_rows: int = EXACT_ROWS,
    head_rows: int = HEAD_ROWS,
) -> tuple[float, ...]:
    """Expected unique rows of each of ``shards`` shards (``spread`` or ``range``) that
    ``lookups`` lookups touch; exact up to ``exact_rows`` rows, else ``head_rows`` ranks
    exactly and the tail approximated (module docstring)."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r} is not one of {SHARDINGS}")
    sizes = shard_sizes(rows, shards, sharding)
    if s == 0:
        hit = -math.expm1(lookups * math.log1p(-1.0 / rows)) if rows > 1 else 1.0
        return tuple(n * hit for n in sizes)
    exact = rows <= exact_rows
    head = rows if exact else min(head_rows, rows)
    c = 1.0 / harmonic(rows, s, exact_rows, head_rows)
    out = _exact(1, head + 1, rows, s, c, lookups, shards, sharding)
    if exact:
        return tuple(float(x) for x in out)
    a = head + 1
    if sharding == "spread":
        tail = _tail_sum(a, rows, s, c, lookups)
        return tuple(float(x) + tail / shards for x in out)
    ends = np.cumsum([0, *sizes])  # shard j: ranks ends[j] + 1 .. ends[j + 1]
    return tuple(
        float(out[j]) + _tail_sum(max(a, int(ends[j]) + 1), int(ends[j + 1]), s, c, lookups)
        for j in range(shards)
    )


def _hit(i: np.ndarray, s: float, c: float, lookups: float) -> np.ndarray:
    """``1 - (1 - p_i)^L`` at ranks ``i`` (float array), ``p_i = c i^-s``."""
    p = np.minimum(c * i**-s, 1.0)
    with np.errstate(divide="ignore"):
        return -np.expm1(lookups * np.log1p(-p))


def _exact(
    lo: int, hi: int, rows: int, s: float, c: float, lookups: float, shards: int, sharding: str
) -> np.ndarray:
    """Per shard, the exact sum of the hits of ranks ``lo .. hi - 1``."""
    out = np.zeros(shards)
    for start in range(lo, hi, CHUNK):
        ranks = np.arange(start, min(hi, start + CHUNK), dtype=np.int64)
        if sharding == "spread":
            shard = (ranks - 1) % shards
        else:  # row r in shard j iff floor(j rows / S) <= r < floor((j+1) rows / S)
            shard = (ranks * shards - 1) // rows
        out += np.bincount(
            shard, weights=_hit(ranks.astype(float), s, c, lookups), minlength=shards
        )
    return out


def _tail_sum(a: int, b: int, s: float, c: float, lookups: float) -> float:
    """``sum_{i=a}^{b} (1 - (1 - c i^-s)^L)`` by Euler-Maclaurin (exact when short)."""
    if b < a:
        return 0.0
    if b - a < CHUNK:
        return float(_exact(a, b + 1, b, s, c, lookups, 1, "spread")[0])
    u = np.linspace(math.log(a), math.log(b), SIMPSON_STEPS + 1)
    x = np.exp(u)
    g = x * _hit(x, s, c, lookups)
    weights = np.ones(SIMPSON_STEPS + 1)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    integral = float(weights @ g) * (u[1] - u[0]) / 3.0

    def f(i: float) -> float:
        return float(_hit(np.array([i]), s, c, lookups)[0])

    def df(i: float) -> float:  # d/dx [1 - (1 - c x^-s)^L]
        p = c * i**-s
        return -lookups * s * p / i * math.exp((lookups - 1) * math.log1p(-p))

    return integral + (f(a) + f(b)) / 2 + (df(b) - df(a)) / 12


def harmonic(
    rows: int, s: float, exact_rows: int = EXACT_ROWS, head_rows: int = HEAD_ROWS
) -> float:
    """``H(rows, s) = sum_{i=1}^{rows} i^-s``: exact up to ``exact_rows``, else the first
    ``head_rows`` terms and Euler-Maclaurin for the rest."""
    head = rows if rows <= exact_rows else min(head_rows, rows)
    total = math.fsum(
        float(np.sum(np.arange(start, min(head + 1, start + CHUNK), dtype=float) ** -s))
        for start in range(1, head + 1, CHUNK)
    )
    if head == rows:
        return total
    a, n = float(head + 1), float(rows)
    if s == 1:
        integral = math.log(n / a)
    else:
        integral = a ** (1 - s) * math.expm1((1 - s) * math.log(n / a)) / (1 - s)
    return total + integral + (a**-s + n**-s) / 2 + s * (a ** (-s - 1) - n ** (-s - 1)) / 12
