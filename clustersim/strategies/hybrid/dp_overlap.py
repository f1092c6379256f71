"""The data-parallel collectives of the 3D hybrid overlapped with compute, and what they
exposed (:mod:`.recipes` says when; :mod:`.grad_buckets` what the buckets hold).

* **Gradient reduction** (``overlap_grad_reduce``).  A model chunk's gradients are complete
  after the last operation of the iteration that computes weight gradients for it (the last
  micro-batch's backward, or W of the split-backward schedules).  That operation runs in
  parts, one per bucket in backward order, each ``backward_share`` of its compute and of its
  tensor-parallel hold; as each part ends, its bucket's collective is launched (when the
  last simulated replica has reached it, as every data-parallel collective here), except
  the last bucket's, launched when the whole operation has ended.  The stage's optimizer
  step waits for every bucket of every chunk.  Megatron-Core launches a bucket from the
  gradient hooks of its last parameter (``register_grad_ready`` once the last micro-batch's
  gradients are in), so a bucket starts where its layers' backward ends.
* **Parameter all-gather** (``overlap_param_gather``).  After the step the buckets'
  all-gathers are launched at once, chunk 0 first, each chunk's buckets in forward order
  (they run one after another on each group's communicator); the stage goes on to its next
  iteration, whose first forward of each chunk runs in parts, one per bucket in forward
  order, each waiting for its bucket's all-gather first.  So only the first bucket's gather
  is exposed when the forward is longer than the gathers.  The run keeps one set of
  gathers per stage and iteration, where steady state has them: the first pipeline stage's
  previous step ends as its iteration starts, so its iteration 0 starts with the previous
  step's gathers, launched at time 0, and it launches none after its last step; a later
  stage's previous step ends earlier (its backward finishes before the first stage's), so
  its iteration-0 gathers are taken as done, and it launches its gathers after its last
  step too (none waits for them), beside the first stage's last backward.  Megatron-Core's
  interleaved schedules launch the gathers at the start of the iteration on every pipeline
  stage (``align_param_gather``); its other schedules launch a stage's first gather when
  its first forward needs it, which on a later pipeline stage exposes what here hides in the
  pipeline's fill.

**Exposed and hidden.**  Per device stage and iteration (replica 0): the data-parallel
communication time is how long any of the stage's data-parallel collectives was in flight
(from launch to end, union of the intervals); the exposed time is the part of it during
which the stage waited for them; the hidden time the rest.  Tensor parallelism: the seconds
of its collectives and the part left exposed after the compute beside them
(:mod:`.tp_overlap`; all of it without the overlap).  Units: seconds.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from ...budget import WorkEstimate
from ...collectives.work import calls_work
from ...engine import Simulation
from ...metrics import Interval, union_length
from ...parallel.schedules import BACKWARD, BACKWARD_WEIGHT, FORWARD, Op
from .grad_buckets import GradBucket
from .summary import TrainingRecipes

GATHER, REDUCE = "gather", "reduce"
"""How an operation runs in bucket parts: waiting for gathers, or launching reductions."""


class DataParallelOverlap:
    """The overlapped data-parallel side of :class:`~.strategy.Pipeline` (module docstring)."""

    layout_buckets: dict[int, list[GradBucket]]

    # -- set-up --------------------------------------------------------------

    def _plan_overlap(self: Any) -> None:
        """Per micro-batch count and stage: which operation index runs in parts, and how
        (needs the operations of every count)."""
        self._parts: dict[tuple[int, int, int], tuple[str, list[GradBucket]]] = {}
        for m in self.micro_batch_counts():
            for s in range(self.pp):
                self._plan_stage_overlap(m, s, self._ops_by_count[m][s])

    def _plan_stage_overlap(self: Any, m: int, s: int, ops: Sequence[Op]) -> None:
        """Stage ``s``'s operations run in parts when it runs ``ops`` (``m`` micro-batches)."""
        recipes = self.recipes
        by_chunk: dict[int, list[GradBucket]] = {}
        for bucket in self.layout_buckets.get(s, []):
            by_chunk.setdefault(bucket.chunk, []).append(bucket)
        for chunk, buckets in by_chunk.items():
            if recipes.overlap_param_gather:
                first = next(
                    i for i, op in enumerate(ops) if op.kind == FORWARD and op.chunk == chunk
                )
                self._parts[m, s, first] = (GATHER, buckets[::-1])
            if recipes.overlap_grad_reduce:
                last = max(
                    i
                    for i, op in enumerate(ops)
                    if op.kind in (BACKWARD, BACKWARD_WEIGHT) and op.chunk == chunk
                )
                self._parts[m, s, last] = (REDUCE, buckets)

    def _start_overlap(self: Any) -> None:
        self._reduced: dict[tuple[int, int, int], list[simpy.Event]] = {}
        self._gathered: dict[tuple[int, int, int, int, int], simpy.Event] = {}
        self._dp_flight: dict[tuple[int, int], list[Interval]] = {}
        self._dp_waits: dict[tuple[int, int], list[Interval]] = {}
        self._tp_time: dict[int, list[float]] = {s: [0.0, 0.0] for s in range(self.pp)}

    def overlap_work(self: Any) -> WorkEstimate:
        """Per iteration and simulated replica: the bucketed collectives (each reduction and
        gather once) and the extra records of operations run in parts (compute and
        tensor-parallel holds per GPU of the stage)."""
        recipes = self.recipes
        buckets = [b for bs in self.layout_buckets.values() for b in bs]
        calls: list[Any] = []
        if recipes.overlap_grad_reduce:
            calls += [c for b in buckets for c in b.reduce]
        else:
            calls += [c for cs in self.calls.values() for c in cs]
        if recipes.overlap_param_gather:
            calls += [c for b in buckets for c in b.gather]
        elif self.zero >= 1:
            calls += [c for cs in self.calls.values() for c in cs]
        model, channels = self.dp_network_model, self.channels
        work = calls_work(calls, self.topology, model=model, channels=channels)
        per_part = self.tp * self.cp * (2 if self.tp > 1 else 1)
        ways = int(recipes.overlap_grad_reduce) + int(recipes.overlap_param_gather)
        chunks: dict[tuple[int, int], int] = {}
        for b in buckets:
            chunks[b.stage, b.chunk] = chunks.get((b.stage, b.chunk), 0) + 1
        parts = sum(n - 1 for n in chunks.values()) * ways * per_part * self.simulated
        return work + WorkEstimate(records=parts)

    # -- running -------------------------------------------------------------

    def _op_parts(self: Any, d: int, s: int, it: int, index: int) -> tuple[str, list[GradBucket]]:
        """How operation ``index`` of stage ``s`` of replica ``d`` runs in iteration ``it``:
        ("", []) in one piece (a later stage's first forwards of iteration 0 too: nothing to
        wait for)."""
        m = self.replica_micro_batches[d]
        mode, buckets = self._parts.get((m, s, index), ("", []))
        if mode == GATHER and it == 0 and s > 0:
            return "", []
        return mode, buckets

    def _grads_ready(
        self: Any, sim: Simulation, d: int, s: int, it: int, bucket: GradBucket
    ) -> None:
        """Launch ``bucket``'s gradient collective (once every simulated replica is here)."""
        step = (bucket.chunk, bucket.index)
        event = self._dp_sync(sim, "grad", s, it, d, step, bucket.reduce, self._part(bucket))
        self._reduced.setdefault((d, s, it), []).append(event)

    def _reduced_event(self: Any, sim: Simulation, d: int, s: int, it: int) -> simpy.Event:
        """The event of every bucket of stage ``s`` reduced in iteration ``it``."""
        return sim.all_of(self._reduced.pop((d, s, it), []))

    def _gathers_after_step(self: Any, sim: Simulation, d: int, s: int, it: int) -> None:
        """After iteration ``it``'s step: the gathers iteration ``it + 1`` waits for; after
        the last one, a later stage's own gathers, which none waits for (module docstring)."""
        if it + 1 < self.train.iterations:
            self._issue_gathers(sim, d, s, it + 1)
        elif s > 0:
            self._issue_gathers(sim, d, s, it, waited=False)

    def _issue_gathers(
        self: Any, sim: Simulation, d: int, s: int, it: int, waited: bool = True
    ) -> None:
        """Launch stage ``s``'s all-gathers, recorded under iteration ``it`` (whose forwards
        wait for them when ``waited``): chunk by chunk, each chunk's buckets in forward
        order."""
        for bucket in sorted(self.layout_buckets.get(s, []), key=lambda b: (b.chunk, -b.index)):
            step = ("overlap" if waited else "last", bucket.chunk, bucket.index)
            part = self._part(bucket)
            event = self._dp_sync(sim, "param", s, it, d, step, bucket.gather, part)
            if waited:
                self._gathered[d, s, it, bucket.chunk, bucket.index] = event

    def _part(self: Any, bucket: GradBucket) -> str:
        """`` chunk1 bucket2`` (the chunk only with several): a bucket in records' labels."""
        chunk = f" chunk{bucket.chunk}" if self.schedule.chunks > 1 else ""
        return f"{chunk} bucket{bucket.index}"

    def _before_part(
        self: Any, sim: Simulation, d: int, s: int, it: int, mode: str, bucket: GradBucket | None
    ) -> Generator[Any, Any, None]:
        """Wait for ``bucket``'s gathered parameters before its part of a forward."""
        if mode == GATHER and bucket is not None:
            key = (d, s, it, bucket.chunk, bucket.index)
            yield from self._wait_dp(sim, d, s, it, self._gathered.pop(key))

    def _wait_dp(
        self: Any, sim: Simulation, d: int, s: int, it: int, event: simpy.Event
    ) -> Generator[Any, Any, None]:
        """Wait for a data-parallel ``event``, noting replica 0's wait."""
        start = sim.now
        yield event
        if d == 0 and sim.now > start:
            self._dp_waits.setdefault((s, it), []).append((start, sim.now))

    def _note_flight(self: Any, s: int, it: int, start: float, end: float) -> None:
        """A data-parallel round of stage ``s`` was in flight from ``start`` to ``end``."""
        self._dp_flight.setdefault((s, it), []).append((start, end))

    def _note_tp(self: Any, d: int, s: int, seconds: float, exposed: float) -> None:
        if d == 0:
            time = self._tp_time[s]
            time[0] += seconds
            time[1] += exposed

    # -- report --------------------------------------------------------------

    def _recipes_summary(self: Any) -> TrainingRecipes:
        """The ``recipes`` block: what was in force, and the seconds per iteration."""
        recipes, iterations = self.recipes, self.train.iterations
        flight, exposed = [], []
        for s in range(self.pp):
            busy = waited = 0.0
            for it in range(iterations):
                spans = self._dp_flight.get((s, it), [])
                waits = self._dp_waits.get((s, it), [])
                busy += union_length(spans)
                waited += _overlap_length(spans, waits)
            flight.append(busy / iterations)
            exposed.append(waited / iterations)
        tp = [[x / iterations for x in self._tp_time[s]] for s in range(self.pp)]
        return TrainingRecipes(
            distributed_optimizer=recipes.distributed_optimizer,
            overlap_grad_reduce=recipes.overlap_grad_reduce,
            overlap_param_gather=recipes.overlap_param_gather,
            tp_comm_overlap=recipes.tp_comm_overlap,
            bucket_bytes=recipes.bucket_params * self.grad_bytes_per_value,
            buckets=[len(self.layout_buckets.get(s, [])) for s in range(self.pp)],
            dp_communication_s=flight,
            dp_exposed_s=exposed,
            dp_hidden_s=[f - e for f, e in zip(flight, exposed, strict=True)],
            tp_communication_s=[t[0] for t in tp] if self.tp > 1 else None,
            tp_exposed_s=[t[1] for t in tp] if self.tp > 1 else None,
        )


def _overlap_length(a: list[Interval], b: list[Interval]) -> float:
    """Seconds covered by both the union of ``a`` and the union of ``b``:
    |A| + |B| - |A u B|."""
    if not a or not b:
        return 0.0
    return max(union_length(a) + union_length(b) - union_length(a + b), 0.0)
