"""Calibration: the figures of a user's own cluster, fitted from measurements they already have.

:mod:`.logs` reads nccl-tests' output.
"""

from __future__ import annotations

from .logs import Row, Run, format_log, read_log, read_logs

__all__ = ["Row", "Run", "format_log", "read_log", "read_logs"]
