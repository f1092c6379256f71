"""``tp_mode: 2d`` -- Optimus (Xu et al. 2021, "An Efficient 2D Method for Training
Super-Large Deep Learning Models"): SUMMA on a q x q grid, p = q^2.

GPU (i, j) (position ``i q + j``) holds block (i, j) of every activation ``X [M, K]`` and
of every weight ``W [K, N]``.  A product ``Y = X W`` is SUMMA's q steps (the paper's
forward algorithm): in step k every row broadcasts its column-k block of X
(``M K / q^2`` values) and every column its row-k block of W (``K N / q^2``).  The
backward runs the two transposed SUMMAs:

* ``dX = dY W^T``: per step a column broadcast of a W block (``K N / q^2``) and a row
  reduce of the partial dX block (``M K / q^2``);
* ``dW = X^T dY``: per step a row broadcast of an X block (``M K / q^2``) and a column
  reduce of the partial dW block (``K N / q^2``).

So per linear layer and GPU: forward ``q`` row broadcasts of ``M K / q^2`` and ``q``
column broadcasts of ``K N / q^2`` values -- ``(M K + K N) / q`` values in all -- and
the backward twice that, half of it reduces.  Parameters and activations divide by p;
the heads split over the q columns.  The broadcast root rotates with k in SUMMA; the
timer prices every step with the sub-group's first GPU as root.  Units: bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...errors import Problem
from .base import BACKWARD_PASS, GridCollective, TensorParallelMode, linear_shapes

if TYPE_CHECKING:
    from ...model.layers import Layer, Model


def summa_collectives(
    m: float, k: float, n: float, q: int, phase: str, value: float, depth: int = 1
) -> list[GridCollective]:
    """SUMMA's collectives for ``[m, k] x [k, n]`` on a q x q grid (``m`` already divided
    by ``depth`` for Tesseract), one GPU's view, ``value`` bytes per value."""
    x_block = m * k / (q * q) * value
    w_block = k * n / (q * q) * value
    if phase == BACKWARD_PASS:
        step = [
            GridCollective("broadcast", "column", w_block),
            GridCollective("reduce", "row", x_block),
            GridCollective("broadcast", "row", x_block),
            GridCollective("reduce", "column", w_block),
        ]
    else:
        step = [
            GridCollective("broadcast", "row", x_block),
            GridCollective("broadcast", "column", w_block),
        ]
    return step * q


def square_root(n: int) -> int | None:
    """q with q^2 = n, or None."""
    q = math.isqrt(n)
    return q if q * q == n else None


class Optimus2D(TensorParallelMode):
    """Optimus' 2-D split: SUMMA over a q x q grid."""

    name = "2d"
    description = "Optimus (Xu et al. 2021): SUMMA on a q x q grid, p = q^2"

    @classmethod
    def problems(cls, tp: int, depth: int, heads: int | None) -> list[Problem]:
        out = super().problems(tp, depth, heads)
        q = square_root(tp)
        if q is None:
            squares = ", ".join(str(i * i) for i in range(2, 6))
            out.append(
                Problem(
                    "parallelism.tp",
                    f"tp_mode 2d runs on a q x q grid; tp {tp} is not a square",
                    f"a square: {squares}, ...",
                )
            )
        else:
            out += filter(None, [cls.heads_problem(heads, q, "tp_mode 2d")])
        return out

    @property
    def q(self) -> int:
        return square_root(self.tp) or 1

    @property
    def grid(self) -> list[int]:
        return [self.q, self.q]

    def axes(self) -> dict[str, list[list[int]]]:
        q = self.q
        return {
            "row": [[i * q + j for j in range(q)] for i in range(q)],
            "column": [[i * q + j for i in range(q)] for j in range(q)],
        }

    def layer_collectives(
        self,
        layer: Layer,
        model: Model,
        samples: float,
        *,
        phase: str,
        bytes_per_value: float,
        sequence_parallel: bool = False,
    ) -> tuple[GridCollective, ...]:
        tokens = samples * model.transformer.seq if model.transformer else 0.0
        out: list[GridCollective] = []
        for k, n in linear_shapes(model, layer):
            out += summa_collectives(tokens, k, n, self.q, phase, bytes_per_value)
        return tuple(out)
