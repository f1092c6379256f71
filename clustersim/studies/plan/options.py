"""The options of ``clustersim plan``: what to search and how to simulate each candidate,
and the parsing of its count flags.  Units: none (counts)."""

from __future__ import annotations

from dataclasses import dataclass

from ...collectives.models import NetworkModel
from ...errors import Problem, ScenarioError

DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
"""Samples per micro-batch tried when ``--micro-batch`` is not given."""
DEFAULT_ZERO_STAGES = (0, 1)
"""ZeRO stages tried when ``--zero`` is not given."""
DEFAULT_CHUNKS = (1, 2)
"""Model chunks per device tried when ``--chunks`` is not given (with the scenario's own
interleaved count): 1 runs the scenario's schedule, 2 Megatron-LM's interleaved 1F1B."""
INTERLEAVED = "interleaved"
"""The schedule of candidates with more than one model chunk per device."""
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_NETWORK = "analytical"
"""``network.model`` of every candidate when ``--network`` is not given (congestion-aware:
the search is many runs); any registered network model may be asked for."""


def network_note(name: str) -> str:
    """What the network model ``name`` is, for plan's notes: its registry's description."""
    return NetworkModel.registry.lookup(name, "--network").description


DEFAULT_SCHEDULE = "1f1b"


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class PlanOptions:
    """What to search and how to simulate each candidate (the ``clustersim plan`` flags)."""

    devices: int | None = None
    """GPUs to plan for (None: the scenario's own)."""
    tp: tuple[int, ...] | None = None
    """Tensor-parallel degrees to try (None: every valid one)."""
    pp: tuple[int, ...] | None = None
    """Pipeline stages to try (None: every valid count)."""
    micro_batch: tuple[int, ...] = DEFAULT_MICRO_BATCHES
    """Samples per micro-batch to try."""
    zero: tuple[int, ...] = DEFAULT_ZERO_STAGES
    """ZeRO stages to try."""
    chunks: tuple[int, ...] | None = None
    """Model chunks per device to try: 1 the scenario's schedule (1f1b by default), v > 1
    the interleaved schedule (None: :data:`DEFAULT_CHUNKS` and the scenario's own)."""
    network: str = DEFAULT_NETWORK
    """``network.model`` of every candidate: analytical or flow."""
    iterations: int = 1
    """``training.iterations`` of every candidate."""
    all_replicas: bool = False
    """Simulate every data-parallel replica (default: replica 0 stands for all -- identical
    replicas, data-parallel collectives priced analytically -- unless there are stragglers or
    the cluster is mixed)."""
    max_events: int | None = None
    """Work limit of each candidate's run (``engine.max_events``; None: the scenario's)."""
    max_memory: float | None = None
    """Memory limit of each candidate's run, bytes (``engine.max_memory``; None: the
    scenario's, else 80% of this machine's)."""


def parse_counts(
    text: str, flag: str, minimum: int = 1, maximum: int | None = None, example: str = "1,2,4"
) -> tuple[int, ...]:
    """``"1,2,4"`` as ``(1, 2, 4)`` (sorted, without repeats); a ScenarioError naming ``flag``."""
    values: list[int] = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
            raise ScenarioError(
                Problem(
                    flag, f"expected whole numbers {bound}, got {item.strip()!r}", f"e.g. {example}"
                )
            )
        values.append(value)
    return tuple(sorted(set(values)))


def parse_zero_stages(text: str) -> tuple[int, ...]:
    """``--zero``: stages 0-3 (``fsdp`` is 3), e.g. ``"0,1,fsdp"`` as ``(0, 1, 3)``."""
    items = ["3" if item.strip().lower() == "fsdp" else item for item in text.split(",")]
    return parse_counts(",".join(items), "--zero", 0, 3, example="0,1,2,3 (fsdp = 3)")


def check_count(value: int | None, flag: str) -> None:
    """A ScenarioError naming ``flag`` unless ``value`` is None or at least 1."""
    if value is not None and value < 1:
        raise ScenarioError(Problem(flag, f"expected a whole number >= 1, got {value}"))
