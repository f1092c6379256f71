"""Plan on a mixed cluster: where each GPU type goes, and what that gains.

On a cluster whose GPUs are of several types (``cluster.node_groups``), every configuration
of the search is tried in up to three *arrangements* (:data:`ARRANGEMENTS`):

* ``even`` -- the scenario's own rank order, even batch shares, the even stage split: the
  naive split, where the slowest type sets the pace;
* ``replicas`` -- rank order ``[tp, pp, dp]``: each replica on consecutive nodes, so that
  replicas are of one type where the node groups allow, and the batch shared by speed
  (``data_parallel.balance: speed``);
* ``stages`` -- rank order ``[tp, dp, pp]``: each stage's devices consecutive over the
  replicas, so that stages are of one type, and the layers split by speed and memory
  (``pipeline.stages: balanced``); only with pipeline stages.

Besides, the plan runs the same search on the fastest type's nodes alone (the cluster cut
down to those node groups, :func:`fast_only_document`), and states the gain of the best
layout over that and over the best naive even split (:func:`gain_lines`).  Units:
samples/s, seconds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...topology import Topology
    from .runs import Outcome
    from .space import Point

EVEN = "even"
"""The naive arrangement: the scenario's order, even shares and stages."""

REPLICA_ORDER = ["tp", "pp", "dp"]
"""Rank order that keeps each replica on consecutive nodes."""
STAGE_ORDER = ["tp", "dp", "pp"]
"""Rank order that keeps each stage's devices on consecutive nodes."""


def _even(doc: dict[str, Any], point: Point) -> dict[str, Any] | None:
    """The scenario's order, even shares and the even stage split (a scenario's own
    ``balance`` or ``stages`` set back to even)."""
    out = doc
    for section, key in (("data_parallel", "balance"), ("pipeline", "stages")):
        given = (doc.get(section) or {}).get(key)
        if given is not None and given != EVEN:
            out = copy.deepcopy(out) if out is doc else out
            out[section] = {**out[section], key: EVEN}
    return out


def _by_replica(doc: dict[str, Any], point: Point) -> dict[str, Any] | None:
    """Replicas of one type, the batch shared by speed."""
    if point.dp < 2:
        return None
    out = copy.deepcopy(doc)
    out["parallelism"] = {**(out.get("parallelism") or {}), "order": list(REPLICA_ORDER)}
    out["data_parallel"] = {**(out.get("data_parallel") or {}), "balance": "speed"}
    return out


def _by_stage(doc: dict[str, Any], point: Point) -> dict[str, Any] | None:
    """Stages of one type, the layers split by speed and memory."""
    if point.pp < 2 or "pipeline" not in doc:
        return None
    out = copy.deepcopy(doc)
    out["parallelism"] = {**(out.get("parallelism") or {}), "order": list(STAGE_ORDER)}
    out["pipeline"] = {**out["pipeline"], "stages": "balanced"}
    return out


ARRANGEMENTS: dict[str, Callable[[dict[str, Any], Point], dict[str, Any] | None]] = {
    EVEN: _even,
    "replicas": _by_replica,
    "stages": _by_stage,
}
"""Arrangement name -> the candidate document arranged so (None: it does not apply)."""


def is_mixed(topology: Topology) -> bool:
    """True when the cluster's GPUs are of more than one type."""
    return len(topology.gpu_types()) > 1


def arranged(doc: dict[str, Any], point: Point) -> list[tuple[str, dict[str, Any]]]:
    """(arrangement, document) of each arrangement that applies to ``point``."""
    out = []
    for name, arrange in ARRANGEMENTS.items():
        changed = arrange(doc, point)
        if changed is not None:
            out.append((name, changed))
    return out


def fastest_type(topology: Topology) -> str:
    """The GPU type of the highest achieved peak (FLOP/s x efficiency, at the training
    precision the topology was priced at); the first in device order on a tie."""
    best: dict[str, float] = {}
    for device in topology.devices.values():
        if device.kind == "gpu":
            rate = device.flops_per_s * device.efficiency
            best[device.type] = max(best.get(device.type, 0.0), rate)
    return max(best, key=lambda t: best[t])


