"""ZeRO's model-state memory (Rajbhandari et al. 2020), through the scenario path.

Psi parameters trained in mixed precision with Adam keep 2 Psi bytes of fp16 weights, 2 Psi
of fp16 gradients and K Psi = 12 Psi of optimizer states (fp32 master weights, momentum and
variance) per device; ZeRO shards the optimizer states (P_os, stage 1), then the gradients
(P_os+g, stage 2), then the weights (P_os+g+p, stage 3) over the N_d data-parallel ranks:

==========  ===============================  =====================
stage       bytes per device                 Psi = 7.5B, N_d = 64
==========  ===============================  =====================
0 baseline  (2 + 2 + K) Psi                  120 GB
1 P_os      4 Psi + K Psi / N_d              31.4 GB
2 P_os+g    2 Psi + (2 + K) Psi / N_d        16.6 GB
3 P_os+g+p  (2 + 2 + K) Psi / N_d            1.88 GB
==========  ===============================  =====================

Cases Z0-Z3 are Figure 1's example (the table above, ``shared/validation/cases.md``); the
``zero-t1-*`` cases are Table 1: the per-device GB of the three stages for Psi = 7.5B, 128B
and 1T over N_d = 1, 4, 16, 64, 256 and 1024, as the paper prints them (3 significant digits,
so each value is held to 0.5% or half a unit of its last printed digit, 0.005 GB).

Each value is a run's summary: a model of one layer of Psi parameters on N_d GPUs, fp16, Adam,
``zero.stage`` as the column (stage 0: plain data parallelism), its first GPU's weights,
gradients and optimizer states (:mod:`.reading`).  Units: bytes (Z0-Z3), GB (Table 1).
"""

from __future__ import annotations

from ...scenario import parse_scenario
from ..case import Case, Tolerance, Value
from .reading import FAMILY, GB, cluster, cluster_section, device, memory_of, model_states_bytes

SOURCE = "Rajbhandari et al. 2020 (ZeRO), Figure 1: Psi = 7.5B, N_d = 64, K = 12"
TABLE_1 = "Rajbhandari et al. 2020 (ZeRO), Table 1"
PSI = 7.5e9
N_D = 64
STAGES = (
    # stage, title, expected bytes per device
    (0, "plain data parallel: (2 + 2 + K) Psi", 120e9),
    (1, "ZeRO-1: 4 Psi + K Psi / N_d", 31.4e9),
    (2, "ZeRO-2: 2 Psi + (2 + K) Psi / N_d", 16.6e9),
    (3, "ZeRO-3: (2 + 2 + K) Psi / N_d", 1.875e9),
)
TABLE_1_DP = (1, 4, 16, 64, 256, 1024)
"""Table 1's data-parallel degrees N_d."""
TABLE_1_ROWS = (
    # model, Psi, stage, column, GB per device for each N_d of TABLE_1_DP as printed
    ("7.5b", 7.5e9, 1, "P_os", (120, 52.5, 35.6, 31.4, 30.4, 30.1)),
    ("7.5b", 7.5e9, 2, "P_os+g", (120, 41.3, 21.6, 16.6, 15.4, 15.1)),
    ("7.5b", 7.5e9, 3, "P_os+g+p", (120, 30, 7.5, 1.88, 0.47, 0.12)),
    ("128b", 128e9, 1, "P_os", (2048, 896, 608, 536, 518, 513)),
    ("128b", 128e9, 2, "P_os+g", (2048, 704, 368, 284, 263, 257)),
    ("128b", 128e9, 3, "P_os+g+p", (2048, 512, 128, 32, 8, 2)),
    ("1t", 1e12, 1, "P_os", (16000, 7000, 4750, 4187, 4046, 4011)),
    ("1t", 1e12, 2, "P_os+g", (16000, 5500, 2875, 2218, 2054, 2013)),
    ("1t", 1e12, 3, "P_os+g+p", (16000, 4000, 1000, 250, 62.5, 15.6)),
)
PRINTED = Tolerance(rel=5e-3, abs=5e-3)
"""The paper's 3 significant digits: 0.5%, or 0.005 GB for its smallest entries (0.12 GB)."""


def zero_document(params: float, dp: int, stage: int) -> dict[str, object]:
    """A scenario of one layer of ``params`` parameters on ``dp`` GPUs at ZeRO ``stage``,
    mixed precision (fp16) with Adam, one sample per GPU."""
    return {
        "name": f"zero-{stage}-{dp}",
        "cluster": cluster_section(dp),
        "model": {"layers": [{"name": "weights", "params": params, "flops": 1e9}]},
        "training": {"global_batch": dp, "iterations": 1, "precision": "fp16", "optimizer": "adam"},
        "zero": {"stage": stage},
    }


def states_per_device(params: float, dp: int, stage: int) -> float:
    """Model-state bytes of one GPU of :func:`zero_document`, read from its summary."""
    block = memory_of(parse_scenario(zero_document(params, dp, stage)), cluster(dp))
    return model_states_bytes(device(block))


def _figure_case(stage: int, title: str, expected: float) -> Case:
    return Case(
        f"Z{stage}",
        FAMILY,
        title,
        SOURCE,
        expected,
        "B",
        Tolerance(rel=5e-3),
        lambda: states_per_device(PSI, N_D, stage),
        f"summary memory of one 7.5e9-parameter layer on 64 GPUs, zero stage {stage}, fp16, adam",
        also=("zero",),
    )


def _table_case(
    model: str, params: float, stage: int, column: str, expected: tuple[float, ...]
) -> Case:
    def compute() -> Value:
        return tuple(states_per_device(params, dp, stage) / GB for dp in TABLE_1_DP)

    dps = ", ".join(map(str, TABLE_1_DP))
    return Case(
        f"zero-t1-{model}-stage{stage}",
        FAMILY,
        f"{model.upper()}, {column}, N_d = {dps}",
        f"{TABLE_1}, Psi = {model.upper()}, column {column}",
        tuple(float(x) for x in expected),
        "GB",
        PRINTED,
        compute,
        f"summary memory of one layer of Psi parameters on N_d GPUs, zero stage {stage}, "
        "fp16, adam",
        also=("zero",),
    )


CASES = tuple(_figure_case(*row) for row in STAGES) + tuple(
    _table_case(*row) for row in TABLE_1_ROWS
)
