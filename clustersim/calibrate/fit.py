"""The fit: node figures that make clustersim's own collective model give the measured times.

For every measured point (a run's size) clustersim simulates the run's operation over the
run's nodes -- ``algorithm``, ``protocol`` and ``channels`` all ``auto``, as a scenario's
``collective`` workload does, but for the algorithm and protocol a log says its launch
forced (:func:`forced_choice`) or NCCL ran at that size (:func:`point_choice`) -- on a
two-tier cluster of the candidate node, and the fit minimises the sum over the calibration
points of the soft-L1 loss of ``log(predicted / measured)`` (relative errors, as times span
five orders of magnitude; squares below 5%, linear above, so that the few sizes where NCCL
and clustersim run different algorithms do not drag the figures off the others) by
Levenberg-Marquardt with finite-difference derivatives, bandwidths on a log scale, latencies
(0 or more) linearly, starting from the best of a scan of each bandwidth over factors 1/4 to
4 of the base node's (:func:`scan`: the model is piecewise and not monotonic, as NCCL's
channel search is). It is deterministic: no random start, a fixed step, a fixed stopping
rule.

The model the fit uses is the one the predictions are made with (``model``):

* ``analytical`` -- each point priced by the congestion-aware analytical model, the fit run
  on it directly;
* ``flow`` (a scenario's default) -- the flow-level model plays every point, which is costly
  for trees of many pieces; the fit then runs on the analytical model corrected per point by
  the ratio flow / analytical at the current figures, and after each fit the flow model is
  played again at the fitted figures, until the corrected model and the flow model agree
  within :data:`AGREE` (at most :data:`MAX_PASSES` plays).  The reported predictions are the
  flow model's.

A figure the logs cannot determine keeps the base node's value, and the result says why: no
log of the scope it needs (:mod:`.figures`), or a change of 10% (1 us for a latency) moving
no calibration point by :data:`SEEN` or more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..collectives import CollectiveCall
from ..errors import Problem, ScenarioError
from ..scenario.shorthand import scenario_of
from ..studies.collective_sweep import group_devices, run_point
from ..topology import build_topology
from .figures import FIGURES, Figure, Spec, couple_pcie
from .holdout import Point
from .logs import Run

AGREE = 0.005
"""Largest |log(flow / corrected analytical)| over the calibration points at which the flow
model's fit stops (0.5%)."""
MAX_PASSES = 3
"""Most plays of the flow model in a fit."""
SEEN = 0.005
"""Smallest relative change of some calibration point (0.5%) that makes a figure
determined by the logs, for a change of 10% (a bandwidth) or 1 us (a latency)."""
MAX_ITERATIONS = 12
"""Most Levenberg-Marquardt steps."""
TOLERANCE = 1e-4
"""A kept step that lowers the sum of squares by less than this share ends the fit."""
EXACT = 1e-12
"""A mean squared residual below this (relative errors of 1e-6) ends the fit: the model
meets the points."""
STEPS = {True: 0.03, False: 0.3}
"""Difference step: of the log of a bandwidth (3%), or in us of a latency (0.3 us).  The
model is piecewise linear (channels and protocols change at thresholds) with flat stretches;
a step this wide sees across the small ones, where a tiny step would see no slope at all."""
GRID = tuple(2.0 ** (k / 2) for k in range(-4, 5) if k != 0)
"""Factors a bandwidth is tried at before the local fit (1/4 to 4, steps of 2^(1/2))."""
FINE = 2.0**0.25
"""Then the best of those is tried this factor up and down."""
ROBUST = 0.05
"""Scale of the soft-L1 loss (a relative error of 5%): errors below it count as squares,
larger ones as their size."""
BOUNDS = {True: (math.log(1 / 20), math.log(20)), False: (0.0, 1000.0)}
"""Range of a fitted figure: a bandwidth 1/20 to 20 times the base's (log scale), a latency
0 to 1000 us."""


@dataclass(frozen=True)
class Prediction:
    """clustersim's time of one point, and what ran."""

    time_s: float
    chosen: str
    """Algorithm and protocol (``ring/Simple``)."""
    channels: int