UNITS = {
    "two_tier": ("racks", "nodes_per_rack"),
    "three_tier": ("pods", None),
    "rail_optimized": ("groups", "nodes_per_group"),
}
"""Per racked kind: the key counting its units, and the key of nodes per unit (None: three
tier's pods hold racks_per_pod x nodes_per_rack nodes)."""


@dataclass(frozen=True)
class FastOnly:
    """The cluster cut down to the fastest type's nodes, or why it cannot be."""

    gpu_type: str
    doc: dict[str, Any] | None
    """The scenario document on those nodes alone (None: see ``why``)."""
    why: str = ""


def fast_only_document(doc: dict[str, Any], scenario: Scenario, topology: Topology) -> FastOnly:
    """The scenario on the fastest type's node groups alone, as many racks (pods, rail groups)
    as they fill; a note instead when they do not fill whole ones."""
    gpu_type = fastest_type(topology)
    cluster = scenario.cluster
    kind = cluster.kind
    groups = getattr(cluster, "node_groups", None) or []
    kept = [i for i, g in enumerate(groups) if (g.gpu.preset or "") == gpu_type]
    nodes = sum(groups[i].count for i in kept)
    key, per_key = UNITS[kind]
    per_unit = (
        cluster.racks_per_pod * cluster.nodes_per_rack
        if per_key is None
        else getattr(cluster, per_key)
    )
    if not kept or nodes % per_unit:
        why = f"its {nodes} nodes do not fill whole {key} of {per_unit} nodes"
        return FastOnly(gpu_type, None, why)
    out = copy.deepcopy(doc)
    section = out["cluster"]
    section["node_groups"] = [section["node_groups"][i] for i in kept]
    section[key] = nodes // per_unit
    return FastOnly(gpu_type, out)


def best_of(ranked: Sequence[Outcome], arrangement: str | None = None) -> Outcome | None:
    """The best outcome that fits (of ``arrangement`` only, when given): what
    :func:`~.tables.best_fitting` picks, here without importing the tables (they import the
    candidates, which import this module)."""
    for outcome in ranked:
        if outcome.ok and outcome.fits is True:
            if arrangement is None or outcome.point.arrangement == arrangement:
                return outcome
    return None


def gain_lines(
    ranked: Sequence[Outcome], fast: FastOnly, fast_ranked: Sequence[Outcome]
) -> list[str]:
    """What the best layout gains, measured: over the best naive even split and over the
    best layout on the fastest type's nodes alone."""
    best = best_of(ranked)
    if best is None:
        return []
    rate = best.throughput_samples_per_s or 0.0
    lines = [f"best on the mixed cluster: {best.point.label()}: {rate:,.1f} samples/s"]
    naive = best_of(ranked, EVEN)
    lines.append(_gain("the best naive even split", rate, naive))
    if fast.doc is None:
        lines.append(f"the {fast.gpu_type} nodes alone were not planned: {fast.why}")
    else:
        lines.append(_gain(f"the {fast.gpu_type} nodes alone", rate, best_of(fast_ranked)))
    return lines


def _gain(what: str, rate: float, other: Outcome | None) -> str:
    """``+x% over WHAT (its layout: its samples/s)``, or that nothing of it fits."""
    if other is None or not other.throughput_samples_per_s:
        return f"over {what}: none fits"
    theirs = other.throughput_samples_per_s
    return (
        f"{(rate / theirs - 1) * 100:+.1f}% over {what} "
        f"({other.point.label()}: {theirs:,.1f} samples/s)"
    )


def fast_only_of(doc: dict[str, Any], source: str) -> FastOnly | None:
    """The fastest type's nodes alone of the plan's document ``doc`` (None: one type)."""
    from ...scenario import parse_scenario
    from .space import build_cluster

    scenario = parse_scenario(doc, source)
    topology = build_cluster(scenario)
    return fast_only_document(doc, scenario, topology) if is_mixed(topology) else None
