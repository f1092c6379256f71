"""``tp_mode: 3d`` -- Bian et al. 2021 ("Maximizing Parallelism in Distributed Training
for Huge Neural Networks"): a q x q x q cube, p = q^3.

Every activation ``X [M, K]`` and weight ``W [K, N]`` is spread evenly over the p GPUs
(``M K / q^3`` and ``K N / q^3`` values each).  The three axes of the cube play three
roles for a product ``Y = X W``: GPUs along the *input* axis share a block of X, along the
*weight* axis a block of W, along the *output* axis a block of Y.  Forward, per GPU:

* all-gather X over the input axis (S = ``M K / q^2`` values),
* all-gather W over the weight axis (S = ``K N / q^2``),
* multiply, then reduce-scatter the partial Y over the output axis (S = ``M N / q^2``).

Backward: all-gather dY over the output axis (``M N / q^2``), reduce-scatter dX over the
input axis (``M K / q^2``) and dW over the weight axis (``K N / q^2``).  So forward and
backward each move ``(M K + K N + M N) / q^2`` values per linear (as S sizes).  The next
layer uses the output layout as its input layout (the roles of the axes rotate), which
changes no size.  Parameters and activations divide by p; the heads split over q.
Units: bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import Problem
from .base import BACKWARD_PASS, GridCollective, TensorParallelMode, linear_shapes

if TYPE_CHECKING:
    from ...model.layers import Layer, Model


def cube_root(n: int) -> int | None:
    """q with q^3 = n, or None."""
    q = round(n ** (1 / 3))
    for c in (q - 1, q, q + 1):
        if c > 0 and c**3 == n:
            return c
    return None


class Cube3D(TensorParallelMode):
    """Bian et al.'s 3-D split: all-gathers and reduce-scatters along a cube's axes."""

    name = "3d"
    description = "Bian et al. 2021: all-gather / reduce-scatter on a q x q x q cube, p = q^3"

    @classmethod
    def problems(cls, tp: int, depth: int, heads: int | None) -> list[Problem]:
        out = super().problems(tp, depth, heads)
        q = cube_root(tp)
        if q is None:
            out.append(
                Problem(
                    "parallelism.tp",
                    f"tp_mode 3d runs on a q x q x q cube; tp {tp} is not a cube",
                    "a cube: 8, 27, 64, ...",
                )
            )
        else:
            out += filter(None, [cls.heads_problem(heads, q, "tp_mode 3d")])
        return out

    @property
    def q(self) -> int:
        return cube_root(self.tp) or 1

    @property
    def grid(self) -> list[int]:
        return [self.q] * 3

    def axes(self) -> dict[str, list[list[int]]]:
        q = self.q
        rng = range(q)

        def at(i: int, j: int, k: int) -> int:
            return i * q * q + j * q + k

        return {
            "input": [[at(i, j, k) for k in rng] for i in rng for j in rng],
            "weight": [[at(i, j, k) for j in rng] for i in rng for k in rng],
            "output": [[at(i, j, k) for i in rng] for j in rng for k in rng],
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
        m = samples * model.transformer.seq if model.transformer else 0.0
        per = bytes_per_value / (self.q * self.q)
        out: list[GridCollective] = []
        for k, n in linear_shapes(model, layer):
            if phase == BACKWARD_PASS:
                out += [
                    GridCollective("allgather", "output", m * n * per),
                    GridCollective("reducescatter", "input", m * k * per),
                    GridCollective("reducescatter", "weight", k * n * per),
                ]
            else:
                out += [
                    GridCollective("allgather", "input", m * k * per),
                    GridCollective("allgather", "weight", k * n * per),
                    GridCollective("reducescatter", "output", m * n * per),
                ]
        return tuple(out)
