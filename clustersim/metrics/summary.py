"""summary.json as one typed object: :class:`Summary`.

Its keys, in order: the :class:`RunHeader` (every run), the strategy's part
(a :class:`~clustersim.metrics.families.StrategySummary` chosen by
``workload``), the usage keys (:class:`~clustersim.metrics.usage.UsageSummary`: ``mfu``,
``tokens_per_s``, ``time_to_train_s``, ``gpu_hours``, ``cost``, training runs that can
compute them), the goodput keys (:class:`~clustersim.metrics.goodput.GoodputSummary`,
training runs with failures, checkpoints or a job length), ``auto_choices`` (what the
training strategies chose for the keys the scenario left to them: :class:`AutoChoice`),
``memory`` (training strategies that model memory),
``devices``, ``busiest_links``, ``engine``, in a folded run folder ``folded``
(:mod:`.folding`) and, where the NICs run TCP, ``tcp`` (:mod:`.transport`).  ``Summary.from_dict`` reads a
summary.json back into the same types, so reports, plan, sweep, golden and
the CLI read attributes, never strings with ``.get()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .breakdown import DeviceTimes, LinkLoad
from .families import FRAME_KEYS, StrategySummary  # noqa: F401  (FRAME_KEYS re-exported)
from .folding import FoldedOutputs
from .goodput import GoodputSummary
from .parts import OPTIONAL, OPTIONAL_SPLICE, SPLICE, SummaryPart
from .transport import TcpSummary
from .usage import UsageSummary


@dataclass(frozen=True)
class RunHeader(SummaryPart):
    """The keys every summary.json starts with."""

    scenario: str
    seed: int
    workload: str
    """The strategy that ran (its registered name)."""
    clustersim_version: str
    makespan_s: float
    """End of the last record, seconds."""


@dataclass(frozen=True)
class LinkFailureCounters(SummaryPart):
    """``engine.link_failures``, only in runs where links went down
    (:mod:`clustersim.network.failures`)."""

    windows: int
    """Link down windows that began (one per link and window)."""
    reroutes: int
    """Flows moved to another equal-cost route because a link of theirs was down."""
    stalls: int
    """Times a flow stalled with no route left."""

    @classmethod
    def of(cls, failures: Any) -> LinkFailureCounters | None:
        """The counters of a network's ``LinkFailures``, or None without one."""
        if failures is None:
            return None
        return cls(failures.links_failed, failures.reroutes, failures.stalls)


@dataclass(frozen=True)
class EngineCounters(SummaryPart):
    """summary.json's ``engine`` block: how much work the simulation did."""

    records: int
    flows_completed: int
    rate_recomputations: int
    link_failures: LinkFailureCounters | None = field(default=None, metadata=OPTIONAL)
    estimated_events: float | None = field(default=None, metadata=OPTIONAL)
    """The work estimated before the run (:mod:`clustersim.budget`): transfers + records
    (+ sends priced); not written for a workload that cannot estimate it."""
    estimated_memory_bytes: float | None = field(default=None, metadata=OPTIONAL)
    """The simulator process's peak memory estimated before the run, without writing the
    run folder (:func:`clustersim.budget.estimate_memory`; a function of the scenario
    alone, so the summary stays the same on every machine)."""


@dataclass(frozen=True)
class MemoryRow(SummaryPart):
    """One device's row of ``memory.per_device`` (bytes)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    communication_buffers_bytes: float
    peak_bytes: float
    """The sum of the parts (fragmentation included)."""
    capacity_bytes: float
    fits: bool
    fragmentation_bytes: float | None = field(default=None, metadata=OPTIONAL)
    """Allocator fragmentation allowance (``training.memory.fragmentation``; not written
    when none)."""
    context_bytes: float | None = field(default=None, metadata=OPTIONAL)
    """Memory outside PyTorch's allocator: the CUDA context and libraries
    (``training.memory.context``; not written when none)."""


@dataclass(frozen=True)
class MemoryBlock(SummaryPart):
    """The ``memory`` block: whether every device fits, and each device's parts."""

    fits: bool
    """Every device within its capacity."""
    peak_bytes: float
    """The largest peak over the devices."""
    peak_device: str
    """The first device with that peak."""
    capacity_bytes: float
    """The capacity of ``peak_device``."""
    devices_over_capacity: int
    per_device: dict[str, MemoryRow]
    fullest_device: str | None = field(default=None, metadata=OPTIONAL)
    """The first device with the largest peak / capacity, when it is not ``peak_device``
    (devices of several memory sizes: a mixed cluster's smaller GPUs fill first)."""


