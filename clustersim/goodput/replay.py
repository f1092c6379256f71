"""One sampled history of a job under failures, advanced analytically.

The job alternates three activities: computing (progress in work seconds),
paused for a checkpoint, and down (restarting).  A history jumps from event to
event (a job-stopping failure, a component going down or coming back), never
from iteration to iteration.  Between two events the rate of progress is constant
(``elastic_slowdown ** d`` wall seconds per work second with d components down),
so the checkpoint cycles are periodic: from the end of a checkpoint pause one cycle
takes ``max(W r, D) + C`` wall seconds (``W`` work between checkpoints, ``r`` the
rate, ``D`` the drain, ``C`` the blocking pause) and :meth:`_History._skip_cycles`
jumps over all the whole cycles before the next event at once.  The cost of one
history is O(number of events), whatever the number of iterations or checkpoints.

At a job-stopping failure the job loses its progress since the last *durable*
checkpoint (a checkpoint whose drain had not ended is not), then is down for
``restart_s`` (plus the repair window of a scheduled stop); a failure while down
starts the restart again (Daly 2006).

Wall time is split into parts that add up exactly (up to rounding):
``wall = useful + failures + restarts + checkpoints + degraded`` where ``failures``
is the work redone (work seconds lost at failures), ``restarts`` the time down,
``checkpoints`` the time paused (including waits for a previous drain, and pauses a
failure cut short or made useless), and ``degraded`` the extra compute time of running
slowed down.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import SimulationError
from .model import FailureProcess, ScheduledFailure, TrainingJob, job_mtbf_s
from .schedule import DEGRADE, STOP, FailureStream

COMPUTE, PAUSE, DOWN = 0, 1, 2

MAX_FAILURES = 100_000
"""Job-stopping failures allowed in one sample before the job is declared unable to
make progress."""

MAX_CHUNKS = 1000
"""Wall-clock chunks drawn before the job is declared unable to make progress (a chunk
is at least the useful time: :func:`chunk_length_s`)."""

LOST_PARTS = ("failures", "restarts", "checkpoints", "degraded")
"""The keys of ``time_lost_s``; with the useful time they add up to the wall time."""


@dataclass(frozen=True)
class _Plan:
    """The job in the terms the replay uses."""

    segment_s: float  # W: work seconds between checkpoints
    last_s: float  # work seconds of the last segment (no checkpoint after it)
    segments: int
    blocking_s: float
    drain_s: float
    restart_s: float
    slowdown: float

    @classmethod
    def of(cls, job: TrainingJob) -> _Plan:
        every = min(job.checkpoint_every, job.iterations)
        segments = -(-job.iterations // every)
        last = job.iterations - (segments - 1) * every
        return cls(
            segment_s=every * job.iteration_s,
            last_s=last * job.iteration_s,
            segments=segments,
            blocking_s=float(job.checkpoint_blocking_s),
            drain_s=float(job.checkpoint_drain_s),
            restart_s=float(job.restart_s),
            slowdown=float(job.elastic_slowdown),
        )


class _History:
    """The state of one sample's job between chunks (:func:`_play` runs it)."""

    __slots__ = (
        "t", "mode", "seg", "frac", "pause_end", "down_until", "down_cause", "durable",
        "pending", "pending_end", "degraded", "compute_wall", "pause_wall", "down_wall",
        "lost_work", "lost_by_cause", "interruptions", "checkpoints", "stops", "done",
    )  # fmt: skip

    def __init__(self, causes: int) -> None:
        self.t = 0.0
        self.mode = COMPUTE
        self.seg = 0  # segments completed since the start (rolled back at failures)
        self.frac = 0.0  # work seconds done in the current segment
        self.pause_end = 0.0
        self.down_until = 0.0
        self.down_cause = 0
        self.durable = 0  # segments saved by a durable checkpoint
        self.pending = -1  # segments saved by the draining checkpoint, -1: none
        self.pending_end = 0.0
        self.degraded = 0
        self.compute_wall = 0.0
        self.pause_wall = 0.0
        self.down_wall = 0.0
        self.lost_work = 0.0
        self.lost_by_cause = [0.0] * causes
        self.interruptions = [0] * causes
        self.checkpoints = 0
        self.stops = 0
        self.done = False


@dataclass(frozen=True)
class Replay:
    """One sampled history of the job (seconds)."""

    wall_time_s: float
    """Wall time from the start of the job until its last iteration ends."""
    useful_s: float
    """``iterations * iteration_s``."""
    time_lost_s: dict[str, float]
    """``failures`` (work redone), ``restarts``, ``checkpoints``, ``degraded``; with
    ``useful_s`` they add up to ``wall_time_s``."""
    time_lost_by_cause_s: dict[str, float]
    """Per failure cause: work lost at its interruptions plus the time down after them."""
    interruptions: dict[str, int]
    """Job-stopping failures per cause (including those during a restart)."""
    checkpoints: int
    """Checkpoint pauses begun (including those a failure cut short or made useless)."""

    @property
    def goodput(self) -> float:
        """``useful_s / wall_time_s``."""
        return self.useful_s / self.wall_time_s


