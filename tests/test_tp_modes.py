"""Tensor-parallel modes (``parallelism.tp_mode``): 2-D, 2.5-D and 3-D against their papers.

Per linear layer ``[M, K] x [K, N]`` (M tokens) and GPU, in values (S sizes, nccl-tests):

* 2-D, Optimus (Xu et al. 2021, "An Efficient 2D Method for Training Super-Large Deep
  Learning Models", Section 3, SUMMA forward and backward algorithms): forward q steps of a
  row broadcast of an X block ``M K / q^2`` and a column broadcast of a W block
  ``K N / q^2``, i.e. ``(M K + K N) / q``; backward the two transposed SUMMAs, each q
  broadcasts and q reduces, ``2 (M K + K N) / q``.
* 2.5-D, Tesseract (Wang et al. 2021, Section 3): the same SUMMA on each of d depth layers
  with ``M / d`` of the tokens, ``(M K / d + K N) / q`` forward; backward twice that plus an
  all-reduce of the ``K N / q^2`` weight-gradient block over the d layers.
* 3-D, Bian et al. 2021 ("Maximizing Parallelism in Distributed Training for Huge Neural
  Networks", Section 3): forward all-gathers of X (``M K / q^2``) and W (``K N / q^2``) and
  a reduce-scatter of Y (``M N / q^2``); backward the same three sizes.

For a GPT block (f = 4h, no GQA) the linears are ``[h, 3h]``, ``[h, h]``, ``[h, 4h]``,
``[4h, h]``: sum of ``M K`` = 7 M h, of ``K N`` = 12 h^2, of ``M N`` = 9 M h.

Times: the reference cluster of tests/test_hybrid.py (NVSwitch, 100 GB/s, alpha = 2 x 1 us
per hop).  Ring all-gather and reduce-scatter: (n-1)(alpha + S/(n B)); ring broadcast and
reduce are pipelined chains: (n-1 + c-1)(alpha + S/(c B)), c = ceil(S / 4 MiB).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from clustersim.errors import ScenarioError
from clustersim.model.transformer import Transformer
from clustersim.parallel.tp_modes import tp_mode

from .test_hybrid import LINK_LATENCY, NVLINK_BPS, RATE, SHAPE, doc, run, training_flops

ALPHA = 2 * LINK_LATENCY
VALUE = 2  # bf16 bytes


def gpt(h: int, s: int, heads: int = 24) -> Any:
    return Transformer(layers=1, hidden=h, heads=heads, ffn=4 * h, vocab=1000, seq=s).build("t")


def pass_bytes(mode: Any, model: Any, samples: float, phase: str) -> float:
    """S bytes of one block (attention + mlp) in ``phase`` on one GPU."""
    return sum(
        c.size_bytes
        for layer in model.layers
        for c in mode.layer_collectives(layer, model, samples, phase=phase, bytes_per_value=VALUE)
    )


@pytest.mark.parametrize("q", [2, 3, 4])
@pytest.mark.parametrize("h, s, b", [(768, 512, 2), (1536, 1024, 1)])
def test_optimus_2d_moves_summa_blocks(q: int, h: int, s: int, b: int) -> None:
    """Optimus: forward (7 M h + 12 h^2) / q values per block, backward twice that."""
    model, m = gpt(h, s), b * s
    mode = tp_mode("2d", q * q)
    forward = (7 * m * h + 12 * h * h) / q * VALUE
    assert pass_bytes(mode, model, b, "fwd") == pytest.approx(forward, rel=1e-12)
    assert pass_bytes(mode, model, b, "bwd") == pytest.approx(2 * forward, rel=1e-12)
    ops = {
        (c.op, c.axis)
        for layer in model.layers
        for c in mode.layer_collectives(layer, model, b, phase="bwd", bytes_per_value=VALUE)
    }
    assert ops == {
        ("broadcast", "row"),
        ("broadcast", "column"),
        ("reduce", "row"),
        ("reduce", "column"),
    }


@pytest.mark.parametrize("q, d", [(2, 1), (2, 2), (2, 4), (3, 2), (4, 3)])
def test_tesseract_25d_splits_tokens_over_depth(q: int, d: int) -> None:
    """Tesseract: forward (7 M h / d + 12 h^2) / q; backward twice that + 12 h^2 / q^2 over depth."""
    h, s, b = 1152, 512, 4
    model, m = gpt(h, s), b * s
    mode = tp_mode("2.5d", q * q * d, d)
    forward = (7 * m * h / d + 12 * h * h) / q * VALUE
    depth = 12 * h * h / (q * q) * VALUE if d > 1 else 0.0
    assert pass_bytes(mode, model, b, "fwd") == pytest.approx(forward, rel=1e-12)
    assert pass_bytes(mode, model, b, "bwd") == pytest.approx(2 * forward + depth, rel=1e-12)
    assert mode.param_shards == q * q
    assert mode.grid == [q, q, d]


@pytest.mark.parametrize("q", [2, 3, 4])
def test_bian_3d_gathers_and_scatters_over_the_cube(q: int) -> None:
    """Bian et al.: each pass moves (7 M h + 12 h^2 + 9 M h) / q^2 values per block."""
    h, s, b = 1536, 256, 2
    model, m = gpt(h, s), b * s
    mode = tp_mode("3d", q**3)
    expected = (16 * m * h + 12 * h * h) / q**2 * VALUE
    for phase in ("fwd", "bwd"):
        assert pass_bytes(mode, model, b, phase) == pytest.approx(expected, rel=1e-12)
    assert mode.param_shards == q**3


@pytest.mark.parametrize(
    "name, tp, depth", [("2d", 4, 1), ("2d", 9, 1), ("2.5d", 8, 2), ("3d", 8, 1), ("3d", 27, 1)]
)
def test_grid_axes_partition_the_group(name: str, tp: int, depth: int) -> None:
    """Every axis splits the p positions into disjoint sub-groups of the grid's side."""
    mode = tp_mode(name, tp, depth)
    for axis, groups in mode.axes().items():
        flat = sorted(i for g in groups for i in g)
        assert flat == list(range(tp)), axis
        size = depth if axis == "depth" else round((tp / depth) ** 0.5) if name != "3d" else mode.q
        assert {len(g) for g in groups} == {size}


