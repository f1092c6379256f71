"""The ``collective`` workload: one collective operation, run back to back.

```yaml
workload:
  collective: allreduce          # or all-reduce, all_gather, reduce_scatter, broadcast, ...
  algorithm: auto                # NCCL's choice, or a registered algorithm: ring, ...
  bytes: 160MB                   # nccl-tests size (see clustersim.collectives.ops)
  group: "rack0/*/gpu*"          # glob over device names; default every GPU
  root: 0                        # rank of the root (broadcast, reduce, gather, scatter)
  chunk: 4MB                     # pipelining chunk of algorithms that pipeline
  bidirectional: false           # rings both ways, half the data each way
  reduce_cost: false             # reductions cost bytes / memory bandwidth
  iterations: 1                  # how many times, back to back
  options: {inter: ring}         # algorithm-specific options
  protocol: LL                   # NCCL protocol priced on top: LL, LL128, Simple, auto
```

``algorithm: auto`` and ``protocol: auto`` choose as NCCL's tuner does
(:mod:`clustersim.collectives.auto`); ``protocol`` defaults to ``network.protocol``.

The network model (``network: {model: flow | analytical}``) decides whether
the collective's sends are simulated as flows or its alpha-beta cost is used.
The summary gives the time per iteration and nccl-tests' algorithm and bus
bandwidths (GB = 1e9 bytes).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..budget import WorkEstimate
from ..collectives import (
    Algorithm,
    CollectiveCall,
    Schedule,
    bandwidths,
    canonical_op,
    channel_count,
    check_call,
    execute,
    root_problem,
    run_collective,
    slices,
    timed_group_problem,
    what_ran,
)
from ..collectives import label_of as _label_of
from ..collectives.algorithm import algorithm
from ..collectives.bus import figures_GBps
from ..collectives.models import network_model
from ..collectives.work import call_work, events_by_chunk, larger_chunk
from ..engine import Simulation
from ..errors import ScenarioError
from ..metrics import OPTIONAL, StrategySummary
from ..scenario import Bool, Count, Glob, Int, PositiveSize, Size
from ..scenario.training import AlgorithmName
from ..units import format_size
from .base import Strategy


class CollectiveWorkload(BaseModel):
    """``workload: {collective: allreduce, bytes: 160MB, ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    collective: str = Field(description="operation: allreduce, allgather, reducescatter, ...")
    algorithm: AlgorithmName = Field(
        "auto", description="collective algorithm, e.g. ring, hierarchical; auto: NCCL's choice"
    )
    size_bytes: Size = Field(alias="bytes", description="nccl-tests size, e.g. 160MB")
    group: Glob | None = Field(
        None, description="glob over device names (default: every GPU, or every device if none)"
    )
    root: Int = Field(
        0, ge=0, description="root rank, 0 .. ranks - 1 (rooted ops and the root algorithm)"
    )
    chunk_bytes: PositiveSize | None = Field(
        None, alias="chunk", description="pipelining chunk (default: the algorithm's)"
    )
    bidirectional: Bool = Field(False, description="run rings both ways, half the data each way")
    reduce_cost: Bool = Field(False, description="reductions cost bytes / memory bandwidth")
    iterations: Count = Field(1, description="times the collective runs, back to back")
    options: dict[str, Any] = Field(
        default_factory=dict, description="algorithm options, e.g. {inter: ring}"
    )
    protocol: Literal["LL", "LL128", "Simple", "auto", "none"] | None = Field(
        None,
        description="NCCL protocol priced on top of the links: auto, LL, LL128, Simple or "
        "none (default: network.protocol)",
    )


@dataclass(frozen=True)
class CollectiveSummary(StrategySummary):
    """One collective repeated ``iterations`` times, as nccl-tests reports it."""

    name = "collective"
    description = "op, algorithm, ranks, bytes, time_s, algbw_GBps, busbw_GBps"

    op: str
    algorithm: str
    chosen: str
    """The algorithm (and protocol) that ran, ``auto`` resolved (``double_tree/LL``)."""
    ranks: int
    group: list[str]
    bytes: float
    iterations: int
    model: str
    """The network model that priced it (``flow`` or ``analytical``)."""
    time_s: float
    """Mean seconds per iteration."""
    times_s: list[float]
    algbw_GBps: float
    busbw_GBps: float
    bytes_sent_per_device: float
    protocol: str | None = field(default=None, metadata=OPTIONAL)
    """The protocol that ran (``auto`` resolved; ``none``: line rates, no protocol)."""
    channels: int | None = field(default=None, metadata=OPTIONAL)
    """Channels it ran in (``auto``: NCCL's count for the group)."""
    channels_played: int | None = field(default=None, metadata=OPTIONAL)
    """Slices simulated: the channels' distinct rotations when copies merge."""
    link_bandwidths_GBps: dict[str, float] | None = field(default=None, metadata=OPTIONAL)
    """Per link kind (NVLink, PCIe, NET), the bandwidth links were priced at: NCCL's figure
    where a protocol runs on a cluster of nodes (absent: line rates)."""


class Collective(Strategy):
    """Run one collective operation ``iterations`` times back to back."""

    name = "collective"
    description = "one collective (allreduce, allgather, ...) with a chosen algorithm, repeated"
    config_model = CollectiveWorkload

    def check(self) -> None:
        """Operation known, group matches devices, root in range, algorithm applies."""
        cfg = self.config
        op = canonical_op(cfg.collective, "workload.collective")
        names = self.devices_of(cfg.group, "workload.group")
        for problem in (
            timed_group_problem(names, "workload.group", "a glob matching 2 or more devices"),
            root_problem(cfg.root, len(names), "workload.root"),
        ):
            if problem is not None:
                raise ScenarioError(problem)
        self.call = CollectiveCall(
            op,
            names,
            cfg.size_bytes,
            algorithm=cfg.algorithm,
            root=cfg.root,
            chunk_bytes=cfg.chunk_bytes,
            bidirectional=cfg.bidirectional,
            reduce_cost=cfg.reduce_cost,
            options=dict(cfg.options),
            protocol=cfg.protocol or self.scenario.network.protocol,
        )
        self.algorithm = check_call(self.call, self.topology, "workload.algorithm")

    def describe(self) -> str:
        call = self.call
        times = "" if self.config.iterations == 1 else f", {self.config.iterations} times"
        return (
            f"{call.op} of {format_size(call.size_bytes)} over {call.n} devices "
            f"({call.algorithm}{times})"
        )

    @property
    def channels(self) -> int | str:
        """``network.channels``: a count or ``auto``."""
        return getattr(getattr(self.scenario, "network", None), "channels", 1)

    def estimate_work(self) -> WorkEstimate:
        """The call's work (:func:`~clustersim.collectives.work.call_work`) x iterations,
        and the schedule the summary measures (built once, in either model)."""
        runs = call_work(  # its calls run one after another, alone
            self.call, self.topology, model=self.model, channels=self.channels, alone=True
        )
        work = runs * self.config.iterations
        if self.model != "flow":
            algo, part = self._resolved()
            measured = algo.measured_call(part, self.topology)
            work += WorkEstimate(priced_sends=algo.sends(measured, self.topology))
        return work

    def shorter(self) -> list[str]:
        """A larger ``workload.chunk`` (in the flow-level model, the smallest power of two
        above the one given that brings the run under the notice,
        :func:`~clustersim.collectives.work.larger_chunk`), one iteration, the analytical
        model."""
        from ..budget import EVENTS_PER_S, NOTICE_AFTER_S
        from ..units import size_flag

        hints = []
        chunk, iterations = self.call.chunk_bytes, self.config.iterations
        if chunk is not None and self.model == "flow":
            events_of = events_by_chunk(
                self.call,
                self.topology,
                model=self.model,
                channels=self.channels,
                iterations=iterations,
            )
            larger = larger_chunk(events_of, chunk, NOTICE_AFTER_S * EVENTS_PER_S)
            if larger is not None:
                hints.append(f"--set workload.chunk={size_flag(larger)}")
        if iterations > 1:
            hints.append("--set workload.iterations=1")
        if self.model == "flow":
            hints.append("--network analytical")
        return hints

    def _resolved(self) -> tuple[Algorithm, CollectiveCall]:
        """The algorithm that runs the call and the call it runs (``auto`` resolved as its
        first channel's)."""
        first = slices(self.call, self.topology, self.channels, self.model)[0]
        part = replace(self.call, algorithm=first.algorithm, protocol=first.protocol)
        return algorithm(part.algorithm), part

    def _most_bytes_sent(self) -> float:
        """Bytes the busiest rank sends per iteration, measured on the call's schedule;
        in the analytical model a call too large to build is measured on a smaller copy
        and scaled (:meth:`Algorithm.most_bytes_sent`)."""
        if self.model != "flow":
            algo, part = self._resolved()
            if algo.measured_call(part, self.topology) is not part:
                return algo.most_bytes_sent(part, self.topology)
        return max(self.schedule().bytes_sent(), default=0.0)

    @property
    def model(self) -> str:
        """``flow`` or ``analytical``, from the scenario's ``network.model``."""
        network = getattr(self.scenario, "network", None)
        return getattr(network, "model", "flow")

    def schedule(self) -> Schedule:
        """The call's schedule (built once, reused by every iteration)."""
        if getattr(self, "_schedule", None) is None:
            algo, part = self._resolved()
            self._schedule = algo.schedule(part, self.topology)
        return self._schedule

    def start(self, sim: Simulation) -> None:
        self.times: list[float] = []
        sim.process(self._run(sim))

    def _run(self, sim: Simulation) -> Generator[Any, Any, None]:
        call = self.call
        label = _label_of(call)
        channels = self.channels
        # Sends played one by one from the schedule built once, unless the call needs
        # run_collective (another network model, channels, protocol or auto choice).
        plain = network_model(self.model).plays_sends and channels == 1
        plain = plain and call.protocol is None and call.algorithm != "auto"
        for i in range(self.config.iterations):
            start = sim.now
            if not plain:
                yield run_collective(
                    sim, call, model=self.model, label=label, iteration=i, channels=channels
                )
            else:
                yield execute(
                    sim,
                    call.devices,
                    self.schedule(),
                    label=label,
                    reduce_cost=call.reduce_cost,
                    iteration=i,
                )
            self.times.append(sim.now - start)

    def summarize(self, sim: Simulation) -> CollectiveSummary:
        """time_s (mean per iteration), times_s, algbw/busbw in GB/s, bytes sent per device,
        and ``chosen``: the algorithm (and protocol) that ran, ``auto`` resolved."""
        from ..errors import SimulationError

        call = self.call
        if len(self.times) != self.config.iterations:
            raise SimulationError(
                f"collective finished {len(self.times)} of {self.config.iterations} iterations"
            )
        mean = sum(self.times) / len(self.times)
        algbw, busbw = bandwidths(call.op, call.n, call.size_bytes, mean)
        parts = slices(call, self.topology, self.channels, self.model)
        links = figures_GBps(self.topology) if parts[0].protocol else {}
        return CollectiveSummary(
            op=call.op,
            algorithm=call.algorithm,
            chosen=what_ran(call, self.topology, self.channels),
            ranks=call.n,
            group=list(call.devices),
            bytes=call.size_bytes,
            iterations=self.config.iterations,
            model=self.model,
            time_s=mean,
            times_s=list(self.times),
            algbw_GBps=algbw / 1e9,
            busbw_GBps=busbw / 1e9,
            bytes_sent_per_device=self._most_bytes_sent(),
            protocol=parts[0].protocol or "none",
            channels=channel_count(call, self.topology, self.channels),
            channels_played=len(parts),
            link_bandwidths_GBps=links or None,
        )
