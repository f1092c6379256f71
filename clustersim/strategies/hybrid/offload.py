"""Offload to CPU memory over PCIe in the 3D hybrid (``training.offload``).

```yaml
training: {offload: {optimizer: cpu, activations: cpu, resident: 2}}
```

Every GPU offloads into its node's CPU (``<node>/cpu``); transfers are real flows (a
stage's copies as lanes of one send, :meth:`~clustersim.engine.Simulation.transfer_lanes`)
on the GPU's PCIe cable, the PCIe switch and the CPU's cable, so they share those links
with each other (the GPUs of a node share the CPU's cable) and with network traffic
crossing the same switch.

* **Optimizer (ZeRO-Offload, Ren et al. 2021).** The fp32 optimizer states (master
  weights and Adam moments: ``zero``-sharded over dp x cp as without offload) live in
  CPU memory, none on the GPU.  Per iteration each GPU sends its gradient shard
  (parameters of the shard x bytes per value) GPU->CPU; the CPU runs the optimizer
  step on it, memory-bound: the shard's optimizer bytes (what the GPU step would move)
  over the CPU's memory bandwidth, the steps of a node's GPUs one after another on its
  one CPU; the updated parameters (same bytes) come back CPU->GPU.  ZeRO-Offload
  overlaps the gradient copy with backward (bucket by bucket as gradients are
  produced): with no gradient reduction (dp x cp = 1) the copy starts with the stage's
  last backward and is done at the later of the backward's end and the copy's own
  end.  With a reduction the hybrid reduces after the flush, so the copy follows the
  reduction.  The parameter return is exposed (no one-step delayed update).
* **Activations (ZeRO-R / ZeRO-Infinity activation offload).** A micro-batch whose
  backward comes after ``resident`` or more other forwards on its device goes to CPU
  memory after its forward (the copy runs behind the next operations; the GPU frees
  the bytes when it is done) and comes back starting with the operation before its
  backward (prefetch one operation ahead); the backward waits for it.  The others stay
  on the GPU.  GPU activation memory is the resident micro-batches plus those in
  flight; the static plan counts an offloaded one from its forward to the end of the
  next operation and from the start of the operation before its backward.
* **Reported:** ``offload`` in the summary: bytes per iteration and GPU of each kind,
  ``pcie_exposed_s`` (mean over iterations of the largest wait of a stage on offload
  transfers), the CPU step time and each CPU's offloaded bytes; the memory plan drops
  the optimizer states and the offloaded activations; CPU memory is checked.

Units: bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import simpy

from ...engine import Simulation
from ...errors import Problem, ScenarioError
from ...model.memory import ModelStates
from ...parallel.schedules import FORWARD, Op
from ...scenario import OffloadSpec
from ...units import format_size
from .. import training
from .summary import OffloadTraffic

Pair = tuple[int, int]
"""(micro-batch, chunk)."""


def offloaded_pairs(ops: Sequence[Op], resident: int) -> dict[Pair, tuple[int, int]]:
    """The (micro-batch, chunk) pairs whose activations go to the CPU, with the indexes of
    their forward and backward in ``ops``: those whose backward follows ``resident`` or more
    other forwards."""
    forward: dict[Pair, int] = {}
    out: dict[Pair, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        pair = (op.microbatch, op.chunk)
        if op.kind == FORWARD:
            forward[pair] = i
            continue
        f = forward[pair]
        between = sum(1 for x in ops[f + 1 : i] if x.kind == FORWARD)
        if between >= resident:
            out[pair] = (f, i)
    return out


def resident_peak(ops: Sequence[Op], offloaded: dict[Pair, tuple[int, int]]) -> list[Pair]:
    """The pairs on the GPU at the busiest operation: the resident ones from forward to
    backward, an offloaded one during its forward and the next operation (the copy out)
    and from the operation before its backward (the copy back)."""
    best: list[Pair] = []
    live: dict[Pair, int] = {}
    for i, op in enumerate(ops):
        pair = (op.microbatch, op.chunk)
        if op.kind == FORWARD:
            live[pair] = i
        on = [
            p
            for p, f in live.items()
            if p not in offloaded or i <= f + 1 or i >= offloaded[p][1] - 1
        ]
        if len(on) > len(best):
            best = on
        if op.kind != FORWARD:
            del live[pair]
    return best


def cpu_peak(ops: Sequence[Op], offloaded: dict[Pair, tuple[int, int]]) -> list[Pair]:
    """The offloaded pairs in CPU memory at once at most (from forward to backward)."""
    best: list[Pair] = []
    for i in range(len(ops)):
        on = [p for p, (f, b) in offloaded.items() if f <= i <= b]
        if len(on) > len(best):
            best = on
    return best


class Offload:
    """The offload side of :class:`~clustersim.strategies.hybrid.strategy.Pipeline`."""

    offload: OffloadSpec | None
    supports_offload = True

    # -- checks and plan -------------------------------------------------------

    def _check_offload(self) -> None:
        """Which pairs each device stage offloads, the node CPUs, their capacity."""
        self.offload = spec = self.train.offload
        self._offloaded: list[dict[Pair, tuple[int, int]]] = []
        if spec is None:
            return
        topology = self.topology
        self._host: dict[str, str] = {}
        for device in self.placement.workers:
            node = topology.devices[device].node
            cpu = f"{node}/cpu"
            if node is None or cpu not in topology.devices:
                raise ScenarioError(
                    Problem(
                        "training.offload",
                        f"{device} has no node CPU to offload into",
                        "a two-tier cluster (nodes with a CPU), or no offload",
                    )
                )
            self._host[device] = cpu
        if spec.activations == "cpu":
            self._offloaded = [offloaded_pairs(ops, spec.resident) for ops in self.ops]
        else:
            self._offloaded = [{} for _ in range(self.pp)]
        self._offload_waits: dict[tuple[int, int, int], float] = {}
        self._grads_out: dict[tuple[int, int, int], simpy.Event] = {}
        self._last_backward = [
            max(i for i, op in enumerate(ops) if op.kind != FORWARD) for ops in self.ops
        ]
        self._fetched: dict[tuple[int, int, int, Pair], simpy.Event] = {}
        self._stored_out: dict[tuple[int, int, int, Pair], simpy.Event] = {}
        for cpu, used in self._cpu_memory().items():
            capacity = topology.devices[cpu].memory_bytes
            if used > capacity:
                raise ScenarioError(
                    Problem(
                        "training.offload",
                        f"{cpu} would hold {format_size(used)} of offloaded states and "
                        f"activations, more than its {format_size(capacity)}",
                        "less offload, more nodes, or a CPU with more memory",
                    )
                )

    def _offload_states(self, states: ModelStates) -> ModelStates:
        """The GPU's model states: without the optimizer states when they are offloaded."""
        if self.offload is None or self.offload.optimizer != "cpu":
            return states
        return replace(states, optimizer_states=0.0)

    def _pair_bytes(self, s: int, pair: Pair) -> float:
        """Activation bytes of one (micro-batch, chunk) of device stage s on one GPU."""
        k = self.schedule.virtual_stage(s, pair[1])
        return self.plans[k].activation_bytes * self.micro_batch / self.cp

    def _resident_pairs(self, s: int, held: list[Pair]) -> list[Pair]:
        """The activations of device stage s on the GPU at its peak (``held`` without
        offload)."""
        if self.offload is None or self.offload.activations != "cpu":
            return held
        return resident_peak(self.ops[s], self._offloaded[s])

    def _grad_shard(self, s: int) -> float:
        """Parameters of one GPU's optimizer shard on device stage s."""
        shard = self.grad_ranks if self.zero >= 1 else 1
        return self._stage_params(s) / self.tp / shard

    def _cpu_memory(self) -> dict[str, float]:
        """Bytes each CPU holds for its GPUs at most: optimizer states + activations."""
        out: dict[str, float] = {}
        spec = self.offload
        if spec is None:
            return out
        for s in range(self.pp):
            states = 0.0
            if spec.optimizer == "cpu":
                states = self._stage_states(s).optimizer_states
            acts = sum(self._pair_bytes(s, p) for p in cpu_peak(self.ops[s], self._offloaded[s]))
            for replica in self.groups:
                for device in replica[s]:
                    cpu = self._host[device]
                    out[cpu] = out.get(cpu, 0.0) + states + acts
        return dict(sorted(out.items()))

    # -- running ---------------------------------------------------------------

    def _offload_out(self, sim: Simulation, d: int, s: int, it: int, pair: Pair) -> None:
        """After its forward, send the pair's activations to the CPU; the GPU frees them
        when the copy is done."""
        if pair not in self._offloaded[s]:
            return
        nbytes = self._pair_bytes(s, pair)
        done = self._stored_out[d, s, it, pair] = sim.event()
        group = self.groups[d][s]
        memory = self.memory[d, s]

        def arrived() -> None:  # every GPU's copy is on its CPU
            memory.free(pair, sim.now, it)
            done.succeed()

        sim.transfer_lanes(
            [(device, self._host[device]) for device in group],
            nbytes,
            arrived,
            label="offload activations",
            iteration=it,
            microbatch=pair[0],
            stage=s,
        )

    def _prefetch(self, sim: Simulation, d: int, s: int, it: int, index: int) -> None:
        """At the start of op ``index``: fetch back the pair whose backward is next."""
        ops = self.ops[s]
        if self.offload is None or index + 1 >= len(ops):
            return
        nxt = ops[index + 1]
        pair = (nxt.microbatch, nxt.chunk)
        if nxt.kind == FORWARD or pair not in self._offloaded[s]:
            return
        fetched = self._fetched[d, s, it, pair] = sim.event()
        sim.process(self._fetch(sim, d, s, it, pair, fetched))

    def _fetch(
        self, sim: Simulation, d: int, s: int, it: int, pair: Pair, fetched: simpy.Event
    ) -> Generator[Any, Any, None]:
        yield self._stored_out.pop((d, s, it, pair))
        nbytes = self._pair_bytes(s, pair)
        self.memory[d, s].store(pair, nbytes, sim.now, it)
        done = sim.event()
        sim.transfer_lanes(
            [(self._host[device], device) for device in self.groups[d][s]],
            nbytes,
            done.succeed,
            label="fetch activations",
            iteration=it,
            microbatch=pair[0],
            stage=s,
        )
        yield sim.all_of([done])  # as the copies' own events were waited for
        fetched.succeed()

    def _await_fetch(
        self, sim: Simulation, d: int, s: int, it: int, pair: Pair
    ) -> Generator[Any, Any, None]:
        """Before a backward: wait for its activations to be back (the wait is exposed)."""
        fetched = self._fetched.pop((d, s, it, pair), None)
        if fetched is None:
            return
        start = sim.now
        yield fetched
        self._note_wait(d, s, it, sim.now - start)

    def _note_wait(self, d: int, s: int, it: int, seconds: float) -> None:
        key = (d, s, it)
        self._offload_waits[key] = self._offload_waits.get(key, 0.0) + seconds

    def _group_copy(
        self, sim: Simulation, d: int, s: int, it: int, nbytes: float, to_cpu: bool, label: str
    ) -> simpy.Event:
        """Every GPU of stage s of replica d copies ``nbytes`` to (or from) its CPU."""
        done = sim.event()
        pairs = [(device, self._host[device]) for device in self.groups[d][s]]
        lanes = pairs if to_cpu else [(cpu, gpu) for gpu, cpu in pairs]
        sim.transfer_lanes(lanes, nbytes, done.succeed, label=label, iteration=it, stage=s)
        return sim.all_of([done])

    def _gradients_out(self, sim: Simulation, d: int, s: int, it: int) -> simpy.Event:
        """Start the gradient copy GPU->CPU of stage s (the shard each GPU steps)."""
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        return self._group_copy(
            sim, d, s, it, self._grad_shard(s) * per_value, True, "offload gradients"
        )

    def _cpu_step(
        self, sim: Simulation, d: int, s: int, it: int, grads: simpy.Event | None
    ) -> Generator[Any, Any, None]:
        """Wait for the gradients on the CPU, step there, bring the parameters back."""
        start = sim.now
        yield grads if grads is not None else self._gradients_out(sim, d, s, it)
        self._note_wait(d, s, it, sim.now - start)
        shard = self._grad_shard(s)
        optimizer_bytes = shard * training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer]
        steps = [
            sim.compute(
                self._host[device],
                bytes=optimizer_bytes,
                label="optimizer",
                iteration=it,
                stage=s,
                phase="optimizer",
            )
            for device in self.groups[d][s]
        ]
        yield sim.all_of(steps)
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        start = sim.now
        yield self._group_copy(sim, d, s, it, shard * per_value, False, "fetch parameters")
        self._note_wait(d, s, it, sim.now - start)

    def _backward_started(self, sim: Simulation, d: int, s: int, it: int, index: int) -> None:
        """ZeRO-Offload: the stage's last backward has its input; its gradients stream to
        the CPU as it produces them (no reduction to wait for: dp x cp = 1)."""
        if self._offloads_optimizer() and self.grad_ranks == 1 and index == self._last_backward[s]:
            self._grads_out[d, s, it] = self._gradients_out(sim, d, s, it)

    def _optimizer_step_offloaded(
        self, sim: Simulation, d: int, s: int, it: int
    ) -> Generator[Any, Any, None]:
        yield from self._cpu_step(sim, d, s, it, self._grads_out.pop((d, s, it), None))

    def _offload_transfers(self) -> int:
        """Copies per iteration and simulated replica, at most (known before the operation
        lists): two per (micro-batch, chunk) per GPU when activations are offloaded, and
        with the optimizer two per GPU (and a CPU step)."""
        spec = self.train.offload
        if spec is None:
            return 0
        schedule = self.schedule
        per_gpu = 2 * schedule.micro_batches * schedule.chunks if spec.activations == "cpu" else 0
        per_gpu += 2 if spec.optimizer == "cpu" else 0
        return per_gpu * self.pp * self.tp * self.cp

    def _offloads_optimizer(self) -> bool:
        return self.offload is not None and self.offload.optimizer == "cpu"

    # -- report ------------------------------------------------------------------

    def _offload_traffic(self) -> OffloadTraffic | None:
        spec = self.offload
        if spec is None:
            return None
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        stages = range(self.pp)
        optimizer = 0.0
        cpu_s = 0.0
        if spec.optimizer == "cpu":
            optimizer = max(2 * self._grad_shard(s) * per_value for s in stages)
            cpu = self.topology.devices[self._host[self.placement.workers[0]]]
            per_param = training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer]
            cpu_s = max(self._grad_shard(s) * per_param for s in stages) / (
                cpu.memory_bandwidth_Bps
            )
        micro = [2.0 * sum(self._pair_bytes(s, p) for p in self._offloaded[s]) for s in stages]
        iterations = self.train.iterations
        waits = [
            max(
                (w for (_, _, i), w in self._offload_waits.items() if i == it),
                default=0.0,
            )
            for it in range(iterations)
        ]
        return OffloadTraffic(
            optimizer=spec.optimizer,
            activations=spec.activations,
            optimizer_bytes_per_iteration=optimizer,
            activation_bytes_per_iteration=max(micro),
            pcie_exposed_s=sum(waits) / iterations,
            cpu_optimizer_s=cpu_s,
            cpu_memory_bytes=self._cpu_memory(),
        )