# --------------------------------------------------------------------------- time


def chain_s(n: int, nbytes: float) -> float:
    """Pipelined chain broadcast / reduce: (n-1 + c-1)(alpha + S/(c B)), 4 MiB pieces."""
    c = max(1, math.ceil(nbytes / (4 * 2**20)))
    return (n - 1 + c - 1) * (ALPHA + nbytes / c / NVLINK_BPS)


def ring_share_s(n: int, nbytes: float) -> float:
    """Ring all-gather / reduce-scatter of S: (n-1)(alpha + S/(n B))."""
    return (n - 1) * (ALPHA + nbytes / n / NVLINK_BPS)


def block_linears(h: int) -> list[tuple[int, int]]:
    return [(h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)]


def optimus_block_s(q: int, m: float, h: int) -> float:
    """Forward + backward of one block: per linear q (fwd: 2, bwd: 4) chains over q GPUs."""
    total = 0.0
    for k, n in block_linears(h):
        x, w = m * k / q**2 * VALUE, n * k / q**2 * VALUE
        total += q * (chain_s(q, x) + chain_s(q, w)) * 3
    return total


def bian_block_s(q: int, m: float, h: int) -> float:
    total = 0.0
    for k, n in block_linears(h):
        total += 2 * sum(ring_share_s(q, v / q**2 * VALUE) for v in (m * k, k * n, m * n))
    return total


