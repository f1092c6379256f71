"""The strategy part of summary.json: :class:`StrategySummary`, the base of each strategy
family's typed class, and the registry that finds them.

Each family's class lives beside its strategy (``strategies/zero.py``,
``strategies/hybrid/summary.py``, ...: :data:`FAMILY_MODULES`) and registers itself under
the workload name its strategy writes in ``workload`` (``clustersim list summaries``);
:meth:`StrategySummary.kind` finds the class for a summary read back from disk, the
registry importing those modules on its first lookup (this layer never imports them).
A strategy without a class of its own (a third-party plugin returning a dict) gets
:class:`UntypedSummary`, which keeps its keys as they are.  The bases the training
families share are in :mod:`.training`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..registry import Registered, Registry
from .parts import SummaryPart

FAMILY_MODULES = (
    "clustersim.strategies.collective",
    "clustersim.strategies.data_parallel",
    "clustersim.strategies.hybrid.summary",
    "clustersim.strategies.jobs.summary",
    "clustersim.strategies.parameter_server.summary",
    "clustersim.strategies.program",
    "clustersim.strategies.trace",
    "clustersim.strategies.zero",
)
"""The modules of the families' summary types that live beside their strategies (dotted
names: the registry imports them on its first lookup; this layer never imports them)."""


class StrategySummary(SummaryPart, Registered):
    """Base of the strategy parts; a subclass defining ``name`` (the workload) registers."""

    registry: ClassVar[Registry[type[StrategySummary]]] = Registry(
        "summaries", "summary layout", sort=True, builtins=FAMILY_MODULES
    )

    @classmethod
    def kind(cls, workload: object) -> type[StrategySummary]:
        """The registered class for ``workload`` (:class:`UntypedSummary` if none)."""
        found = cls.registry.get(workload) if isinstance(workload, str) else None
        return found if found is not None else UntypedSummary

    # What the outputs draw, for every family (empty where a family has none of it).

    def iteration_times(self) -> list[float]:
        """Seconds per iteration, in order ([] for a workload without iterations)."""
        return []

    def device_bubbles(self) -> Mapping[str, Any]:
        """Bubble fraction per device, where the strategy measures one ({} otherwise)."""
        return {}

    def stage_activations(self) -> Mapping[str, Any]:
        """Stored activations per pipeline stage, as summary.json holds them ({} if none)."""
        return {}

    def replicas(self) -> list[list[str]]:
        """The devices of each data-parallel replica, replica 0 first ([] for a workload
        without replicas); the simulated replica is replica 0 in one-replica mode."""
        return []


FRAME_KEYS = frozenset(
    ("scenario", "seed", "workload", "clustersim_version", "makespan_s")
    + ("mfu", "tokens_per_s", "time_to_train_s", "gpu_hours", "cost")
    + ("memory", "devices", "busiest_links", "engine", "folded", "tcp")
)
"""Keys of the summary that are not the strategy's (the frame :class:`.summary.Summary`
puts around a strategy's part): what :class:`UntypedSummary` leaves out."""


@dataclass(frozen=True)
class UntypedSummary(StrategySummary):
    """A strategy part with no class of its own: its keys, kept as given."""

    keys: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.keys)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], lenient: bool = False) -> UntypedSummary:
        return cls({k: v for k, v in data.items() if k not in FRAME_KEYS})

    def __getattr__(self, name: str) -> Any:
        keys = self.__dict__.get("keys", {})
        if name in keys:
            return keys[name]
        raise AttributeError(name)

    def iteration_times(self) -> list[float]:
        return list(self.keys.get("iteration_times_s") or [])

    def device_bubbles(self) -> Mapping[str, Any]:
        return self.keys.get("per_device_bubble") or {}

    def stage_activations(self) -> Mapping[str, Any]:
        return self.keys.get("activation_memory") or {}
