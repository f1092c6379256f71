"""Sampled failure histories, in wall-clock chunks, for many samples at once.

Failures are a property of the hardware, not of the job: they happen in wall-clock
time whatever the job is doing (computing, checkpointing, restarting).  So one
sample's failure history does not depend on the checkpoint interval, and a search
over intervals with the same seed compares them on the same histories (common
random numbers).

The history is drawn chunk by chunk, ``[j L, (j + 1) L)`` for ``j = 0, 1, ...``, for
all samples at once, from one generator, in a fixed order of draws; a chunk is
drawn only when some sample still runs, and chunk ``j`` holds the same failures
whoever asks.  Per component class and chunk ``[a, b)``:

* components never failed so far (all new at time 0): how many fail first in the
  chunk is binomial with ``q = 1 - S(b) / S(a)``, ``S(t) = exp(-(t / lam) ** k)`` the
  Weibull survival; each failure time is drawn from the lifetime conditioned on
  ``a <= t < b`` by inversion: ``(t / lam) ** k = (a / lam) ** k - log(1 - u q)``;
* a replaced component (renewal) fails again one fresh lifetime after its failure
  (after its repair, when it does not stop the job); those falling beyond ``b`` wait
  for their chunk.

For exponential lifetimes (k = 1) this is exactly a Poisson process of rate
``components / mtbf_s``; for Weibull it is the superposition of per-component
renewal processes, starting from new hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .model import FailureProcess, ScheduledFailure

STOP, DEGRADE, RECOVER = 0, 1, 2
"""Event kinds: a job-stopping failure; a component the job runs without goes down;
it comes back."""


@dataclass(frozen=True)
class Chunk:
    """The events of one wall-clock chunk of every sample, sorted by sample, then time.

    Sample ``s`` owns positions ``offsets[s]`` to ``offsets[s + 1]`` of the lists (plain
    Python lists: the replay reads them one by one)."""

    end_s: float
    offsets: list[int]
    times_s: list[float]
    kinds: list[int]
    causes: list[int]
    """Index into the stream's ``causes``."""
    extra_s: list[float]
    """For a stop: seconds the job waits before its restart begins (a scheduled repair)."""


_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


class _Components:
    """The renewal state of one :class:`FailureProcess` in every sample."""

    def __init__(self, process: FailureProcess, samples: int) -> None:
        self.k = process.weibull_shape
        self.scale_s = process.weibull_scale_s
        self.renew_after_s = 0.0 if process.stops_job else process.repair_s
        self.samples = samples
        self.never_failed = np.full(samples, process.components, dtype=np.int64)
        self.pending_sample = _EMPTY_I
        self.pending_s = _EMPTY_F

    def _cumulative_hazard(self, t_s: float) -> float:
        return (t_s / self.scale_s) ** self.k

    def failures(self, start_s: float, end_s: float, rng: np.random.Generator):
        """(sample, time) of the failures in ``[start_s, end_s)``, in no order."""
        ha = self._cumulative_hazard(start_s)
        hb = self._cumulative_hazard(end_s)
        q = float(-np.expm1(-(hb - ha))) if np.isfinite(hb - ha) else 1.0
        fresh = rng.binomial(self.never_failed, q)
        self.never_failed -= fresh
        sample = np.repeat(np.arange(self.samples, dtype=np.int64), fresh)
        u = rng.random(sample.size)
        first_s = self.scale_s * (ha - np.log1p(-u * q)) ** (1.0 / self.k)
        first_s = np.maximum(first_s, start_s)  # rounding at the chunk's start
        cand_sample = np.concatenate([self.pending_sample, sample])
        cand_s = np.concatenate([self.pending_s, first_s])
        out_sample: list[np.ndarray] = []
        out_s: list[np.ndarray] = []
        later_sample: list[np.ndarray] = []
        later_s: list[np.ndarray] = []
        while cand_s.size:
            inside = cand_s < end_s
            later_sample.append(cand_sample[~inside])
            later_s.append(cand_s[~inside])
            cand_sample, cand_s = cand_sample[inside], cand_s[inside]
            out_sample.append(cand_sample)
            out_s.append(cand_s)
            lifetimes = self.scale_s * rng.weibull(self.k, cand_s.size)
            cand_s = cand_s + self.renew_after_s + lifetimes
        self.pending_sample = np.concatenate([_EMPTY_I, *later_sample])
        self.pending_s = np.concatenate([_EMPTY_F, *later_s])
        return np.concatenate([_EMPTY_I, *out_sample]), np.concatenate([_EMPTY_F, *out_s])


