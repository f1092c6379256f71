"""The worked examples of the seeds (``shared/validation/cases.md``): D1-D3 from the d2l
parameter-server chapter and N1-N4 from openmlsys, each run from its scenario file in
``scenarios/validation/`` (the same files ``tests/test_validation_cases.py`` runs)."""

from __future__ import annotations

from ..api import simulate
from .case import Case, Tolerance, Value, scenario

FAMILY = "worked"
D2L = "d2l, Parameter Servers, communication on one server"
OPENMLSYS = "openmlsys, Machine learning cluster architecture"


def _makespan(name: str) -> Value:
    return simulate(scenario("validation", name)).makespan_s


def _bytes_into_root() -> Value:
    """N3: bytes on the link into the replica the two others reduce to."""
    links = simulate(scenario("validation", "n3_gpt3_gradients.yaml")).links
    return {row["link"]: row["bytes"] for row in links}["rack0/tor->rack0/node0/nic"]


def _time_case(cid: str, title: str, source: str, name: str, expected_s: float, rel: float) -> Case:
    return Case(
        cid,
        FAMILY,
        title,
        source,
        expected_s,
        "s",
        Tolerance(rel=rel),
        lambda: _makespan(name),
        f"scenarios/validation/{name}",
    )


CASES = (
    _time_case("D1", "GPU 0 aggregates 3 x 160 MB", D2L, "d1_one_gpu_aggregates.yaml", 0.060, 1e-3),
    _time_case("D2", "the CPU aggregates 4 x 160 MB", D2L, "d2_cpu_aggregates.yaml", 0.080, 1e-3),
    _time_case(
        "D3", "sharded aggregation, 4 parts", D2L, "d3_sharded_aggregation.yaml", 0.015, 1e-3
    ),
    _time_case(
        "N1-2:1",
        "2 x 1 GB through a 2:1 rack uplink",
        OPENMLSYS,
        "n1_oversubscribed_uplink.yaml",
        1.6,
        5e-3,
    ),
    _time_case(
        "N1-1:1",
        "2 x 1 GB through a 1:1 rack uplink",
        OPENMLSYS,
        "n1_full_bisection.yaml",
        0.8,
        5e-3,
    ),
    _time_case("N2", "1 TB over one 200 Gb/s link", OPENMLSYS, "n2_one_link.yaml", 40.0, 1e-3),
    Case(
        "N3",
        FAMILY,
        "GPT-3 fp32 gradients of 2 replicas into a third",
        OPENMLSYS,
        2 * 175e9 * 4,
        "B",
        Tolerance(rel=1e-9),
        _bytes_into_root,
        "scenarios/validation/n3_gpt3_gradients.yaml",
    ),
    _time_case(
        "N4", "alpha-beta: 5 us + 1 MB at 25 GB/s", OPENMLSYS, "n4_alpha_beta.yaml", 45e-6, 1e-12
    ),
)