def hopeless_check(job: TrainingJob, failures: Sequence[FailureProcess], max_failures: int) -> None:
    """Refuse at once a job expected to need more than ``max_failures`` job-stopping
    failures: with failures at rate ``1 / M`` and a checkpoint cycle of ``W + C`` seconds,
    each cycle takes ``exp((W + C) / M) - 1`` failures on average (Daly 2006)."""
    mtbf = job_mtbf_s(failures)
    if math.isinf(mtbf):
        return
    plan = _Plan.of(job)
    cycle = plan.segment_s + (plan.blocking_s if plan.segments > 1 else 0.0)
    per_cycle = math.expm1(min(cycle / mtbf, 700.0))
    expected = per_cycle * plan.segments
    if expected > max_failures:
        raise _no_progress(job, mtbf, f"about {expected:.3g} failures expected")


def _no_progress(job: TrainingJob, mtbf_s: float, why: str) -> SimulationError:
    return SimulationError(
        "the job cannot make progress: job-stopping failures come every "
        f"{mtbf_s:.4g} s on average (job MTBF) but a checkpoint interval needs "
        f"{job.checkpoint_interval_s:.4g} s of work plus a {job.checkpoint_blocking_s:.4g} s "
        f"checkpoint without failure ({why}); checkpoint more often or make failures rarer"
    )


def chunk_length_s(job: TrainingJob, scheduled: Sequence[ScheduledFailure]) -> float:
    """Seconds of wall time drawn at once: the useful time plus one restart, or up to the
    end of the last scheduled repair if later.  It does not depend on the checkpoint
    interval, so every interval sees the same failure histories."""
    last = max((s.at_s + s.repair_s for s in scheduled), default=0.0)
    return max(job.useful_s + job.restart_s, last)