class FailureStream:
    """Draws the failure events of ``samples`` samples, one chunk of ``chunk_s`` seconds
    at a time (:meth:`next_chunk`), from ``rng``."""

    def __init__(
        self,
        failures: Sequence[FailureProcess],
        scheduled: Sequence[ScheduledFailure],
        samples: int,
        rng: np.random.Generator,
        chunk_s: float,
    ) -> None:
        self.causes: list[str] = list(dict.fromkeys([f.cause for f in (*failures, *scheduled)]))
        index = {cause: i for i, cause in enumerate(self.causes)}
        self.samples = samples
        self.rng = rng
        self.chunk_s = chunk_s
        self.chunks = 0
        self._processes = [(_Components(f, samples), f, index[f.cause]) for f in failures]
        self._scheduled = [(s, index[s.cause]) for s in scheduled]
        # Events drawn for a later chunk (the end of a repair): sample, time, kind, cause, extra.
        self._later = (_EMPTY_I, _EMPTY_F, _EMPTY_I, _EMPTY_I, _EMPTY_F)

    def next_chunk(self) -> Chunk:
        start_s = self.chunks * self.chunk_s
        end_s = (self.chunks + 1) * self.chunk_s
        self.chunks += 1
        parts = [self._later]
        every = np.arange(self.samples, dtype=np.int64)
        for components, process, cause in self._processes:
            sample, time_s = components.failures(start_s, end_s, self.rng)
            parts.extend(
                self._events(sample, time_s, process.stops_job, process.repair_s, cause, 0.0)
            )
        for failure, cause in self._scheduled:
            if start_s <= failure.at_s < end_s:
                time_s = np.full(self.samples, float(failure.at_s))
                parts.extend(
                    self._events(
                        every, time_s, failure.stops_job, failure.repair_s, cause, failure.repair_s
                    )
                )
        sample, time_s, kind, cause, extra = (np.concatenate(p) for p in zip(*parts))
        now = time_s < end_s
        self._later = tuple(a[~now] for a in (sample, time_s, kind, cause, extra))
        sample, time_s, kind, cause, extra = (a[now] for a in (sample, time_s, kind, cause, extra))
        # By sample, then time, then kind (two stable passes: faster than a lexsort).
        order = np.lexsort((kind, time_s)) if kind.any() else np.argsort(time_s, kind="stable")
        order = order[np.argsort(sample[order], kind="stable")]
        sample = sample[order]
        offsets = np.searchsorted(sample, np.arange(self.samples + 1), side="left")
        return Chunk(
            end_s=end_s,
            offsets=offsets.tolist(),
            times_s=time_s[order].tolist(),
            kinds=kind[order].tolist(),
            causes=cause[order].tolist(),
            extra_s=extra[order].tolist(),
        )

    @staticmethod
    def _events(sample, time_s, stops_job: bool, repair_s: float, cause: int, wait_s: float):
        """Event tuples of failures at ``time_s``: a stop (the restart begins ``wait_s``
        later), or a degradation and the recovery ``repair_s`` later."""
        n = sample.size
        causes = np.full(n, cause, dtype=np.int64)
        if stops_job:
            kinds = np.full(n, STOP, dtype=np.int64)
            return [(sample, time_s, kinds, causes, np.full(n, float(wait_s)))]
        return [
            (sample, time_s, np.full(n, DEGRADE, dtype=np.int64), causes, np.zeros(n)),
            (sample, time_s + repair_s, np.full(n, RECOVER, dtype=np.int64), causes, np.zeros(n)),
        ]


def sample_failure_times(
    process: FailureProcess, horizon_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Sorted times (seconds) of ``process``'s failures in ``[0, horizon_s)``, one history
    drawn with ``rng`` the way the Monte Carlo draws them."""
    components = _Components(process, 1)
    _, time_s = components.failures(0.0, horizon_s, rng)
    return np.sort(time_s)
