"""Simulating plan candidates, and verifying the best ones with the flow-level model."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import ClustersimError
from ...metrics import FlopTrainingSummary
from ..runner import run_all

if TYPE_CHECKING:
    pass

from .candidates import Candidate, error_message, shorten
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
        summary = simulate(parse_scenario(doc, source=source)).typed_summary
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
    ):
        if values.get(key) is not None:
            setattr(outcome, key, values[key])
    return outcome


# --------------------------------------------------------------------------- verification


def flow_document(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` simulated in full by the flow-level model: ``network.model: flow`` and, for the
    hybrid strategy, every data-parallel replica (``simulate_replicas: all``)."""
    out = copy.deepcopy(doc)
    out["network"] = {**(out.get("network") or {}), "model": "flow"}
    if "parallelism" in out:
        out["parallelism"] = {**out["parallelism"], "simulate_replicas": "all"}
    return out


@dataclass
class Verification:
    """One of the top configurations simulated again by the flow-level model."""

    fast: Outcome
    """The outcome the plan ranked (its network model)."""
    flow: Outcome
    """The same configuration, flow-level, every replica."""
    flow_rank: int | None = None
    """Its rank among the verified configurations by flow-level throughput (None: failed)."""

    @property
    def difference(self) -> float | None:
        """Fast iteration time / flow-level iteration time - 1 (None if either failed)."""
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
) -> list[Verification]:
    """Simulate the first ``k`` configurations of ``ranked`` that ran with the flow-level
    model (:func:`flow_document`) and rank them among themselves by throughput."""
    top = [o for o in ranked if o.ok][:k]
    candidates = [
        Candidate(o.candidate.index, o.point, flow_document(o.candidate.doc), o.candidate.source)
        for o in top
    ]
    flows = run_candidates(candidates, workers, progress=progress, scheduler=scheduler)
    out = [Verification(fast, flow) for fast, flow in zip(top, flows, strict=True)]
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


def verification_lines(verifications: Sequence[Verification], network: str) -> list[str]:
    """The verified configurations side by side (plan's time, flow-level time, difference,
    flow-level rank) as aligned text, and a line saying whether the order holds."""
    from ...units import format_time

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
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(VERIFY_COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(VERIFY_COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for v in verifications:
        if not v.flow.ok:
            lines.append(
                f"flow-level run of {v.fast.point.label()} failed: {shorten(v.flow.error)}"
            )
    if same_order(verifications):
        lines.append(f"the flow-level model ranks these {len(verifications)} as {network} does")
    else:
        order = ", ".join(str(v.fast.rank) for v in sorted(verifications, key=_flow_key))
        lines.append(f"the flow-level model ranks them differently: {order} (plan ranks)")
    return lines


def _flow_key(v: Verification) -> tuple[int, int]:
    return (v.flow_rank if v.flow_rank is not None else 1 << 30, v.fast.rank or 0)
