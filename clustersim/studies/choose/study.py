"""Choosing a cluster: plan's search on every candidate cluster, all simulations in one pool
(one progress bar), each cluster's best configuration that fits, priced, and the Pareto
frontier of cost and time to train.

```python
from clustersim.studies import choose, plan

choices = choose.load_choices("scenarios/choose/llama2_70b_a100_vs_h100.yaml")
options = choose.plan_options(choices.spec.search)
found = choose.enumerate_clusters(choices, options)
results = choose.results(choices, found, choose.run_clusters(found, workers=2))
print(choose.verdict(results, choices.spec.currency))
```

Nothing here prints; ``clustersim choose`` shows the progress and the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ScenarioError
from .. import plan
from .choices import Choices, ClusterOption
from .costs import Bill, cluster_bill
from .frontier import pareto_optimal
from .spec import SearchSpec


def plan_options(search: SearchSpec, **flags: Any) -> plan.PlanOptions:
    """Plan's options for every cluster: the file's ``search`` with the flags given (not
    None) laid over it key by key; plan's defaults for what neither gives."""
    given = {
        "tp": tuple(search.tp) if search.tp else None,
        "pp": tuple(search.pp) if search.pp else None,
        "micro_batch": tuple(search.micro_batch) if search.micro_batch else None,
        "zero": search.zero_stages(),
        "chunks": tuple(search.chunks) if search.chunks else None,
    }
    given.update({key: value for key, value in flags.items() if value is not None})
    return replace(plan.PlanOptions(), **{k: v for k, v in given.items() if v is not None})


def enumerate_clusters(choices: Choices, options: plan.PlanOptions) -> list[plan.Enumeration]:
    """Plan's candidates on every cluster (:func:`clustersim.studies.plan.enumerate_candidates`),
    in the file's order; cheap, nothing simulated.  A problem names the cluster it came from."""
    found = []
    for option in choices.options:
        try:
            found.append(plan.enumerate_candidates(option.doc, choices.workload_source, options))
        except ScenarioError as exc:
            where = (
                f"{exc.source} (with the cluster of {choices.source} {option.path}, {option.name})"
            )
            raise ScenarioError(exc.problems, where) from None
    return found


def run_clusters(
    found: Sequence[plan.Enumeration],
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    scheduler: str | None = None,
) -> list[list[plan.Outcome]]:
    """Every cluster's candidates simulated in one pool (:func:`plan.run_candidates`: local
    processes or the Dask cluster ``scheduler``), ranked per cluster by plan's ranking."""
    every = [c for f in found for c in f.candidates]
    outcomes = plan.run_candidates(every, workers, progress, scheduler) if every else []
    ranked, start = [], 0
    for f in found:
        ranked.append(plan.rank(outcomes[start : start + len(f.candidates)]))
        start += len(f.candidates)
    return ranked


@dataclass
class ClusterResult:
    """One cluster's answer: its best configuration that fits, priced (or why there is none)."""

    option: ClusterOption
    found: plan.Enumeration
    ranked: list[plan.Outcome]
    best: plan.Outcome | None = None
    """The highest-throughput configuration that fits (plan's best); None if none does."""
    bill: Bill | None = None
    """What training on it costs (None: nothing fits)."""
    pareto: bool = False
    """No other cluster is both as cheap or cheaper and as fast or faster, one strictly."""

    @property
    def name(self) -> str:
        return self.option.name

    @property
    def fits(self) -> bool:
        return self.bill is not None

    def why_none(self) -> str:
        """Why this cluster has no priced configuration ("" when it has one)."""
        if self.fits:
            return ""
        if not self.found.candidates:
            reasons = "; ".join(list(self.found.skipped)[:2]) or "; ".join(self.found.notes[:1])
            return f"no valid configuration ({reasons})" if reasons else "no valid configuration"
        if not any(o.ok for o in self.ranked):
            return "every simulation failed: " + plan.shorten(self.ranked[0].error, 80)
        closest = min(
            (o for o in self.ranked if o.ok),
            key=lambda o: ((o.peak_bytes or 0) / (o.capacity_bytes or 1), o.rank or 0),
        )
        return (
            f"nothing fits in device memory (closest: {closest.point.label()}, "
            f"{(closest.peak_bytes or 0) / 1e9:.1f} of {(closest.capacity_bytes or 0) / 1e9:.0f} GB)"
        )


def results(
    choices: Choices, found: Sequence[plan.Enumeration], ranked: Sequence[list[plan.Outcome]]
) -> list[ClusterResult]:
    """Each cluster's :class:`ClusterResult`, cheapest first (total cost, then time, then
    the file's order); clusters where nothing fits last, in the file's order."""
    out = []
    for option, f, r in zip(choices.options, found, ranked, strict=True):
        result = ClusterResult(option, f, r, plan.best_fitting(r))
        if result.best is not None:
            result.bill = _bill(choices, option, result.best)
        out.append(result)
    priced = [r for r in out if r.bill is not None]
    marks = pareto_optimal([_point(r) for r in priced])
    for result, mark in zip(priced, marks):
        result.pareto = mark
    priced.sort(key=lambda r: (*_point(r), r.option.index))
    return priced + [r for r in out if r.bill is None]


def _point(result: ClusterResult) -> tuple[float, float]:
    """(total cost, seconds to train) of a priced result."""
    assert result.bill is not None
    return (result.bill.total_cost, result.bill.time_to_train_s)


def _bill(choices: Choices, option: ClusterOption, best: plan.Outcome) -> Bill:
    assert best.iteration_time_s is not None and best.throughput_samples_per_s is not None
    return cluster_bill(
        iteration_time_s=best.iteration_time_s,
        samples_per_s=best.throughput_samples_per_s,
        seq=choices.seq,
        tokens=choices.tokens,
        tokens_per_iteration=choices.tokens_per_iteration,
        gpus=option.gpus,
        hourly_price=option.hourly_price,
        watts=option.watts,
        energy_price=choices.spec.energy_price,
    )
