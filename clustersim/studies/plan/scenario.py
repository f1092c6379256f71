"""The scenario a plan starts from: a training scenario's document (``--set`` applied), its
cluster resized to ``--devices`` GPUs."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import Problem, ScenarioError
from .options import check_count

if TYPE_CHECKING:
    from ...scenario.overrides import Setting


def load_training_document(
    path: str | os.PathLike[str], settings: Sequence[Setting] = ()
) -> dict[str, Any]:
    """The validated YAML document of a training scenario (a workload scenario is an error),
    with ``settings`` (``--set``) applied: errors name the file and the overrides."""
    from ...scenario.overrides import load_with_settings

    doc, _ = load_with_settings(path, settings)
    if doc.get("workload") is not None:
        raise ScenarioError(
            Problem(
                "workload",
                "clustersim plan searches training configurations; this scenario runs a workload",
                "a training scenario: model: {...} and training: {...}",
            ),
            str(path),
        )
    return doc


def resize_cluster(doc: dict[str, Any], devices: int, source: str = "") -> dict[str, Any]:
    """A copy of ``doc`` whose cluster has ``devices`` GPUs.

    Two-tier clusters keep the node and ``nodes_per_rack`` and set ``racks`` =
    devices / (GPUs per node x nodes_per_rack); fewer devices than one rack
    make one rack of devices / GPUs-per-node nodes.  Flat clusters set their
    device count.  Custom clusters cannot be resized.  Errors name ``--devices``.
    """
    from ...scenario import parse_scenario

    check_count(devices, "--devices")
    cluster = parse_scenario(doc, source).cluster
    out = copy.deepcopy(doc)
    section = out.setdefault("cluster", {})
    if getattr(cluster, "node_groups", None):
        raise ScenarioError(
            Problem(
                "--devices",
                "a mixed cluster lists its node groups and their counts: resizing would have to "
                "choose which kind grows",
                "leave --devices out, and set the groups' counts and the racks",
            ),
            source,
        )
    if cluster.kind == "custom":
        raise ScenarioError(
            Problem(
                "--devices",
                "a custom cluster lists its devices one by one and cannot be resized",
                "leave --devices out, or describe the cluster as two_tier or flat",
            ),
            source,
        )
    units = {
        "three_tier": ("pods", "pod", lambda c: c.nodes_per_rack * c.racks_per_pod),
        "rail_optimized": ("groups", "rail group", lambda c: c.nodes_per_group),
    }
    if cluster.kind in units:
        key, what, nodes = units[cluster.kind]
        unit = cluster.node.gpus * nodes(cluster)
        if devices % unit:
            raise ScenarioError(
                Problem(
                    "--devices",
                    f"{devices} GPUs do not fill whole {what}s of {unit} GPUs",
                    f"a multiple of {unit}",
                ),
                source,
            )
        section[key] = devices // unit
        return out
    if cluster.kind != "two_tier":
        section["devices"] = devices
        return out
    gpus, per_rack = cluster.node.gpus, cluster.nodes_per_rack
    rack = gpus * per_rack
    if devices % rack == 0:
        section["racks"] = devices // rack
    elif devices < rack and devices % gpus == 0:
        section["racks"], section["nodes_per_rack"] = 1, devices // gpus
    else:
        raise ScenarioError(
            Problem(
                "--devices",
                f"{devices} GPUs do not fill whole racks of {per_rack} node(s) x {gpus} GPUs "
                f"= {rack}",
                f"a multiple of {rack}, or a multiple of {gpus} below {rack}",
            ),
            source,
        )
    return out
