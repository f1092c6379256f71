"""Simulating plan candidates, and verifying the best ones every replica (the flow-level
model, or the analytical network at scale)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ClustersimError
from ...metrics import FlopTrainingSummary
from ...strategies.hybrid.replica_classes import FOLD_ALL_AT
from ..runner import run_all
from .candidates import Candidate, error_message, shorten
from .cluster import candidate_topology
from .space import Point, dash, point_label

# --------------------------------------------------------------------------- simulation


@dataclass
class Outcome:
    """What one candidate's simulation gave (None: not in its summary)."""

    candidate: Candidate
    iteration_time_s: float | None = None
    throughput_samples_per_s: float | None = None
    tflops_per_gpu: float | None = None
    """Hardware FLOP/s per GPU in TFLOP/s (Megatron's metric)."""
    peak_bytes: float | None = None
    """The largest peak memory of any device."""
    capacity_bytes: float | None = None
    """Memory of the device with that peak."""
    fits: bool | None = None
    """Every device within its memory (None: the strategy models no memory)."""
    time_to_train_s: float | None = None
    """Seconds to train the scenario's ``training.tokens`` (or ``duration``), if given."""
    cost: float | None = None
    """Its cost: GPU-hours x the GPU-hour price, if both are known."""
    played_replicas: int | None = None
    """Every replica run as one of each class of identical ones: how many were played (None:
    not so run; :func:`~clustersim.strategies.hybrid.replica_classes.fold_classes`)."""
    replicas: int | None = None
    """With ``played_replicas``: the data-parallel replicas they stand for."""
    error: str = ""
    """Why the simulation failed ("" if it ran)."""
    rank: int | None = None
    """1 = highest throughput (None: failed)."""

    @property
    def point(self) -> Point:
        return self.candidate.point

    @property
    def ok(self) -> bool:
        return not self.error and self.throughput_samples_per_s is not None


def simulate_candidate(doc: dict[str, Any], source: str = "") -> dict[str, Any]:
    """Simulate one candidate document; the summary values the plan shows, or ``{"error": ...}``.

    Runs in a worker process: errors come back as text.  Unexpected exceptions
    are reported too (``internal error: ...``), so one bad run cannot stop the plan.
    """
    from ...api import simulate
    from ...scenario import parse_scenario

    try:
        scenario = parse_scenario(doc, source=source)
        summary = simulate(scenario, topology=candidate_topology(scenario)).typed_summary
    except ClustersimError as exc:
        return {"error": error_message(exc)}
    except Exception as exc:  # noqa: BLE001  (reported in the candidate's row)
        return {"error": f"internal error: {type(exc).__name__}: {exc}"}
    part = summary.strategy
    if not isinstance(part, FlopTrainingSummary):
        return {"error": f"internal error: {summary.header.workload} is not a training run"}
    values: dict[str, Any] = {
        "iteration_time_s": part.times.iteration_time_s,
        "throughput_samples_per_s": part.times.throughput_samples_per_s,
        "tflops_per_gpu": part.flops.tflops_per_gpu,
    }
    played = getattr(part, "played_replicas", None)
    if played is not None:  # every replica, one of each class of identical ones played
        values.update(played_replicas=played, replicas=getattr(part, "simulated_replicas", None))
    usage = summary.usage
    if usage is not None:
        values.update(time_to_train_s=usage.time_to_train_s, cost=usage.cost)
    memory = summary.memory
    if memory is not None:
        values.update(
            peak_bytes=memory.peak_bytes, capacity_bytes=memory.capacity_bytes, fits=memory.fits
        )
    return values


def run_candidates(
    candidates: Sequence[Candidate],
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    scheduler: str | None = None,
) -> list[Outcome]:
    """Each candidate's :class:`Outcome`, in candidate order; ``workers`` processes
    (default: all cores, no more than fit in the memory limit together; one worker or one
    candidate runs in this process).

    ``progress(done, total)`` is called once before the first run finishes and
    after each run.  With ``scheduler`` they run on that Dask cluster (:func:`run_all`).
    """
    limits = [c.memory[1] for c in candidates if c.memory[1]]
    results = run_all(
        simulate_candidate,
        [(c.doc, c.source) for c in candidates],
        workers,
        progress,
        announce=True,
        scheduler=scheduler,
        memory=[c.memory[0] for c in candidates],
        memory_limit=min(limits, default=None),
    )
    return [_outcome(c, r or {}) for c, r in zip(candidates, results)]


def _outcome(candidate: Candidate, values: dict[str, Any]) -> Outcome:
    error = values.get("error")
    if error is None and values.get("throughput_samples_per_s") is None:
        error = "the run's summary has no throughput_samples_per_s"
    outcome = Outcome(candidate, error=str(error or ""))
    for key in (
        "iteration_time_s",
        "throughput_samples_per_s",
        "tflops_per_gpu",
        "peak_bytes",
        "capacity_bytes",
        "fits",
        "time_to_train_s",
        "cost",
        "played_replicas",
        "replicas",
    ):
        if values.get(key) is not None:
            setattr(outcome, key, values[key])
    return outcome


# --------------------------------------------------------------------------- verification


VERIFY_NETWORKS = ("auto", "flow", "analytical")
"""What ``--verify-network`` accepts: the network model of the verifying runs, or ``auto``."""

VERIFY_ANALYTICAL_AT = FOLD_ALL_AT
"""GPUs from which ``auto`` verifies with the analytical network instead of the flow-level
model: every replica at flow level is tens of millions of sends there (GPT-3 175B on 16,384
GPUs: 73 M sends, 96 minutes and 7.7 GB), while every replica with the analytical network
plays one replica of each class of identical ones (4,096 GPUs and more) and takes seconds."""


