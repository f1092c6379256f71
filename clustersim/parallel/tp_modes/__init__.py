"""Tensor-parallel modes: how a tensor-parallel group of p GPUs splits a transformer layer.

One module per mode, each a :class:`~.base.TensorParallelMode` subclass that registers
itself under ``parallelism.tp_mode``:

* ``1d`` (:mod:`.one_d`) -- Megatron-LM (Shoeybi et al. 2019), the default;
* ``2d`` (:mod:`.two_d`) -- Optimus (Xu et al. 2021), SUMMA on a q x q grid, p = q^2;
* ``2.5d`` (:mod:`.two_and_half_d`) -- Tesseract (Wang et al. 2021), d layers of q x q
  grids, p = q^2 d;
* ``3d`` (:mod:`.three_d`) -- Bian et al. 2021, a q x q x q cube, p = q^3.

A mode gives, per layer and pass, the collectives (op, axis of the grid, nccl-tests size in
bytes) a GPU takes part in, the sub-groups of each axis, and how parameters and stored
activations divide over the group.  :class:`~.base.GridTimer` prices them on the topology.
"""

from .base import GridCollective, GridTimer, TensorParallelMode, linear_shapes, tp_mode

__all__ = ["GridCollective", "GridTimer", "TensorParallelMode", "linear_shapes", "tp_mode"]