@dataclass(frozen=True)
class AutoChoice(SummaryPart):
    """One entry of ``auto_choices``: what a training strategy chose for a scenario key left
    to it (``auto``, or not written), keyed by that key's path (``training.recompute``,
    ``pipeline.chunks``, ``pipeline.stage_layers``, ``parallelism.sequence_parallel``).
    ``scenario.resolved.yaml`` writes ``value`` at that path, so it runs to the same result."""

    value: Any
    """The value chosen, as the scenario would write it (a mode, a count, a list)."""
    reason: str
    """Why, in one sentence (the rule, or the memory and time that decided it)."""

    def value_text(self) -> str:
        """The value for people: a list with runs of equal entries folded
        (``[7, 8 x 14, 7]``), booleans as YAML writes them."""
        value = self.value
        if isinstance(value, bool):
            return "true" if value else "false"
        if not isinstance(value, list):
            return str(value)
        runs: list[list[Any]] = []
        for item in value:
            if runs and runs[-1][0] == item:
                runs[-1][1] += 1
            else:
                runs.append([item, 1])
        return (
            "["
            + ", ".join(f"{v} x {n}" if n > 2 else ", ".join([str(v)] * n) for v, n in runs)
            + "]"
        )

    def line(self, key: str) -> str:
        """``pipeline.chunks = 4: the fastest that fits ...``."""
        return f"{key} = {self.value_text()}: {self.reason}"


@dataclass(frozen=True)
class Summary(SummaryPart):
    """A whole summary.json; strategy fields read through (``summary.iteration_time_s``)."""

    header: RunHeader = field(metadata=SPLICE)
    strategy: StrategySummary = field(metadata=SPLICE)
    usage: UsageSummary | None = field(default=None, metadata=OPTIONAL_SPLICE)
    """MFU, tokens/s, time to train, GPU-hours, cost (None: none computable)."""
    resilience: GoodputSummary | None = field(default=None, metadata=OPTIONAL_SPLICE)
    """The whole job under failures and checkpoints (None: nothing to predict)."""
    auto_choices: dict[str, AutoChoice] | None = field(default=None, metadata=OPTIONAL)
    """Scenario key path -> what the strategy chose for it (None: nothing was chosen)."""
    memory: MemoryBlock | None = field(default=None, metadata=OPTIONAL)
    devices: dict[str, DeviceTimes] = field(default_factory=dict)
    busiest_links: list[LinkLoad] = field(default_factory=list)
    engine: EngineCounters | None = field(default=None, metadata=OPTIONAL)
    folded: FoldedOutputs | None = field(default=None, metadata=OPTIONAL)
    """What of the run folder was folded (:mod:`.folding`; None: nothing)."""
    tcp: TcpSummary | None = field(default=None, metadata=OPTIONAL)
    """What the TCP stack cost the hosts (:mod:`.transport`; None: RDMA NICs)."""
    gpu_types: dict[str, int] | None = field(default=None, metadata=OPTIONAL)
    """GPUs per type of a mixed cluster (its presets' names; None: one type)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], lenient: bool = False) -> Summary:
        """The summary in ``data`` (summary.json's mapping), its strategy part by ``workload``."""
        header = RunHeader.from_dict(data, lenient)
        strategy = StrategySummary.kind(data.get("workload")).from_dict(data, lenient)
        rest = _Frame.from_dict(data, lenient)
        return cls(
            header,
            strategy,
            rest.usage,
            rest.resilience,
            rest.auto_choices,
            rest.memory,
            rest.devices,
            rest.busiest_links,
            rest.engine,
            rest.folded,
            rest.tcp,
            rest.gpu_types,
        )

    @classmethod
    def of(cls, summary: Summary | Mapping[str, Any]) -> Summary:
        """``summary`` typed: as it is, the summary a :class:`SummaryDict` was made from, or
        read leniently from a mapping (partial or older summaries: missing keys read as
        None)."""
        if isinstance(summary, Summary):
            return summary
        typed = getattr(summary, "typed", None)
        if isinstance(typed, Summary):
            return typed
        return cls.from_dict(summary, lenient=True)

    def as_summary_dict(self) -> SummaryDict:
        """:meth:`as_dict`, remembering this summary (:class:`SummaryDict`)."""
        plain = SummaryDict(self.as_dict())
        plain.typed = self
        return plain

    def numbers(self) -> dict[str, float]:
        """The top-level numeric keys (booleans left out), in summary order."""
        return {
            key: value
            for key, value in self.top_level().items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }


class SummaryDict(dict[str, Any]):
    """summary.json's keys -- a plain dict to every reader -- that remembers the typed
    :class:`Summary` it was made from, so that outputs read the summary without typing it
    again from the dict (seconds at 131,072 devices: :meth:`Summary.of`).  A copy is a
    plain dict; do not change one in place and read it typed again."""

    typed: Summary | None = None


@dataclass(frozen=True)
class _Frame(SummaryPart):
    """The keys after the strategy's (read separately: they have defaults)."""

    usage: UsageSummary | None = field(default=None, metadata=OPTIONAL_SPLICE)
    resilience: GoodputSummary | None = field(default=None, metadata=OPTIONAL_SPLICE)
    auto_choices: dict[str, AutoChoice] | None = None
    memory: MemoryBlock | None = None
    devices: dict[str, DeviceTimes] = field(default_factory=dict)
    busiest_links: list[LinkLoad] = field(default_factory=list)
    engine: EngineCounters | None = None
    folded: FoldedOutputs | None = None
    tcp: TcpSummary | None = None
    gpu_types: dict[str, int] | None = None
