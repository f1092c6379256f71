"""A candidates file read: its workload, each candidate's cluster put into it and checked,
the tokens to train, and each cluster's GPUs counted by type and priced.

Everything here is checked before anything is simulated, and every problem is a
:class:`~clustersim.errors.ScenarioError` at its key path: of the candidates file
(``clusters[2].gpu_hour_price``, a cluster section written inline re-rooted under
``clusters[i].cluster``), of a cluster file, or of the workload (naming the candidate
whose cluster it was checked with).  Units: prices in the file's currency, watts, tokens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import Problem, ScenarioError, join_path
from ...resilience import tokens_per_iteration
from ...scenario.document import CANDIDATES_KEY, is_candidates_document
from ...scenario.presets import rebased
from ...scenario.validation import validate_model
from ..plan import build_cluster
from .costs import PerType, gpu_types, per_type_total, spec_type
from .spec import CandidatesFile, ClusterChoice

if TYPE_CHECKING:
    from ...scenario import Scenario
    from ...scenario.overrides import Setting

CLUSTER = "cluster"
"""The scenario key a candidate's cluster replaces."""


@dataclass(frozen=True)
class ClusterOption:
    """One candidate cluster, checked: the workload's document with its cluster, its GPUs by
    type, and what they cost together."""

    index: int
    """Its place in the file's ``clusters`` (``clusters[index]``)."""
    choice: ClusterChoice
    doc: dict[str, Any] = field(repr=False)
    """The workload's scenario document with this cluster as its ``cluster:`` section."""
    gpu_types: dict[str | None, int]
    """The cluster's GPUs counted by type (:func:`~.costs.gpu_types`)."""
    price: PerType
    """The price of a GPU-hour as given (one number, or by GPU type)."""
    hourly_price: float
    """The price of one hour of every GPU of the cluster."""
    watts: float | None = None
    """What every GPU of the cluster draws together, W (None: no ``gpu_power``)."""

    @property
    def name(self) -> str:
        return self.choice.name

    @property
    def gpus(self) -> int:
        return sum(self.gpu_types.values())

    @property
    def path(self) -> str:
        """``clusters[i]``: its key path in the candidates file."""
        return join_path("clusters", self.index)


@dataclass(frozen=True)
class Choices:
    """A candidates file, read and checked."""

    source: str
    """The candidates file."""
    spec: CandidatesFile
    workload_source: str
    """The workload file (with its ``--set`` overrides, as errors name it)."""
    workload_name: str
    tokens: float
    """Tokens to train."""
    tokens_per_iteration: float
    """global_batch x sequence length of the workload."""
    seq: int
    """The workload's sequence length, tokens per sample."""
    options: list[ClusterOption]

    @property
    def title(self) -> str:
        """The study's name: the file's ``name``, else the file's stem."""
        return self.spec.name or Path(self.source).stem


def load_choices(path: str | os.PathLike[str], settings: Sequence[Setting] = ()) -> Choices:
    """Read the candidates file at ``path`` and check all of it (see the module docstring);
    ``settings`` (``--set``) change the workload before the clusters go in."""
    from ...scenario.loader import _load_yaml, _read_text

    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    if not isinstance(doc, dict):
        raise ScenarioError(
            Problem("", "a candidates file is a mapping of keys to values", "workload, clusters"),
            source,
        )
    if CANDIDATES_KEY not in doc and any(key in doc for key in (CLUSTER, "model", "training")):
        raise ScenarioError(
            Problem(
                CANDIDATES_KEY,
                "this is a scenario, not a candidates file",
                "a candidates file: workload: naming a training scenario, and clusters: the "
                "clusters to compare (docs/choose.md)",
            ),
            source,
        )
    spec = validate_model(CandidatesFile, doc, source=source)
    base = Path(source).parent
    workload, workload_source = _workload_document(spec, base, source, settings)
    options = []
    first: Scenario | None = None
    for i, choice in enumerate(spec.clusters):
        section, where = _cluster_section(choice, i, base, source)
        candidate = {**workload, CLUSTER: section}
        scenario = _checked(candidate, workload_source, where, i, choice.name, source)
        first = first or scenario
        options.append(_priced(i, choice, candidate, scenario, source))
    assert first is not None and first.training is not None
    tokens = spec.tokens if spec.tokens is not None else first.training.tokens
    if tokens is None:
        raise ScenarioError(
            Problem(
                "tokens",
                f"no tokens to train: this file gives none and the workload "
                f"({workload_source}) has no training.tokens",
                "tokens: 2T here, or training.tokens in the workload",
            ),
            source,
        )
    per_iteration = tokens_per_iteration(first)
    if per_iteration is None:
        raise ScenarioError(
            Problem(
                "workload",
                "the workload's model is not a transformer: it has no sequence length, so "
                "its tokens cannot be counted",
                "a transformer (a preset such as llama2-70b, or model.transformer)",
            ),
            source,
        )
    seq = round(per_iteration / first.training.global_batch)
    name = str(workload.get("name", Path(workload_source).stem))
    return Choices(source, spec, workload_source, name, tokens, per_iteration, seq, options)