@dataclass
class FigureResult:
    """A figure of the calibrated node: base and fitted value, or why it was kept."""

    figure: Figure
    base: float
    value: float
    determined: bool
    reason: str = ""
    """Why it keeps the base's value (empty when fitted)."""
    points: list[Point] = field(default_factory=list)
    """The calibration points that determined it."""


@dataclass
class Calibration:
    """The outcome of a fit."""

    spec: Spec
    """The calibrated node spec (values as a catalog file writes them)."""
    figures: list[FigureResult]
    points: list[Point]
    predictions: list[Prediction]
    """clustersim's prediction of each point at the calibrated figures (``model``'s)."""
    model: str
    passes: int = 0
    """Plays of the flow model (0 with the analytical model)."""

    def error(self, index: int) -> float:
        """Relative error of point ``index``: predicted / measured - 1."""
        return self.predictions[index].time_s / self.points[index].row.time_s - 1


def cluster_of(spec: Mapping[str, Any], nodes: int) -> dict[str, Any]:
    """The ``cluster:`` section a run of ``nodes`` nodes of ``spec`` is simulated on: a
    two-tier cluster, every node under one non-blocking switch."""
    return {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": dict(spec)}


NCCL_ALGORITHMS = {"ring": "ring", "tree": "double_tree"}
"""``NCCL_ALGO`` values (any case) that name one algorithm of clustersim's: NCCL's Ring and
its Tree (the double binary tree).  Lists, exclusions (``^NVLS``) and per-operation forms
are not one algorithm: clustersim then chooses as NCCL's tuner does (``auto``)."""
NCCL_PROTOCOLS = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
"""``NCCL_PROTO`` values (any case) that name one protocol."""


def forced_choice(run: Run) -> tuple[str, str]:
    """(algorithm, protocol) of the run's points: the ones its launch forced where the log
    says so (``NCCL_ALGO`` / ``NCCL_PROTO`` set by environment) and the run's operation can
    run them, else ``auto``.  A log of a ring forced on two nodes (NVIDIA's advice for
    measuring the network) is fitted on clustersim's ring, not on the tree ``auto`` picks."""
    from ..collectives.auto import candidates

    environment = run.nccl.environment
    algorithm = NCCL_ALGORITHMS.get(environment.get("NCCL_ALGO", "").lower(), "auto")
    if algorithm not in candidates(run.op or ""):
        algorithm = "auto"
    protocol = NCCL_PROTOCOLS.get(environment.get("NCCL_PROTO", "").lower(), "auto")
    return algorithm, protocol


LOGGED_ALGORITHMS = {"RING": "ring", "TREE": "double_tree"}
"""NCCL's algorithm names in its per-size lines (``AllReduce: 4194304 Bytes -> Algo RING
proto SIMPLE``) that are one algorithm of clustersim's; others (NVLS, NVLS_TREE, COLLNET_*,
PAT) leave the run's choice (:func:`forced_choice`)."""
LOGGED_PROTOCOLS = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}


def point_choice(run: Run, size_bytes: int) -> tuple[str, str]:
    """(algorithm, protocol) of the run's point of ``size_bytes``: what NCCL ran at that
    size where the log's NCCL_DEBUG lines say so and clustersim can run it, else the run's
    (:func:`forced_choice`).  A fit then compares NCCL's time of an algorithm with
    clustersim's time of the same one, at every size NCCL switched at."""
    from ..collectives.auto import candidates

    algorithm, protocol = forced_choice(run)
    logged = run.nccl.algorithms.get(size_bytes, "")
    name, _, proto = logged.partition("/")
    if LOGGED_ALGORITHMS.get(name.upper(), "auto") in candidates(run.op or ""):
        algorithm = LOGGED_ALGORITHMS[name.upper()]
        protocol = LOGGED_PROTOCOLS.get(proto.upper(), protocol)
    return algorithm, protocol


