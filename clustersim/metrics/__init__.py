"""Metrics derived from records, and summary.json as typed parts.

* :mod:`.breakdown` -- per-device compute / communication / idle seconds, link loads;
* :mod:`.families` -- :class:`StrategySummary`, the base of each strategy family's part of
  the summary, and the registry that finds the families' parts beside their strategies;
* :mod:`.training` -- the keys training strategies share (iteration times, FLOP rates) and
  the bases of their parts (:class:`TrainingSummary`, :class:`FlopTrainingSummary`);
* :mod:`.usage` -- the keys users compare: MFU, tokens/s, time to train, GPU-hours, cost;
* :mod:`.goodput` -- the goodput keys of a run with failures, checkpoints or a job length;
* :mod:`.link_table` -- every link that carried traffic, busiest first, held as columns;
* :mod:`.summary` -- :class:`Summary`, the whole summary.json, written and read back;
* :mod:`.folding` -- the ``folded`` block of a folded run folder's summary.json;
* :mod:`.parts` -- :class:`SummaryPart`, the dataclass-to-keys machinery, and
  :func:`canonical_json`, the text of summary.json.
"""

from ..records import COMMUNICATION_KINDS
from .breakdown import DeviceTimes, Interval, LinkLoad, device_breakdown, link_table, union_length
from .families import StrategySummary, UntypedSummary
from .folding import FoldedEntry, FoldedLinks, FoldedOutputs, FoldedRows, FoldedSummary
from .goodput import GoodputSummary
from .parts import (
    OPTIONAL,
    OPTIONAL_SPLICE,
    SPLICE,
    SummaryFormatError,
    SummaryPart,
    canonical_json,
    canonical_value,
)
from .summary import (
    AutoChoice,
    EngineCounters,
    LinkFailureCounters,
    MemoryBlock,
    MemoryRow,
    RunHeader,
    Summary,
    SummaryDict,
)
from .training import (
    BUBBLE_FRACTION,
    BatchShares,
    CollectivesRan,
    DeviceShares,
    FlopRates,
    FlopTrainingSummary,
    IterationTimes,
    ModelInfo,
    TrainingSummary,
    TrainingTimes,
    flop_rates,
    training_summary,
    weighted_mean,
)
from .usage import UsageSummary, usage_summary

__all__ = [
    "AutoChoice",
    "BUBBLE_FRACTION",
    "BatchShares",
    "UsageSummary",
    "usage_summary",
    "COMMUNICATION_KINDS",
    "OPTIONAL",
    "OPTIONAL_SPLICE",
    "GoodputSummary",
    "FoldedEntry",
    "FoldedLinks",
    "FoldedOutputs",
    "FoldedRows",
    "FoldedSummary",
    "SPLICE",
    "CollectivesRan",
    "MemoryRow",
    "DeviceShares",
    "DeviceTimes",
    "EngineCounters",
    "FlopRates",
    "FlopTrainingSummary",
    "Interval",
    "IterationTimes",
    "LinkFailureCounters",
    "LinkLoad",
    "MemoryBlock",
    "ModelInfo",
    "RunHeader",
    "StrategySummary",
    "Summary",
    "SummaryDict",
    "SummaryFormatError",
    "SummaryPart",
    "TrainingSummary",
    "TrainingTimes",
    "UntypedSummary",
    "canonical_json",
    "canonical_value",
    "device_breakdown",
    "flop_rates",
    "link_table",
    "training_summary",
    "union_length",
    "weighted_mean",
]