def _workload_document(
    spec: CandidatesFile, base: Path, source: str, settings: Sequence[Setting]
) -> tuple[dict[str, Any], str]:
    """The workload's document (``settings`` applied) and the source its errors name."""
    from ...scenario.overrides import apply_settings, described, read_document

    path = Path(os.path.normpath(base / spec.workload))
    if not path.is_file():
        raise ScenarioError(
            Problem(
                "workload",
                f"no file {str(path)!r}",
                "a training scenario file, relative to this file",
            ),
            source,
        )
    doc = read_document(path)
    if doc.get("workload") is not None or "model" not in doc or "training" not in doc:
        what = "has no model or training"
        if is_candidates_document(doc):
            what = "is a candidates file itself"
        elif doc.get("workload") is not None:
            what = f"runs a workload (workload: {_kind(doc.get('workload'))})"
        raise ScenarioError(
            Problem(
                "workload",
                f"{path} is not a training scenario: it {what}",
                "a training scenario: model: {...} and training: {...}",
            ),
            source,
        )
    for setting in settings:
        if setting.path and setting.path[0] == CLUSTER:
            raise ScenarioError(
                Problem(
                    "--set",
                    f"{setting.key}: each candidate's cluster replaces the workload's",
                    "keys of the workload (training.global_batch=2048), or change the "
                    "candidates' clusters in the file",
                )
            )
    workload_source = described(str(path), [s.text() for s in settings])
    return apply_settings(doc, settings, str(path)), workload_source


def _kind(workload: object) -> str:
    """The kind of a ``workload:`` section, for a message (``trace``, ``collective``)."""
    if isinstance(workload, Mapping) and workload:
        return str(next(iter(workload)))
    return type(workload).__name__


def _cluster_section(
    choice: ClusterChoice, i: int, base: Path, source: str
) -> tuple[dict[str, Any], str]:
    """The candidate's cluster section, its files made relative to the workload's reader,
    and where its problems are reported: ``""`` for a section written inline (re-rooted
    under ``clusters[i].cluster``), else the cluster file."""
    if isinstance(choice.cluster, dict):
        return rebased(choice.cluster, base), ""
    from ...scenario.loader import _load_yaml, _read_text

    path = Path(os.path.normpath(base / choice.cluster))
    if not path.is_file():
        raise ScenarioError(
            Problem(
                join_path("clusters", i, CLUSTER),
                f"no file {str(path)!r}",
                "a cluster section, or a YAML file (relative to this file) holding one",
            ),
            source,
        )
    doc = _load_yaml(_read_text(path, str(path)), str(path))
    section = doc.get(CLUSTER, doc) if isinstance(doc, dict) else doc
    if not isinstance(section, dict):
        raise ScenarioError(Problem(CLUSTER, "is not a cluster section (a mapping)"), str(path))
    bare = isinstance(doc, dict) and CLUSTER not in doc
    where = f"{path} (clusters[{i}].cluster of {source})"
    return rebased(section, path.parent), ("bare:" if bare else "file:") + where


def _checked(
    doc: dict[str, Any], workload_source: str, where: str, i: int, name: str, source: str
) -> Scenario:
    """``doc`` validated; its cluster's problems at the cluster's key paths (see
    :func:`_cluster_section`), the others at the workload's, naming the candidate."""
    from ...scenario import parse_scenario

    try:
        return parse_scenario(doc, workload_source)
    except ScenarioError as exc:
        raise _placed(exc, where, i, name, workload_source, source) from None


def _placed(
    exc: ScenarioError, where: str, i: int, name: str, workload_source: str, source: str
) -> ScenarioError:
    """The first group of ``exc``'s problems, each at its place (cluster or workload)."""
    ours = [
        p
        for p in exc.problems
        if p.path == CLUSTER or p.path.startswith((CLUSTER + ".", CLUSTER + "["))
    ]
    if not ours:
        return ScenarioError(
            exc.problems, f"{workload_source} (with the cluster of {source} clusters[{i}], {name})"
        )
    kind, _, file = where.partition(":")
    if not where:
        return ScenarioError(
            [Problem(join_path("clusters", i, p.path), p.message, p.allowed) for p in ours],
            source,
        )
    cut = len(CLUSTER) if kind == "bare" else 0
    return ScenarioError(
        [Problem(p.path[cut:].lstrip("."), p.message, p.allowed) for p in ours], file
    )


def cluster_price(cluster: Any) -> PerType | None:
    """The GPU-hour price a cluster section gives: its ``gpu_hour_price``, or on a mixed
    cluster a mapping from each node group's GPU type to its group's price (the cluster's
    where a group gives none); None when a price is missing."""
    groups = getattr(cluster, "node_groups", None)
    if not groups:
        return cluster.gpu_hour_price
    prices: dict[str, float] = {}
    for group in groups:
        price = group.gpu_hour_price or cluster.gpu_hour_price
        if price is None:
            return None
        prices[group.gpu.preset or ""] = price
    return prices


def _priced(
    i: int, choice: ClusterChoice, doc: dict[str, Any], scenario: Scenario, source: str
) -> ClusterOption:
    """The candidate's GPUs counted by type and priced (problems at ``clusters[i]``)."""
    path = join_path("clusters", i)
    price = choice.gpu_hour_price
    if price is None:
        price = cluster_price(scenario.cluster)
    if price is None:
        raise ScenarioError(
            Problem(
                join_path(path, "gpu_hour_price"),
                f"missing: no price of a GPU-hour for {choice.name!r}, and its cluster "
                "section gives no gpu_hour_price",
                "a number above 0 (currency per GPU-hour), or a mapping from GPU type to one",
            ),
            source,
        )
    topology = build_cluster(scenario)
    counts = gpu_types(topology.devices.values(), spec_type(scenario.cluster))
    if not counts:
        raise ScenarioError(
            Problem(join_path(path, CLUSTER), "the cluster has no GPU to train on or price"),
            source,
        )
    try:
        hourly = per_type_total(price, counts, join_path(path, "gpu_hour_price"))
        watts = None
        if choice.gpu_power is not None:
            watts = per_type_total(choice.gpu_power, counts, join_path(path, "gpu_power"))
    except ScenarioError as exc:
        raise exc.with_source(source) from None
    return ClusterOption(i, choice, doc, counts, price, hourly, watts)
