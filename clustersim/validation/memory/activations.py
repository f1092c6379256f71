"""Korthikanti et al. 2022's activation memory per transformer layer, through the scenario path.

"Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv:2205.05198), Table 2: the bytes one transformer layer keeps for its backward pass
(16-bit activations), sequence s, micro-batch b, hidden h, a heads, tensor parallel t:

=========================================  =============================
no parallelism                             s b h (34 + 5 a s / h)
tensor parallel                            s b h (10 + 24/t + 5 a s / (h t))
tensor + sequence parallel                 s b h (34/t + 5 a s / (h t))
tensor parallel + selective recompute      s b h (10 + 24/t)
tensor + sequence + selective recompute    s b h (34/t)
full recompute                             2 s b h
=========================================  =============================

Each row is a case per model shape of the paper's Table 3 (GPT-3 175B, the 530B model,
the 1T model; sequence 2048), its values over t = 2, 4, 8 (t = 1 for no parallelism, t = 1,
2, 4, 8 for full recomputation).  A value is what a user's run reports: a scenario of one
GPU group of t GPUs (pp = 1, dp = 1, bf16, micro-batch 1, unfused attention as Megatron-LM
ran it in 2022), the ``activations_bytes`` of its summary for a model of two blocks minus
that of one block (the embedding and the head cancel).  Two more cases hold Section 5's
published savings: selective recomputation removes 70% (GPT-3) and 65% (530B) of what
tensor and sequence parallelism leave.  Units: GB per layer (1 GB = 1e9 bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...scenario import parse_scenario
from ..case import Case, Tolerance, Value
from .reading import FAMILY, GB, device, memory_of

SOURCE = "Korthikanti et al. 2022 (MLSys 2023, arXiv:2205.05198)"
SEQUENCE = 2048
EXACT = Tolerance(rel=1e-9)
"""The rows are closed forms: the summary must give them to rounding."""
SAVING = Tolerance(abs=5e-3)
"""Section 5 prints whole percents: half a point."""


@dataclass(frozen=True)
class Shape:
    """A model shape of the paper's Table 3."""

    id: str
    name: str
    layers: int
    hidden: int
    heads: int


SHAPES = (
    Shape("175b", "GPT-3 175B", 96, 12288, 96),
    Shape("530b", "530B", 105, 20480, 128),
    Shape("1t", "1T", 128, 25600, 160),
)


@dataclass(frozen=True)
class Row:
    """A row of Table 2: its layout and its closed form in units of s b h."""

    id: str
    title: str
    sequence_parallel: bool
    recompute: str
    tps: tuple[int, ...]
    formula: Callable[[float, int], float]
    """(a s / h, t) -> bytes per s b h."""


ROWS = (
    Row("none", "no parallelism: sbh(34 + 5as/h)", False, "none", (1,), lambda r, t: 34 + 5 * r),
    Row(
        "tp",
        "tensor parallel: sbh(10 + 24/t + 5as/(ht))",
        False,
        "none",
        (2, 4, 8),
        lambda r, t: 10 + 24 / t + 5 * r / t,
    ),
    Row(
        "tp-sp",
        "tensor + sequence parallel: sbh(34/t + 5as/(ht))",
        True,
        "none",
        (2, 4, 8),
        lambda r, t: 34 / t + 5 * r / t,
    ),
    Row(
        "tp-selective",
        "tensor parallel + selective recompute: sbh(10 + 24/t)",
        False,
        "selective",
        (2, 4, 8),
        lambda r, t: 10 + 24 / t,
    ),
    Row(
        "tp-sp-selective",
        "tensor + sequence parallel + selective recompute: sbh(34/t)",
        True,
        "selective",
        (2, 4, 8),
        lambda r, t: 34 / t,
    ),
    Row("full", "full recompute: 2sbh", False, "full", (1, 2, 4, 8), lambda r, t: 2.0),
)
SAVINGS = (("175b", 0.70), ("530b", 0.65))
"""Section 5: the share of the tensor + sequence parallel activations that selective
recomputation removes at t = 8."""


