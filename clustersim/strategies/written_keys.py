"""The training keys a strategy reads, and the refusal of those it would ignore.

The sections ``parallelism``, ``pipeline``, ``zero`` and ``data_parallel`` are shared by the
four training strategies (``data_parallel``, ``zero``, ``parameter_server`` and ``pipeline``,
the 3D hybrid), and each reads only some of their keys: ``parallelism.tp_mode`` means
nothing to plain data parallelism, ``data_parallel.ps`` nothing to an all-reduce.  A key the
user wrote that the chosen strategy does not read would change nothing, silently; so it is
refused, exit 2 at its key path, saying which strategy runs the scenario and what would
make the key act.  A key written with its default value asks for nothing and passes.

Each strategy declares the keys it reads (:attr:`TrainingStrategy.reads
<clustersim.strategies.base.TrainingStrategy.reads>`: key paths, a section's path covering
all its keys); ``tests/test_written_keys.py`` sets, for every strategy, each key it does not
read and expects the refusal.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import Problem, join_path
from ..parallel.rules import grid_size_problem
from ..scenario.training import AllreduceSyncSpec

SECTIONS = ("parallelism", "pipeline", "zero", "data_parallel")
"""The sections whose keys the training strategies share."""

DATA_PARALLEL_READS = frozenset(
    {
        "parallelism.dp",
        "parallelism.tp",
        "parallelism.pp",
        "parallelism.cp",
        "parallelism.ep",
        "data_parallel.sync",
        "data_parallel.workers",
        "zero.stage",
    }
)
"""What every data-parallel strategy (data_parallel, zero, parameter_server) reads: the
degrees (dp is checked against the workers; tp, pp, cp and ep are 1, or the scenario would
be the hybrid's), the sync, the workers and the ZeRO stage (which chose the strategy)."""

HYBRID = "a pipeline section, or pp, tp, cp or ep > 1 (the 3D hybrid reads it)"
HYBRID_ONLY_ALLREDUCE = frozenset({"precision"})
"""Keys of ``data_parallel.allreduce`` only the 3D hybrid reads."""
ALLREDUCE_READS = frozenset(
    f"data_parallel.allreduce.{key}"
    for key in AllreduceSyncSpec.model_fields
    if key not in HYBRID_ONLY_ALLREDUCE
)
"""The ``data_parallel.allreduce`` keys the data_parallel and zero strategies read."""
KEY_HINTS = {
    "parallelism": HYBRID,
    "pipeline": HYBRID,
    "zero.prefetch": "zero.stage 1-3 without a pipeline section and with pp = tp = cp = ep = 1 "
    "(the zero strategy reads it)",
    "zero.overlap_param_gather": HYBRID,
    "data_parallel.ps": "data_parallel.sync: ps (the parameter_server strategy reads it)",
    "data_parallel.allreduce": "data_parallel.sync: allreduce",
    "data_parallel.allreduce.precision": HYBRID,
    "data_parallel.balance": "data_parallel.sync: allreduce (data_parallel, zero and the 3D "
    "hybrid share the batch out; parameter servers split it evenly)",
}
"""What would make an unread key act, by the longest key path that covers it."""


def hint_for(key: str) -> str:
    """What would make ``key`` act (:data:`KEY_HINTS`), or leaving it out."""
    found = [read for read in KEY_HINTS if _covered(key, (read,))]
    return KEY_HINTS[max(found, key=len)] if found else "leave the key out"


def written_keys(scenario: Any) -> Iterator[tuple[str, Any, Any]]:
    """(key path, value, default) of every key written in the shared sections, nested
    sections (``data_parallel.allreduce``, ``data_parallel.ps``) entered."""
    for section in SECTIONS:
        spec = getattr(scenario, section, None)
        if isinstance(spec, BaseModel):
            yield from _written(spec, section)


def _written(model: BaseModel, path: str) -> Iterator[tuple[str, Any, Any]]:
    defaults = _defaults(type(model))
    for name, field in type(model).model_fields.items():
        if name not in model.model_fields_set:
            continue
        key = join_path(path, field.alias or name)
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _written(value, key)
        else:
            yield key, value, getattr(defaults, name, None)


@functools.cache
def _defaults(model: type[BaseModel]) -> BaseModel | None:
    """The section with every key at its default, validated (``25MB`` read as bytes), or None
    if the section has required keys."""
    try:
        return model()
    except ValidationError:
        return None


def _covered(key: str, reads: Iterable[str]) -> bool:
    return any(key == read or key.startswith(read + ".") for read in reads)


def unread_problems(scenario: Any, strategy: str, reads: Iterable[str]) -> list[Problem]:
    """A problem for every key written in the shared sections, with a value other than its
    default, that ``reads`` does not cover: ``strategy`` would ignore it."""
    reads = tuple(reads)
    return [
        Problem(
            key,
            f"the {strategy} strategy runs this scenario and does not read this key: it would "
            f"be ignored",
            hint_for(key),
        )
        for key, value, default in written_keys(scenario)
        if value != default and not _covered(key, reads) and not _former_default(key, value)
    ]


FORMER_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "parallelism.sequence_parallel": (False,),
    "training.recompute": ("none",),
}
"""Keys whose default became ``auto`` (issue 41), with the values that were their defaults
before: written in a scenario whose strategy does not read the key, such a value still
changes nothing (a data-parallel run has no tensor parallelism to split), so it is not
refused as ignored."""


def _former_default(key: str, value: Any) -> bool:
    return any(value == former for former in FORMER_DEFAULTS.get(key, ()))


def dp_problems(scenario: Any, workers: int) -> list[Problem]:
    """``parallelism.dp`` of a data-parallel strategy against its ``workers`` (tp, pp and cp
    are 1 there): the placement rule (:func:`~clustersim.parallel.rules.grid_size_problem`)
    the hybrid applies too."""
    parallelism = getattr(scenario, "parallelism", None)
    if parallelism is None or "dp" not in parallelism.model_fields_set:
        return []
    p = parallelism
    problem = grid_size_problem(workers, p.dp, p.tp, p.pp, cp=p.cp)
    return [] if problem is None else [problem]


def without_unread(document: dict[str, Any], reads: Iterable[str]) -> dict[str, Any]:
    """``document`` (a scenario mapping, changed in place and returned) without the keys of
    the shared sections that ``reads`` does not cover: what a study that chooses the strategy
    of a user's scenario writes (``clustersim plan``'s ZeRO-3 candidates drop the tensor
    keys a hybrid candidate reads)."""
    reads = tuple(reads)
    for section in SECTIONS:
        spec = document.get(section)
        if isinstance(spec, dict):
            _drop(spec, section, reads)
    return document


def _drop(mapping: dict[str, Any], path: str, reads: tuple[str, ...]) -> None:
    for key in list(mapping):
        sub = f"{path}.{key}"
        if _covered(sub, reads):
            continue
        value = mapping[key]
        if isinstance(value, dict) and any(read.startswith(sub + ".") for read in reads):
            _drop(value, sub, reads)
        else:
            del mapping[key]