def predict(spec: Mapping[str, Any], points: Sequence[Point], model: str) -> list[Prediction]:
    """clustersim's prediction of every point on nodes of ``spec`` (``model``: ``flow`` or
    ``analytical``); each run's cluster built once."""
    out: dict[int, Prediction] = {}
    by_run: dict[int, list[int]] = {}
    for i, point in enumerate(points):
        by_run.setdefault(id(point.run), []).append(i)
    for indices in by_run.values():
        run = points[indices[0]].run
        try:
            scenario = scenario_of(cluster_of(spec, run.nodes), "calibrate")
        except ScenarioError as exc:
            raise exc.with_source(run.file) from None
        topology = build_topology(scenario.cluster)
        devices = group_devices(topology)
        for i in indices:
            algorithm, protocol = point_choice(run, points[i].row.size_bytes)
            size = float(points[i].row.size_bytes)
            call = CollectiveCall(run.op or "", devices, size, algorithm, protocol=protocol)
            row = run_point(scenario, topology, call, model, 1, "auto")
            out[i] = Prediction(row["time_s"], row["chosen"], row["channels"])
    return [out[i] for i in range(len(points))]


class _Problem:
    """The least-squares problem over the free figures: parameters <-> node spec."""

    def __init__(self, spec: Spec, free: Sequence[Figure], points: Sequence[Point]) -> None:
        self.spec = spec
        self.free = list(free)
        self.points = list(points)
        self.base = np.array([figure.get(spec) for figure in self.free])
        self.measured = np.log([point.row.time_s for point in self.points])
        self.correction = np.zeros(len(self.points))
        self.evaluations = 0
        self.tick: Callable[[], None] = lambda: None
        """Called after every sweep of the points (progress)."""

    def values(self, x: np.ndarray) -> dict[str, float]:
        """Parameters -> figure values (in their units)."""
        return {
            figure.key: float(self.base[j] * math.exp(x[j]) if figure.log else x[j])
            for j, figure in enumerate(self.free)
        }

    def start(self) -> np.ndarray:
        return np.array([0.0 if f.log else self.base[j] for j, f in enumerate(self.free)])

    def node(self, x: np.ndarray) -> Spec:
        """The node spec at parameters ``x``."""
        values = self.values(x)
        spec = self.spec
        for figure in self.free:
            spec = figure.put(spec, values[figure.key])
        return couple_pcie(spec, values)

    def log_times(self, x: np.ndarray, model: str) -> np.ndarray:
        self.evaluations += 1
        predictions = predict(self.node(x), self.points, model)
        self.tick()
        return np.log([p.time_s for p in predictions])

    def residuals(self, x: np.ndarray) -> np.ndarray:
        """Every calibration point's log(corrected analytical prediction / measured), through
        the soft-L1 loss (:func:`soft_l1`)."""
        return soft_l1(self.log_times(x, "analytical") + self.correction - self.measured)


def soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the soft-L1 loss 2 d^2 (sqrt(1 + (r/d)^2) - 1), d =
    :data:`ROBUST`: quadratic below d, growing as |r| above it, so that a few points the model
    cannot meet (where NCCL switches algorithm at another size than clustersim does) do not
    pull the figures away from the many it can."""
    loss = 2 * ROBUST**2 * (np.sqrt(1 + (r / ROBUST) ** 2) - 1)
    return np.sign(r) * np.sqrt(loss)


def _bounds(free: Sequence[Figure], problem: _Problem) -> tuple[np.ndarray, np.ndarray]:
    low = np.array([BOUNDS[f.log][0] for f in free])
    high = np.array([BOUNDS[f.log][1] for f in free])
    return low, high


def _jacobian(
    residual: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    r: np.ndarray,
    high: np.ndarray,
    steps: np.ndarray,
) -> np.ndarray:
    columns = []
    for j in range(len(x)):
        step = steps[j] if x[j] + steps[j] <= high[j] else -steps[j]
        moved = x.copy()
        moved[j] += step
        columns.append((residual(moved) - r) / step)
    return np.stack(columns, axis=1)


def least_squares(
    residual: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    steps: np.ndarray,
) -> np.ndarray:
    """Levenberg-Marquardt on ``residual`` from ``x0`` within [``low``, ``high``] (each step
    clipped into the box): a step is kept if it lowers the sum of squares, the damping
    divided by 3 then and multiplied by 4 otherwise; a parameter at a bound that the slope
    pushes further out is held there (a projected step); stops when a kept step lowers the sum by
    less than :data:`TOLERANCE` of it, when the points are met (:data:`EXACT`), or after
    :data:`MAX_ITERATIONS` steps."""
    x = np.clip(np.asarray(x0, dtype=float), low, high)
    r = residual(x)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(MAX_ITERATIONS):
        jac = _jacobian(residual, x, r, high, steps)
        gradient = jac.T @ r
        # a parameter at a bound that the slope pushes further out stays there
        held = ((x <= low) & (gradient > 0)) | ((x >= high) & (gradient < 0))
        jac[:, held] = 0.0
        normal = jac.T @ jac
        gradient = jac.T @ r
        if not np.any(gradient):
            break
        improved = False
        for _ in range(6):
            a = normal + damping * np.diag(np.diag(normal) + 1e-12)
            step = np.linalg.lstsq(a, -gradient, rcond=None)[0]
            trial = np.clip(x + step, low, high)
            r_trial = residual(trial)
            cost_trial = float(r_trial @ r_trial)
            if cost_trial < cost:
                gain = (cost - cost_trial) / max(cost, 1e-300)
                x, r, cost = trial, r_trial, cost_trial
                damping = max(damping / 3, 1e-9)
                improved = True
                break
            damping *= 4
        if not improved or gain < TOLERANCE or cost < EXACT * len(r):
            break
    return x


def scan(
    residual: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    logs: Sequence[bool],
) -> np.ndarray:
    """``x0`` with each bandwidth (``logs[j]``) moved, one after the other, to the best of
    :data:`GRID` (factors of its value), then to the better of that best's neighbours at
    :data:`FINE`: clustersim's model is not monotonic in a bandwidth (NCCL's channel search
    picks other speeds and counts past thresholds), so a local method alone can stop in the
    wrong valley."""
    x = np.asarray(x0, dtype=float).copy()
    r = residual(x)
    best = float(r @ r)
    for j, is_log in enumerate(logs):
        if not is_log:
            continue
        for factors in (GRID, (FINE, 1 / FINE)):
            start = x[j]
            for factor in factors:
                trial = x.copy()
                trial[j] = start + math.log(factor)
                r = residual(trial)
                cost = float(r @ r)
                if cost < best:
                    best, x = cost, trial
    return x


def _sensitivities(problem: _Problem, x: np.ndarray, model: str) -> np.ndarray:
    """Per free figure: the largest |change| of a calibration point's log time for a change
    of 10% (bandwidth) or 1 us (latency)."""
    here = problem.log_times(x, model)
    out = []
    for j, figure in enumerate(problem.free):
        moved = x.copy()
        moved[j] += math.log(1.1) if figure.log else 1.0
        out.append(float(np.max(np.abs(problem.log_times(moved, model) - here))))
    return np.array(out)


LATENCY_KEPT = (
    "clustersim prices a ring's latency by NCCL's own per-hop model "
    "(collectives/ring_latency.py), which a node's link latency does not enter; only trees "
    "add it, so a fit would trade it against the tree's choice instead of measuring it"
)
"""Why link latencies are not fitted since rings follow NCCL's latency model (issue 41)."""
FITTED_LATENCIES = frozenset({"nic.plugin_latency"})
"""The latencies a fit may move: the network plugin's, which NCCL's latency model adds to
every network step of rings and trees alike (``cluster.node.nic.plugin_latency``)."""


