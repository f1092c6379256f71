"""``tp_mode: 2.5d`` -- Tesseract (Wang et al. 2021, "2.5-dimensional distributed model
training"): d layers of q x q grids, p = q^2 d (``parallelism.tp_depth`` = d).

GPU (k, i, j) (position ``k q^2 + i q + j``, depth k) holds block (k q + i, j) of every
activation -- ``X [M, K]`` is cut into ``d q x q`` blocks, so each depth layer owns
``M / d`` of the tokens -- and block (i, j) of every weight, the same on every depth
layer.  Each depth layer runs Optimus' SUMMA (:mod:`.two_d`) on its ``[M / d, K]`` slice:
per linear and GPU, forward ``q`` row broadcasts of ``M K / (d q^2)`` and ``q`` column
broadcasts of ``K N / q^2`` values; backward the transposed SUMMAs, and the weight
gradient block (``K N / q^2``) is all-reduced over the d depth layers that share it.
Parameters divide by q^2 (= p / d), activations by p.  Units: bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import Problem
from .base import BACKWARD_PASS, GridCollective, TensorParallelMode, linear_shapes
from .two_d import square_root, summa_collectives

if TYPE_CHECKING:
    from ...model.layers import Layer, Model


class Tesseract25D(TensorParallelMode):
    """Tesseract's 2.5-D split: d depth layers of SUMMA grids sharing the weights."""

    name = "2.5d"
    description = "Tesseract (Wang et al. 2021): d layers of q x q SUMMA grids, p = q^2 d"

    @classmethod
    def problems(cls, tp: int, depth: int, heads: int | None) -> list[Problem]:
        if tp % depth:
            return [
                Problem(
                    "parallelism.tp_depth",
                    f"depth {depth} does not divide tp {tp} (tp_mode 2.5d: tp = q^2 x depth)",
                    f"a divisor of {tp} leaving a square",
                )
            ]
        q = square_root(tp // depth)
        if q is None:
            return [
                Problem(
                    "parallelism.tp",
                    f"tp_mode 2.5d needs tp = q^2 x depth; tp {tp} / depth {depth} = "
                    f"{tp // depth} is not a square",
                    "q^2 x depth, e.g. 8 with depth 2 (q = 2)",
                )
            ]
        return list(filter(None, [cls.heads_problem(heads, q, "tp_mode 2.5d")]))

    @property
    def q(self) -> int:
        return square_root(self.tp // self.depth) or 1

    @property
    def grid(self) -> list[int]:
        return [self.q, self.q, self.depth]

    def axes(self) -> dict[str, list[list[int]]]:
        q, d = self.q, self.depth

        def at(k: int, i: int, j: int) -> int:
            return k * q * q + i * q + j

        rng = range(q)
        return {
            "row": [[at(k, i, j) for j in rng] for k in range(d) for i in rng],
            "column": [[at(k, i, j) for i in rng] for k in range(d) for j in rng],
            "depth": [[at(k, i, j) for k in range(d)] for i in rng for j in rng],
        }

    @property
    def param_shards(self) -> float:
        return float(self.q * self.q)

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
        q, d = self.q, self.depth
        out: list[GridCollective] = []
        for k, n in linear_shapes(model, layer):
            out += summa_collectives(tokens / d, k, n, q, phase, bytes_per_value)
            if phase == BACKWARD_PASS and d > 1:
                out.append(GridCollective("allreduce", "depth", k * n / (q * q) * bytes_per_value))
        return tuple(out)