@pytest.mark.parametrize(
    "name, tp, block_s",
    [("2d", 4, optimus_block_s), ("3d", 8, bian_block_s)],
)
@pytest.mark.parametrize("b", [1, 4])
def test_grid_iteration_is_split_compute_plus_alpha_beta_collectives(
    name: str, tp: int, block_s: Any, b: int
) -> None:
    """pp 1, one replica: compute / p, the grid's collectives at alpha-beta, optimizer / p."""
    m = 2
    scenario = doc(tp=tp, dp=1, gpus=tp, batch=m * b, micro_batch=b, tp_mode=name)
    summary = run(scenario).summary
    layers, h, s, v = SHAPE["layers"], SHAPE["hidden"], SHAPE["seq"], SHAPE["vocab"]
    q = round(tp ** (1 / (2 if name == "2d" else 3)))
    compute = training_flops(m * b, s, layers, h, v, recompute=False) / tp / RATE
    comm = m * layers * block_s(q, b * s, h)
    optimizer = summary["model"]["params"] / tp * 28 / 1000e12
    assert summary["iteration_time_s"] == pytest.approx(compute + comm + optimizer, rel=1e-6)
    tensor = summary["communication"]["tensor_parallel"]
    assert tensor["mode"] == name and tensor["grid"] == [q] * (2 if name == "2d" else 3)


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("name, tp, depth", [("2d", 4, 1), ("2.5d", 8, 2), ("3d", 8, 1)])
def test_grid_modes_divide_activations_by_p_and_weights_by_the_grid(
    name: str, tp: int, depth: int
) -> None:
    """Activations: Korthikanti's unsplit block s b h (34 + 5 a s / h) / p (the papers
    spread every activation over the grid); weights: params / p (2.5-D: / q^2)."""
    b = 2
    summary = run(
        doc(tp=tp, dp=1, gpus=tp, batch=b, micro_batch=b, tp_mode=name, tp_depth=depth)
    ).summary
    h, s, a, layers = SHAPE["hidden"], SHAPE["seq"], SHAPE["heads"], SHAPE["layers"]
    per_block = s * b * h * (34 + 5 * a * s / h)
    head = 2 * s * b * h + 4 * s * b * SHAPE["vocab"]  # final norm input, fp32 logits
    embedding = s * b * h  # dropout mask
    expected = (layers * per_block + head + embedding) / tp
    row = summary["memory"]["per_device"]["rack0/node0/gpu0"]
    assert row["activations_bytes"] == pytest.approx(expected, rel=1e-9)
    shards = tp / depth
    assert row["weights_bytes"] == pytest.approx(summary["model"]["params"] * 2 / shards)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "changes, path, words",
    [
        ({"tp": 2, "tp_mode": "2d"}, "parallelism.tp", "not a square"),
        ({"tp": 4, "tp_mode": "3d"}, "parallelism.tp", "not a cube"),
        ({"tp": 8, "tp_mode": "2.5d", "tp_depth": 3}, "parallelism.tp_depth", "does not divide"),
        ({"tp": 8, "tp_mode": "2.5d", "tp_depth": 1}, "parallelism.tp", "not a square"),
        ({"tp": 4, "tp_mode": "2d", "tp_depth": 2}, "parallelism.tp_depth", "Tesseract"),
        (
            {"tp": 4, "tp_mode": "2d", "sequence_parallel": True},
            "parallelism.sequence_parallel",
            "1-D",
        ),
        ({"tp": 4, "tp_mode": "4d"}, "parallelism.tp_mode", "unknown"),
    ],
)
def test_impossible_grids_are_errors(changes: dict[str, Any], path: str, words: str) -> None:
    tp = changes.pop("tp")
    with pytest.raises(ScenarioError) as info:
        run(doc(tp=tp, dp=8 // tp, gpus=8, batch=8, **changes))
    problem = info.value.problems[0]
    assert problem.path == path and words in problem.message


def test_heads_must_split_over_the_grid_side() -> None:
    """2-D splits the heads over q columns: q = 3 does not divide 8 heads."""
    with pytest.raises(ScenarioError) as info:
        run(doc(tp=9, dp=1, gpus=9, batch=1, tp_mode="2d", allow_cross_node_tp=True))
    assert "does not divide the model's 8 heads" in info.value.problems[0].message