def verify_network(asked: str, devices: int) -> str:
    """The network model verification runs with: ``asked``, or for ``auto`` the flow-level
    model below :data:`VERIFY_ANALYTICAL_AT` GPUs and the analytical network from there."""
    if asked != "auto":
        return asked
    return "flow" if devices < VERIFY_ANALYTICAL_AT else "analytical"


def every_replica_document(doc: dict[str, Any], network: str = "flow") -> dict[str, Any]:
    """``doc`` simulated in full by the network model ``network``: ``network.model`` set
    and, for the hybrid strategy, every data-parallel replica (``simulate_replicas: all``)."""
    out = copy.deepcopy(doc)
    out["network"] = {**(out.get("network") or {}), "model": network}
    if "parallelism" in out:
        out["parallelism"] = {**out["parallelism"], "simulate_replicas": "all"}
    return out


def flow_document(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` simulated in full by the flow-level model (:func:`every_replica_document`)."""
    return every_replica_document(doc, "flow")


@dataclass
class Verification:
    """One of the top configurations simulated again, every replica, by ``network``."""

    fast: Outcome
    """The outcome the plan ranked (its network model)."""
    flow: Outcome
    """The same configuration, every replica, by ``network`` (the flow-level model unless
    verification ran with another)."""
    flow_rank: int | None = None
    """Its rank among the verified configurations by verified throughput (None: failed)."""
    network: str = "flow"
    """The network model of the verifying run."""

    @property
    def difference(self) -> float | None:
        """Fast iteration time / verified iteration time - 1 (None if either failed)."""
        fast, flow = self.fast.iteration_time_s, self.flow.iteration_time_s
        if not self.flow.ok or not fast or not flow:
            return None
        return fast / flow - 1.0


def verify(
    ranked: Sequence[Outcome],
    k: int,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    scheduler: str | None = None,
    network: str = "flow",
) -> list[Verification]:
    """Simulate the first ``k`` configurations of ``ranked`` that ran, every replica, with
    the network model ``network`` (:func:`every_replica_document`; default the flow-level
    model) and rank them among themselves by throughput."""
    top = [o for o in ranked if o.ok][:k]
    candidates = [
        Candidate(
            o.candidate.index,
            o.point,
            every_replica_document(o.candidate.doc, network),
            o.candidate.source,
        )
        for o in top
    ]
    flows = run_candidates(candidates, workers, progress=progress, scheduler=scheduler)
    out = [Verification(fast, flow, network=network) for fast, flow in zip(top, flows, strict=True)]
    ok = sorted(
        (v for v in out if v.flow.ok),
        key=lambda v: (-(v.flow.throughput_samples_per_s or 0.0), v.fast.rank or 0),
    )
    for i, v in enumerate(ok, start=1):
        v.flow_rank = i
    return out


def same_order(verifications: Sequence[Verification]) -> bool:
    """True when the flow-level model ranks the verified configurations as the plan did."""
    return all(v.flow_rank == i for i, v in enumerate(verifications, start=1))


VERIFY_COLUMNS = ("rank", "dp/tp/pp/mb/zero", "iteration", "flow iteration", "diff", "flow rank")
"""The verification table's columns (flow-level verification; :func:`verify_columns`)."""


def verify_columns(network: str) -> tuple[str, ...]:
    """The verification table's columns when it ran with ``network``: :data:`VERIFY_COLUMNS`
    for the flow-level model, else the verified ones named for every replica."""
    if network == "flow":
        return VERIFY_COLUMNS
    return (*VERIFY_COLUMNS[:3], "all-replica iteration", "diff", "all-replica rank")


def verified_by(network: str) -> str:
    """What verified, in words: the flow-level model, or every replica with ``network``."""
    return "the flow-level model" if network == "flow" else f"every replica ({network} network)"


def verification_lines(verifications: Sequence[Verification], network: str) -> list[str]:
    """The verified configurations side by side (plan's time, verified time, difference,
    verified rank) as aligned text, and a line saying whether the order holds; ``network``
    is the plan's network model."""
    from ...units import format_time

    checked = verifications[0].network if verifications else "flow"
    by = verified_by(checked)
    rows = []
    for v in verifications:
        diff = v.difference
        rows.append(
            [
                str(v.fast.rank),
                point_label(v.fast.point),
                format_time(v.fast.iteration_time_s or 0.0),
                format_time(v.flow.iteration_time_s) if v.flow.ok else "failed",
                "-" if diff is None else f"{diff:+.1%}",
                dash(v.flow_rank),
            ]
        )
    columns = verify_columns(checked)
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for v in verifications:
        if not v.flow.ok:
            what = "flow-level run" if checked == "flow" else f"every-replica run ({checked})"
            lines.append(f"{what} of {v.fast.point.label()} failed: {shorten(v.flow.error)}")
    folded = [v.flow for v in verifications if v.flow.ok and v.flow.played_replicas]
    if folded:
        played = ", ".join(f"{o.played_replicas} of {o.replicas}" for o in folded)
        lines.append(
            f"every replica: {len(folded)} of these played one replica of each class of "
            f"identical ones for all ({played} replicas; the rest proved identical to them)"
        )
    if same_order(verifications):
        lines.append(f"{by} ranks these {len(verifications)} as {network} does")
    else:
        order = ", ".join(str(v.fast.rank) for v in sorted(verifications, key=_flow_key))
        lines.append(f"{by} ranks them differently: {order} (plan ranks)")
    return lines


def _flow_key(v: Verification) -> tuple[int, int]:
    return (v.flow_rank if v.flow_rank is not None else 1 << 30, v.fast.rank or 0)
