"""Context parallelism in the 3D hybrid: ring attention over ``parallelism.cp`` GPUs.

``parallelism.cp`` (Megatron-Core's context parallelism; Liu et al. 2023, "Ring
Attention with Blockwise Transformers") splits every sequence of s tokens over the
cp GPUs of a stage's *context ring*, each with its own tensor group
(:meth:`~clustersim.parallel.placement.Placement.stage_group`).  The model:

* **Compute.** A cp rank holds s/cp tokens: its projections and MLP are 1/cp of the
  layer.  Its queries meet the keys and values of all s tokens, so its attention scores
  are (s/cp) x s, 1/cp of the s^2 term (4 s^2 h FLOPs per sample forward).  With a
  causal mask a plain split would leave the last rank with most of the work; Megatron
  cuts the sequence into 2 cp chunks and gives rank c chunks c and 2cp - 1 - c, which
  evens it out, so every rank does 1/cp of the layer (what is priced here).
* **Ring.** The attention of a layer runs in cp blocks: the rank computes its queries
  against the K/V block it holds while it sends that block to the next rank of the ring
  and receives the previous rank's (cp - 1 steps).  A step moves
  ``2 b (s/cp) h_kv`` values (K and V, ``h_kv`` = key/value heads x head size), split
  over the tp GPUs by heads.  Per step the layer takes max(compute block, transfer
  step), the last block has nothing to overlap:

      T_layer = (cp - 1) max(c_block, t_step) + c_block

  where ``c_block`` is 1/cp of the rank's attention-score FLOPs.  Backward sends the
  K/V blocks and their gradients dK/dV (twice the bytes) and costs twice the score
  FLOPs; with recomputation (full or selective) the recomputed forward circulates K/V
  once more.
* **How it runs.** Per operation (a forward or backward of a micro-batch on a stage),
  every GPU of the stage sends its ring neighbour the bytes of all the stage's attention
  layers' steps as one real flow (a lane of its ring's send,
  :meth:`~clustersim.engine.Simulation.transfer_lanes`: it shares links with every other
  flow) while it computes the overlapped blocks ((cp - 1) per layer); then it computes the
  last block of each layer with the rest of the operation.  The steps of the layers are
  alike, so the sum of the per-step maxima is the maximum of the sums: uncontended the
  operation takes exactly the formula above, summed over layers; under contention the
  flow's rate is the mean over the operation rather than step by step.
* **Gradients and memory.** The cp ranks hold the same parameters: their gradients are
  reduced over dp x cp (Megatron), ZeRO-1 shards over dp x cp.  Activations, boundary
  tensors and tensor-parallel collectives are 1/cp; each GPU also holds two K/V receive
  buffers (one step each, double buffered).

Units: FLOPs, bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from ...devices import work_seconds
from ...engine import Simulation
from ...errors import Problem, ScenarioError
from ...model.transformer import BACKWARD_FACTOR
from .. import training
from .stages import StagePlan
from .summary import ContextParallelTraffic


def context_parallel_problem(cp: int, model: training.Model) -> Problem | None:
    """Why ``parallelism.cp`` cannot split ``model``'s sequences, or None."""
    if cp == 1:
        return None
    shape = model.transformer
    if shape is None:
        return Problem(
            "parallelism.cp",
            f"cp {cp} splits a transformer's sequence; this model is a list of layers",
            "cp 1, or a transformer model (model.preset or model.transformer)",
        )
    if shape.seq % (2 * cp):
        return Problem(
            "parallelism.cp",
            f"cp {cp}: the sequence of {shape.seq} tokens does not split into 2 x cp = "
            f"{2 * cp} equal chunks (Megatron's load-balanced causal split)",
            f"cp with 2 cp dividing {shape.seq}",
        )
    return None


@dataclass(frozen=True)
class RingAttention:
    """Ring attention of one cp rank: bytes and FLOPs per sample, per GPU."""

    cp: int
    tp: int
    step_bytes: float
    """Bytes per sample one GPU sends per ring step, forward: 2 (s/cp) h_kv x bytes / tp."""
    block_flops: float
    """Forward attention-score FLOPs per sample of one block on one GPU:
    4 s^2 h / (cp^2 tp)."""

    @classmethod
    def of(cls, model: training.Model, cp: int, tp: int, bytes_per_value: float) -> RingAttention:
        shape = model.transformer
        s, h = shape.seq, shape.hidden
        step = 2.0 * (s / cp) * shape.kv_hidden * bytes_per_value / tp
        return cls(cp, tp, step, 4.0 * s * s * h / (cp * cp * tp))

    @property
    def steps(self) -> int:
        return self.cp - 1

    @staticmethod
    def passes(backward: bool, recompute: str) -> tuple[float, float]:
        """(K/V byte passes, score-FLOP passes) of a forward or backward: forward 1 and 1;
        backward 2 (K/V and dK/dV) and 2 (:data:`BACKWARD_FACTOR`), each one more with
        recomputation."""
        if not backward:
            return 1.0, 1.0
        again = 0.0 if recompute == "none" else 1.0
        return 2.0 + again, BACKWARD_FACTOR + again

    def layer_bytes(self, samples: float, backward: bool, recompute: str = "none") -> float:
        """Bytes one GPU sends per attention layer: (cp - 1) steps x step bytes x passes."""
        return self.steps * self.step_bytes * samples * self.passes(backward, recompute)[0]


