"""Calibration: the figures of a user's own cluster, fitted from measurements they already have.

``clustersim calibrate nccl-tests LOG... -o my_node.yaml`` reads nccl-tests' output
(:mod:`.logs`), fits the node figures clustersim's own collective model uses to the measured
times (:mod:`.fit`, over the figures of :mod:`.figures`, on the points :mod:`.holdout`
keeps for the fit), writes a node file in the hardware catalog's format (:mod:`.node_file`)
and reports every point against its prediction, with a plot (:mod:`.report`).
docs/tutorials/calibrate.md is the walk-through.
"""

from __future__ import annotations

from .fit import Calibration, calibrate, predict
from .holdout import Point, points
from .log_text import format_log
from .logs import Row, Run, read_log, read_logs

__all__ = [
    "Calibration",
    "Point",
    "Row",
    "Run",
    "calibrate",
    "format_log",
    "points",
    "predict",
    "read_log",
    "read_logs",
]