def _scope_reason(figure: Figure, points: Sequence[Point]) -> str:
    """Why no calibration point can see ``figure`` (empty if some can)."""
    if figure.unit == "us" and figure.key not in FITTED_LATENCIES:
        return LATENCY_KEPT
    runs = {id(p.run): p.run for p in points}.values()
    if figure.scope == "intra" and not any(r.nodes == 1 and r.ranks >= 2 for r in runs):
        return (
            "no log of one node: over several nodes the intra-node hops cannot be told from "
            "the NIC's"
        )
    if figure.scope == "inter" and not any(r.nodes >= 2 for r in runs):
        return "no log spans two nodes or more: one node's logs say nothing of the NICs"
    return ""


def calibrate(
    base: Spec,
    points: Sequence[Point],
    model: str = "flow",
    tick: Callable[[], None] = lambda: None,
) -> Calibration:
    """Fit the figures of node ``base`` (a working spec, :func:`.figures.working_spec`) to the
    calibration points among ``points`` (those not held out), with clustersim's ``model``;
    predict every point at the result.  ``tick`` after every sweep of the points
    (progress: about :func:`sweeps_estimate` of them)."""
    fitted_points = [p for p in points if not p.held_out]
    if len(fitted_points) < 2:
        raise ScenarioError(
            Problem(
                "--hold-out",
                f"leaves {len(fitted_points)} point(s) to fit",
                "a hold-out that keeps 2 points or more of the logs for the fit",
            )
        )
    results, free = _candidates(base, fitted_points)
    problem = _Problem(base, free, fitted_points)
    problem.tick = tick
    x = problem.start()
    if free:
        sensitivity = _sensitivities(problem, x, "analytical")
        seen = [j for j in range(len(free)) if sensitivity[j] >= SEEN]
        for j, figure in enumerate(free):
            if j not in seen:
                results[figure.key].reason = (
                    f"a change of {'10%' if figure.log else '1 us'} moves no calibration "
                    f"point by {SEEN:.1%} or more: the logs do not see it"
                )
        free = [free[j] for j in seen]
        problem = _Problem(base, free, fitted_points)
        x = problem.start()
    low, high = _bounds(free, problem)
    steps = np.array([STEPS[f.log] for f in free])
    passes = 0
    if free:
        problem.tick = tick
        x = scan(problem.residuals, x, [f.log for f in free])
        x = least_squares(problem.residuals, x, low, high, steps)
        while model == "flow" and passes < MAX_PASSES:
            passes += 1
            flow = problem.log_times(x, "flow")
            corrected = problem.log_times(x, "analytical") + problem.correction
            if float(np.max(np.abs(flow - corrected))) <= AGREE:
                break
            problem.correction = flow - problem.log_times(x, "analytical")
            x = least_squares(problem.residuals, x, low, high, steps)
    spec = problem.node(x) if free else base
    values = problem.values(x) if free else {}
    for figure in free:
        result = results[figure.key]
        result.value, result.determined, result.points = values[figure.key], True, fitted_points
    predictions = predict(spec, points, model)
    tick()
    ordered = [results[f.key] for f in FIGURES if f.key in results]
    return Calibration(spec, ordered, list(points), predictions, model, passes)


def sweeps_estimate(free: int, bandwidths: int, model: str) -> int:
    """About how many sweeps of the points a fit of ``free`` figures (``bandwidths`` of them
    bandwidths) makes: the sensitivities, the scan, a few Levenberg-Marquardt steps, the
    flow passes and the final prediction (for a progress bar)."""
    fit = 1 + (len(GRID) + 2) * bandwidths + 4 * (free + 2)
    passes = 2 if model == "flow" else 0
    return free + 1 + fit * (1 + passes) + passes + 1


def _candidates(
    base: Spec, points: Sequence[Point]
) -> tuple[dict[str, FigureResult], list[Figure]]:
    """Every figure of ``base`` (its result, kept unless fitted) and those the logs' scope
    lets the fit try."""
    results, free = {}, []
    for figure in FIGURES:
        if not figure.applies(base):
            continue
        value = figure.get(base)
        reason = _scope_reason(figure, points)
        results[figure.key] = FigureResult(figure, value, value, False, reason)
        if not reason:
            free.append(figure)
    return results, free