class ContextParallel:
    """The ring-attention side of :class:`~clustersim.strategies.hybrid.strategy.Pipeline`."""

    cp: int
    ring: RingAttention | None

    def _check_context_parallel(self) -> None:
        """``parallelism.cp`` against the model, and the ring of this run (None if cp = 1)."""
        cp = self.parallelism.cp
        problem = context_parallel_problem(cp, self.model)
        if problem is not None:
            raise ScenarioError(problem)
        self.cp = cp
        self.ring = None
        if cp > 1:
            per_value = training.BYTES_PER_VALUE[self.train.precision]
            self.ring = RingAttention.of(self.model, cp, self.tp, per_value)

    def _attention_layers(self, plan: StagePlan) -> int:
        layers = self.model.layers[plan.first_layer : plan.first_layer + plan.layers]
        return sum(1 for x in layers if x.kind == "attention")

    def _ring_attention(
        self, sim: Simulation, d: int, s: int, it: int, j: int, plan: StagePlan, backward: bool
    ) -> Generator[Any, Any, float]:
        """Run the overlapped part of the stage's ring attention for micro-batch j: the
        K/V flows around every tensor rank's ring while each GPU computes (cp - 1) blocks
        per attention layer.  Returns the FLOPs per GPU it computed."""
        ring = self.ring
        layers = self._attention_layers(plan)
        if ring is None or layers == 0:
            return 0.0
        mb = self.micro_batch
        recompute = self.recompute_of(plan.index)
        byte_passes, flop_passes = ring.passes(backward, recompute)
        nbytes = layers * ring.layer_bytes(mb, backward, recompute)
        flops = layers * ring.steps * ring.block_flops * mb * flop_passes
        placement = self.placement
        kind = "bwd" if backward else "fwd"
        events, ends = [], []
        for t in range(self.tp):
            ring_devices = placement.cp_group(d, s, t)
            done = sim.event()
            sim.transfer_lanes(  # every GPU of the ring to the next
                list(zip(ring_devices, ring_devices[1:] + ring_devices[:1], strict=True)),
                nbytes,
                done.succeed,
                label="kv ring",
                iteration=it,
                microbatch=j,
                stage=s,
            )
            events.append(done)
            for device in ring_devices:
                seconds = self._block_seconds(device, plan.index, backward, flops)
                ends.append(
                    sim.book_compute(
                        device,
                        flops=flops,
                        seconds=seconds,
                        label=kind,
                        iteration=it,
                        microbatch=j,
                        stage=s,
                        op="ring",
                        phase="backward" if backward else "forward",
                    )
                )
        events.append(sim.timeout(max(ends) - sim.now, "the ring's blocks"))  # every block's end
        yield sim.all_of(events)
        return flops

    def _block_seconds(self, device: str, k: int, backward: bool, flops: float) -> float | None:
        """Seconds of ``flops`` of virtual stage ``k``'s attention blocks on ``device`` at
        the stage's shape-aware rate (the roofline's seconds per FLOP of its pass, the same
        rate as the rest of the operation); None prices the FLOPs flat."""
        rate = self.stage_times.seconds_per_flop(
            self.topology.devices[device], k, not backward, self.micro_batch
        )
        return None if rate is None else flops * rate

    def _context_parallel_traffic(self) -> ContextParallelTraffic | None:
        """The ring's bytes per layer and its step times (one forward micro-batch, alone)."""
        ring = self.ring
        if ring is None:
            return None
        mb = self.micro_batch
        placement = self.placement
        topology = self.topology
        devices = placement.cp_group(0, 0, 0)
        rate = min(
            min(link.bandwidth_Bps for link in topology.first_route(a, b).links)
            for a, b in zip(devices, devices[1:] + devices[:1], strict=True)
        )
        device = topology.devices[devices[0]]
        return ContextParallelTraffic(
            cp=ring.cp,
            ring_steps=ring.steps,
            step_bytes=ring.step_bytes * mb,
            bytes_per_layer_forward=ring.layer_bytes(mb, False),
            bytes_per_layer_backward=ring.layer_bytes(mb, True, self.recompute_of(0)),
            compute_step_s=self._block_seconds(devices[0], 0, False, ring.block_flops * mb)
            or work_seconds(device, flops=ring.block_flops * mb),
            transfer_step_s=ring.step_bytes * mb / rate,
            priced="flows",
        )