def layer_document(shape: Shape, blocks: int, tp: int, sp: bool, recompute: str) -> dict:
    """A scenario of ``blocks`` blocks of ``shape`` on one tensor-parallel group of ``tp``
    A100s (pp = 1, dp = 1), micro-batch 1, bf16."""
    return {
        "name": f"korthikanti-{shape.id}",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": 1,
            "node": {"preset": "dgx-a100"},
        },
        "model": {
            "transformer": {
                "layers": blocks,
                "hidden": shape.hidden,
                "heads": shape.heads,
                "seq": SEQUENCE,
                "vocab": 51200,
            }
        },
        "training": {
            "global_batch": 1,
            "micro_batch": 1,
            "iterations": 1,
            "precision": "bf16",
            "optimizer": "adam",
            "recompute": recompute,
        },
        "parallelism": {"tp": tp, "pp": 1, "dp": 1, "sequence_parallel": sp},
        "pipeline": {"schedule": "1f1b"},
        "data_parallel": {"workers": f"*/gpu[0-{tp - 1}]"},
    }


def activations_of(document: dict) -> float:
    """``activations_bytes`` of the first GPU in the summary of ``document``."""
    return device(memory_of(parse_scenario(document)), "rack0/node0/gpu0").activations_bytes


def per_layer_bytes(shape: Shape, tp: int, sp: bool, recompute: str) -> float:
    """Bytes one layer adds to a GPU's summary activations: two blocks minus one."""
    two = activations_of(layer_document(shape, 2, tp, sp, recompute))
    one = activations_of(layer_document(shape, 1, tp, sp, recompute))
    return two - one


def expected_bytes(shape: Shape, row: Row, tp: int, micro_batch: int = 1) -> float:
    """Table 2's bytes for ``row`` at tensor-parallel size ``tp``."""
    sbh = SEQUENCE * micro_batch * shape.hidden
    return sbh * row.formula(shape.heads * SEQUENCE / shape.hidden, tp)


def _row_case(shape: Shape, row: Row) -> Case:
    def compute() -> Value:
        return tuple(
            per_layer_bytes(shape, t, row.sequence_parallel, row.recompute) / GB for t in row.tps
        )

    ts = ", ".join(map(str, row.tps))
    return Case(
        f"kor-{shape.id}-{row.id}",
        FAMILY,
        f"{shape.name}, {row.title}, t = {ts}",
        f"{SOURCE}, Table 2 (shape: Table 3)",
        tuple(expected_bytes(shape, row, t) / GB for t in row.tps),
        "GB",
        EXACT,
        compute,
        f"summary activations of {shape.name} blocks, 2 blocks minus 1, tp = t, "
        f"sequence_parallel {str(row.sequence_parallel).lower()}, recompute {row.recompute}",
    )


def saving(shape: Shape) -> float:
    """Share of the tensor + sequence parallel activations (t = 8) that selective
    recomputation removes, from two runs' summaries."""
    kept = per_layer_bytes(shape, 8, True, "selective")
    return 1 - kept / per_layer_bytes(shape, 8, True, "none")


def _saving_case(shape_id: str, expected: float) -> Case:
    shape = next(s for s in SHAPES if s.id == shape_id)
    return Case(
        f"kor-{shape_id}-selective-saving",
        FAMILY,
        f"{shape.name}: selective recompute removes {expected:.0%} of the tp + sp activations",
        f"{SOURCE}, Section 5",
        expected,
        "",
        SAVING,
        lambda: saving(shape),
        "1 - (summary activations per layer, tp 8 + sp, selective) / (the same, no recompute)",
    )


CASES = tuple(_row_case(shape, row) for shape in SHAPES for row in ROWS) + tuple(
    _saving_case(*row) for row in SAVINGS
)