def run_histories(
    job: TrainingJob,
    failures: Sequence[FailureProcess],
    scheduled: Sequence[ScheduledFailure],
    samples: int,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
    max_failures: int = MAX_FAILURES,
) -> tuple[list[_History], list[str]]:
    """``samples`` histories of ``job`` and the cause labels their lists are indexed by."""
    hopeless_check(job, failures, max_failures)
    plan = _Plan.of(job)
    stream = FailureStream(
        failures, scheduled, samples, rng, chunk_s=chunk_length_s(job, scheduled)
    )
    histories = [_History(len(stream.causes)) for _ in range(samples)]
    running = list(range(samples))
    step = max(1, samples // 100)
    finished = 0
    while running:
        if stream.chunks == MAX_CHUNKS:
            raise SimulationError(
                f"the job cannot make progress: {len(running)} samples unfinished after "
                f"{stream.chunk_s * MAX_CHUNKS:.4g} s of wall time, {MAX_CHUNKS} times its "
                f"{job.useful_s:.4g} s of work; failures, restarts and slowdowns leave it "
                "no time to train"
            )
        chunk = stream.next_chunk()
        still = []
        for s in running:
            history = histories[s]
            _play(history, plan, chunk, s, job, failures, max_failures)
            if history.done:
                finished += 1
                if progress is not None and (finished % step == 0 or finished == samples):
                    progress(finished, samples)
            else:
                still.append(s)
        running = still
    return histories, stream.causes


def _rate(slowdown: float, down: int) -> float:
    """Wall seconds per work second with ``down`` components down (inf past a float)."""
    try:
        return slowdown**down
    except OverflowError:
        return math.inf


def _play(h: _History, plan: _Plan, chunk, s: int, job, failures, max_failures: int) -> None:
    """Play sample ``s``'s events of ``chunk`` on ``h``, then run on to the chunk's end.

    One function with the state in local variables (it runs once per event and sample:
    the hot loop).  Between events the job moves phase by phase: computing to the next
    segment boundary, pausing for its checkpoint, and at the end of a pause jumping over
    every whole checkpoint cycle before the next event at once (one cycle, from the end
    of a pause: ``max(W r, D) + C`` wall seconds)."""
    seg_s, last_s, segments = plan.segment_s, plan.last_s, plan.segments
    blocking, drain, restart, slowdown = (
        plan.blocking_s,
        plan.drain_s,
        plan.restart_s,
        plan.slowdown,
    )
    t, mode, seg, frac = h.t, h.mode, h.seg, h.frac
    pause_end, down_until, down_cause = h.pause_end, h.down_until, h.down_cause
    durable, pending, pending_end, degraded = h.durable, h.pending, h.pending_end, h.degraded
    compute_wall, pause_wall, down_wall = h.compute_wall, h.pause_wall, h.down_wall
    lost_work, checkpoints, stops = h.lost_work, h.checkpoints, h.stops
    lost_by_cause, interruptions = h.lost_by_cause, h.interruptions
    times, kinds = chunk.times_s, chunk.kinds
    i, last_i = chunk.offsets[s], chunk.offsets[s + 1]
    rate = _rate(slowdown, degraded)
    done = False
    while True:
        until = times[i] if i < last_i else chunk.end_s
        while t < until:  # advance to ``until``, no event on the way
            if mode == COMPUTE:
                need = ((seg_s if seg < segments - 1 else last_s) - frac) * rate
                if t + need > until:
                    compute_wall += until - t
                    frac += (until - t) / rate
                    t = until
                    break
                t += need
                compute_wall += need
                frac = 0.0
                seg += 1
                if seg == segments:
                    done = True
                    break
                start = pending_end if pending >= 0 and pending_end > t else t
                pause_end = start + blocking
                mode = PAUSE
                checkpoints += 1
            elif mode == PAUSE:
                if pause_end > until:
                    pause_wall += until - t
                    t = until
                    break
                pause_wall += pause_end - t
                t = pause_end
                if pending >= 0:  # the pause began after that drain ended
                    durable = pending
                pending = seg
                pending_end = t + drain
                mode = COMPUTE
                left = segments - 1 - seg  # segments still followed by a checkpoint
                if left >= 2:  # jump over the whole cycles before ``until``
                    compute = seg_s * rate
                    cycle = (compute if compute > drain else drain) + blocking
                    n = left if until == math.inf else min(left, int((until - t) // cycle))
                    while n > 0 and t + n * cycle > until:
                        n -= 1
                    if n > 0:
                        t += n * cycle
                        compute_wall += n * compute
                        pause_wall += n * (cycle - compute)
                        seg += n
                        checkpoints += n
                        durable = seg - 1
                        pending = seg
                        pending_end = t + drain
            else:  # DOWN
                end = down_until if down_until < until else until
                down_wall += end - t
                lost_by_cause[down_cause] += end - t
                t = end
                if end >= down_until:
                    mode = COMPUTE
        if done or i >= last_i:
            break
        kind = kinds[i]
        if kind == STOP:
            cause = chunk.causes[i]
            interruptions[cause] += 1
            stops += 1
            if stops > max_failures:
                why = f"more than {max_failures} failures in one sample"
                raise _no_progress(job, job_mtbf_s(failures), why)
            if mode != DOWN:
                if pending >= 0 and pending_end <= t:
                    durable = pending
                lost = (seg - durable) * seg_s + frac
                lost_work += lost
                lost_by_cause[cause] += lost
                seg = durable
                frac = 0.0
                pending = -1
            mode = DOWN
            down_until = t + chunk.extra_s[i] + restart
            down_cause = cause
        else:
            degraded += 1 if kind == DEGRADE else -1
            rate = _rate(slowdown, degraded)
        i += 1
    h.t, h.mode, h.seg, h.frac = t, mode, seg, frac
    h.pause_end, h.down_until, h.down_cause = pause_end, down_until, down_cause
    h.durable, h.pending, h.pending_end, h.degraded = durable, pending, pending_end, degraded
    h.compute_wall, h.pause_wall, h.down_wall = compute_wall, pause_wall, down_wall
    h.lost_work, h.checkpoints, h.stops, h.done = lost_work, checkpoints, stops, done


def summarise(history: _History, useful_s: float) -> dict[str, float]:
    """The ``time_lost_s`` parts of one history."""
    lost = {
        "failures": history.lost_work,
        "restarts": history.down_wall,
        "checkpoints": history.pause_wall,
    }
    lost["degraded"] = max(0.0, history.compute_wall - useful_s - history.lost_work)
    return lost


def replay(
    job: TrainingJob,
    failures: Sequence[FailureProcess],
    scheduled: Sequence[ScheduledFailure],
    rng: np.random.Generator,
    *,
    max_failures: int = MAX_FAILURES,
) -> Replay:
    """One sampled history of ``job`` under ``failures`` and ``scheduled``, drawn with
    ``rng``, advanced from event to event (see the module docstring).  Raises
    :class:`SimulationError` when the job cannot make progress (more than
    ``max_failures`` job-stopping failures, or that many expected)."""
    (history,), causes = run_histories(job, failures, scheduled, 1, rng, None, max_failures)
    return Replay(
        wall_time_s=history.t,
        useful_s=job.useful_s,
        time_lost_s=summarise(history, job.useful_s),
        time_lost_by_cause_s=dict(zip(causes, history.lost_by_cause)),
        interruptions=dict(zip(causes, history.interruptions)),
        checkpoints=history.checkpoints,
    )
