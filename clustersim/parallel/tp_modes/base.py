"""The base of tensor-parallel modes, their registry, and the pricing of their collectives.

A mode splits each transformer layer over a tensor-parallel group of ``p`` GPUs.  The
group's positions ``0 .. p-1`` form the mode's grid; an *axis* of the grid (``row``,
``column``, ``depth``, ...) is a partition of the positions into sub-groups that run the
same collective at once (every row broadcasts its block in the same SUMMA step).

:meth:`TensorParallelMode.layer_collectives` lists what one GPU runs for one layer and
pass: :class:`GridCollective` (op, axis, nccl-tests size S in bytes, see
:mod:`clustersim.collectives.ops`).  :class:`GridTimer` prices such a list on the actual
devices: each collective takes the alpha-beta time of the slowest sub-group of its axis
(the sub-groups run concurrently, on disjoint GPUs), and the list runs one after another.

The matrices of a layer are its linear layers (:func:`linear_shapes`): a ``[M, K] x [K, N]``
product with ``M`` = samples x sequence tokens.  Layer norm, softmax and bias statistics
need small reductions (O(M / q) values) that are neglected, as the papers' cost tables do.
Units: bytes, seconds.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...errors import Problem
from ...registry import Registered, Registry
from ..tensor_parallel import SPLIT_KINDS, CollectiveTimer

if TYPE_CHECKING:
    from ...collectives import CollectiveCall
    from ...model.layers import Layer, Model
    from ...topology import Topology

FORWARD_PASS = "fwd"
BACKWARD_PASS = "bwd"


@dataclass(frozen=True)
class GridCollective:
    """One collective a GPU runs: ``op`` over the sub-groups of ``axis``, ``size_bytes`` S."""

    op: str
    axis: str
    size_bytes: float


def linear_shapes(model: Model, layer: Layer) -> list[tuple[float, float]]:
    """The ``(K, N)`` weight shapes of ``layer``'s matrix products (empty if none splits).

    attention: QKV ``[h, h + 2 h kv/a]`` (grouped-query attention) and output ``[h, h]``;
    mlp: ``[h, f]`` (``[h, 2f]`` gated) and ``[f, h]``.
    """
    shape = model.transformer
    if shape is None or layer.kind not in SPLIT_KINDS:
        return []
    h = float(shape.hidden)
    if layer.kind == "attention":
        kv = (shape.kv_heads or shape.heads) / shape.heads
        return [(h, h + 2 * h * kv), (h, h)]
    f = float(shape.ffn)
    return [(h, 2 * f if shape.gated_ffn else f), (f, h)]


BUILTIN_MODES = ("one_d", "two_d", "two_and_half_d", "three_d")
"""Modules of the built-in modes, in the order ``clustersim list tp-modes`` shows them."""


def mode_modules() -> list[str]:
    """Every module of this folder that holds a mode (each registers itself on import): the
    built-ins in :data:`BUILTIN_MODES` order, then any other by name."""
    folder = Path(__file__).parent
    found = {info.name for info in pkgutil.iter_modules([str(folder)])} - {"base"}
    return [*BUILTIN_MODES, *sorted(found.difference(BUILTIN_MODES))]


def _mode_line(name: str, cls: type[TensorParallelMode]) -> str:
    return f"{name:<6} {cls.description}"


class TensorParallelMode(Registered):
    """A way of splitting a layer over ``tp`` GPUs (``depth``: Tesseract's d, else 1)."""

    registry: ClassVar[Registry[type[TensorParallelMode]]] = Registry(
        "tp-modes",
        "tensor-parallel mode",
        describe=_mode_line,
        builtins=[f"{__package__}.{module}" for module in mode_modules()],
        unknown="unknown tensor-parallel mode {name!r}",
    )
    name: ClassVar[str]
    description: ClassVar[str] = ""
    sequence_parallel: ClassVar[bool] = False
    """Whether the mode runs Megatron's sequence parallelism (its 1-D split does; a grid that
    splits every activation itself has none to run): ``parallelism.sequence_parallel`` true is
    refused otherwise, and ``auto`` leaves it off."""

    def __init__(self, tp: int, depth: int = 1) -> None:
        self.tp = tp
        self.depth = depth

    # -- checks --------------------------------------------------------------

    @classmethod
    def problems(cls, tp: int, depth: int, heads: int | None) -> list[Problem]:
        """What forbids this mode with ``tp`` GPUs, ``depth`` and ``heads`` attention heads."""
        out: list[Problem] = []
        if depth != 1:
            out.append(
                Problem(
                    "parallelism.tp_depth",
                    f"tp_depth {depth} is Tesseract's depth; tp_mode {cls.name} has none",
                    "1, or tp_mode: 2.5d",
                )
            )
        return out

    @staticmethod
    def heads_problem(heads: int | None, q: int, what: str) -> Problem | None:
        """Why ``q`` (the GPUs that split the heads) does not divide ``heads``, or None."""
        if heads is None or heads % q == 0:
            return None
        return Problem(
            "parallelism.tp",
            f"{what} splits the attention heads over q = {q} GPUs; q does not divide the "
            f"model's {heads} heads",
            f"q dividing {heads}",
        )

    # -- the grid ------------------------------------------------------------

    def axes(self) -> dict[str, list[list[int]]]:
        """Axis name -> its sub-groups, as positions in the tensor-parallel group."""
        return {"tensor": [list(range(self.tp))]}

    @property
    def grid(self) -> list[int]:
        """The grid's shape (``[p]`` for 1-D, ``[q, q]``, ``[q, q, d]``, ``[q, q, q]``)."""
        return [self.tp]

    # -- what a layer costs --------------------------------------------------

    @property
    def param_shards(self) -> float:
        """The parameters of a split layer divide by this on each GPU (p, or q^2 for 2.5-D)."""
        return float(self.tp)

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
        """The collectives one GPU runs for ``layer`` in pass ``phase`` (fwd or bwd)."""
        raise NotImplementedError

    def activation_bytes(
        self,
        layer: Layer,
        model: Model,
        samples: float,
        *,
        sequence_parallel: bool,
        recompute: str,
        value_bytes: float = 2.0,
    ) -> float:
        """Bytes ``layer`` keeps for backward on one GPU: the layer's whole activations / p
        (the 2-D, 2.5-D and 3-D papers split every activation evenly over the grid), with
        activation values of ``value_bytes`` bytes."""
        from ...model.activations import layer_activation_bytes

        whole = layer_activation_bytes(
            layer, model, samples, recompute=recompute, value_bytes=value_bytes
        )
        if model.transformer is None:
            return whole
        return whole / self.tp


def tp_mode(name: str, tp: int, depth: int = 1) -> TensorParallelMode:
    """The registered mode ``name`` for ``tp`` GPUs (ScenarioError at parallelism.tp_mode)."""
    cls = TensorParallelMode.registry.lookup(name, "parallelism.tp_mode")
    return cls(tp, depth)


class GridTimer:
    """Alpha-beta seconds of a mode's collectives over one tensor-parallel group's grid."""

    def __init__(
        self,
        topology: Topology,
        group: Sequence[str],
        algorithm: str,
        axes: Mapping[str, Sequence[Sequence[int]]],
        protocol: str | None = None,
    ) -> None:
        self.group = tuple(group)
        self.timers = {
            axis: [
                CollectiveTimer(topology, [group[i] for i in positions], algorithm, protocol)
                for positions in subgroups
            ]
            for axis, subgroups in axes.items()
        }

    def call_of(self, op: GridCollective) -> CollectiveCall:
        """``op`` as a call on its axis's first sub-group."""
        return self.timers[op.axis][0].call(op.op, op.size_bytes)

    def first(self, axis: str) -> CollectiveTimer:
        """The first sub-group's timer of ``axis`` (to check the algorithm applies)."""
        return self.timers[axis][0]

    def seconds(self, ops: Sequence[GridCollective]) -> float:
        """Seconds of ``ops`` one after another, each the slowest of its axis's sub-groups."""
        total = 0.0
        for op in ops:
            key = ((op.op, op.size_bytes),)
            total += max(timer.seconds(key) for timer in self.timers[op.axis])
        return total
