"""Every training key a user writes acts or is refused (issue 33, item 1).

For every training strategy, each key of the shared sections (parallelism, zero,
data_parallel with its allreduce and ps blocks) that the strategy does not read
(:attr:`TrainingStrategy.reads`) is set to a value other than its default, and the scenario
must be refused: exit 2 at that key path.  Keys a strategy reads are not tried here: their
effects are the strategies' own tests.  ``parallelism.dp`` is read by the data-parallel
strategies as a check against the workers.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import prepare
from clustersim.cli import main
from clustersim.scenario import (
    AllreduceSyncSpec,
    ParallelismSpec,
    ParameterServerSpec,
    ZeroSpec,
    parse_scenario,
)
from clustersim.strategies import registered_strategies

SHAPE = {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 512}
BASE: dict[str, Any] = {
    "name": "written-keys",
    "cluster": {
        "kind": "two_tier",
        "racks": 1,
        "nodes_per_rack": 2,
        "node": {"gpus": 2, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
    },
    "model": {"transformer": SHAPE},
    "training": {"global_batch": 8, "iterations": 1},
}
"""A small transformer on 4 GPUs (two nodes of two), run by data_parallel."""

STRATEGY_SECTIONS: dict[str, dict[str, Any]] = {
    "data_parallel": {},
    "zero": {"zero": {"stage": 1}},
    "parameter_server": {"data_parallel": {"sync": "ps"}},
    "pipeline": {"parallelism": {"pp": 2}, "pipeline": {"micro_batches": 2}},
}
"""What makes each training strategy run :data:`BASE`."""

OTHER_VALUES: dict[str, Any] = {
    "parallelism.order": ["pp", "tp", "dp"],
    "parallelism.allow_cross_node_tp": True,
    "parallelism.sequence_parallel": True,
    "parallelism.ep_overlap": True,
    "parallelism.tp_comm_overlap": True,
    "parallelism.tp_algorithm": "ring",
    "parallelism.tp_mode": "2d",
    "parallelism.tp_depth": 2,
    "parallelism.simulate_replicas": "one",
    "zero.prefetch": False,
    "zero.overlap_param_gather": True,
    "data_parallel.allreduce.algorithm": "ring",
    "data_parallel.allreduce.bucket": "10MB",
    "data_parallel.allreduce.overlap": False,
    "data_parallel.allreduce.options": {"inter": "ring"},
    "data_parallel.allreduce.channels": 2,
    "data_parallel.allreduce.precision": "fp32",
    "data_parallel.ps.placement": "gpu",
    "data_parallel.ps.servers": 2,
    "data_parallel.ps.server_devices": "*/gpu0",
    "data_parallel.ps.mode": "async",
    "data_parallel.ps.backup_k": 1,
    "data_parallel.ps.staleness": 3,
    "data_parallel.ps.geo_period": 2,
    "data_parallel.ps.partition_bytes": "1MB",
    "data_parallel.ps.credit": 2,
    "data_parallel.ps.key_distribution": "uniform",
    "data_parallel.ps.keys": 8,
    "data_parallel.ps.sharding": "hash",
    "data_parallel.ps.backup_cancel": False,
    "data_parallel.ps.hierarchy": ["gpu", "server"],
    "data_parallel.ps.replicas": 2,
    "data_parallel.ps.failover_timeout": "2s",
}
"""A valid value other than the default for every key a strategy may leave unread."""

SECTION_MODELS = {
    "parallelism": ParallelismSpec,
    "zero": ZeroSpec,
    "data_parallel.allreduce": AllreduceSyncSpec,
    "data_parallel.ps": ParameterServerSpec,
}
"""The sections whose keys are tried (the pipeline section selects the hybrid; the degrees,
``zero.stage`` and ``data_parallel.sync``/``workers`` choose the strategy and are read by
all)."""


def _keys() -> list[str]:
    return [
        f"{section}.{field.alias or name}"
        for section, model in SECTION_MODELS.items()
        for name, field in model.model_fields.items()
    ]


def _reads(strategy: str, key: str) -> bool:
    reads = registered_strategies()[strategy].reads
    return any(key == read or key.startswith(read + ".") for read in reads)


def _cases() -> list[Any]:
    return [
        pytest.param(strategy, key, id=f"{strategy}-{key}")
        for strategy in STRATEGY_SECTIONS
        for key in _keys()
        if not _reads(strategy, key)
    ]


def _with(document: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(document)
    *sections, last = key.split(".")
    place = document
    for section in sections:
        place = place.setdefault(section, {})
    place[last] = value
    return document


def test_every_key_has_another_value_to_try() -> None:
    """A key added to a shared section needs a value here (and a decision in each
    strategy's ``reads``)."""
    read_by_all = {f"parallelism.{k}" for k in ("dp", "pp", "tp", "cp", "ep")} | {"zero.stage"}
    assert set(_keys()) - read_by_all == set(OTHER_VALUES)


@pytest.mark.parametrize("strategy", sorted(STRATEGY_SECTIONS))
def test_the_base_document_runs_the_strategy(strategy: str) -> None:
    """Each strategy's base document is valid and chooses that strategy."""
    document = copy.deepcopy(BASE) | copy.deepcopy(STRATEGY_SECTIONS[strategy])
    assert prepare(parse_scenario(document)).strategy.name == strategy


@pytest.mark.parametrize(("strategy", "key"), _cases())
def test_a_key_the_strategy_does_not_read_is_refused(
    strategy: str, key: str, tmp_path: Path, capsys
) -> None:
    """Exit 2 naming the file and the key path; no traceback."""
    document = _with(BASE | STRATEGY_SECTIONS[strategy], key, OTHER_VALUES[key])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {key}: " in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("dp", "workers", "refused"), [(4, None, False), (5, None, True), (2, "*/gpu0", False)]
)
def test_dp_is_checked_against_the_data_parallel_workers(
    dp: int, workers: str | None, refused: bool, tmp_path: Path, capsys
) -> None:
    """``parallelism.dp`` of a data-parallel scenario must be its number of workers (4 GPUs,
    or the 2 that ``data_parallel.workers`` names): the issue's dp 5 on more GPUs is refused
    at ``parallelism.dp``, not run as data parallelism over every GPU."""
    document = _with(BASE, "parallelism.dp", dp)
    if workers is not None:
        document = _with(document, "data_parallel.workers", workers)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == (2 if refused else 0), err
    if refused:
        assert f"{path}: parallelism.dp: dp 5 x tp 1 x pp 1 = 5, but there are 4 workers" in err


def _former_default_cases() -> list[Any]:
    """Each (strategy, key, former default) where the strategy reads nothing of the key (the
    data-parallel and ZeRO strategies choose ``training.recompute`` themselves)."""
    keys = [("parallelism.sequence_parallel", False), ("training.recompute", "none")]
    return [
        pytest.param(strategy, key, value, id=f"{strategy}-{key}")
        for strategy in ("data_parallel", "zero", "parameter_server")
        for key, value in keys
        if not _reads(strategy, key)
        and not (key == "training.recompute" and strategy != "parameter_server")
    ]


@pytest.mark.parametrize(("strategy", "key", "value"), _former_default_cases())
def test_a_former_default_of_an_auto_key_is_not_refused(
    strategy: str, key: str, value: Any, tmp_path: Path, capsys
) -> None:
    """Keys whose default became ``auto`` (issue 41): a scenario written before, with the
    old default spelled out, still validates under a strategy that has nothing to choose
    there; any other value of a key it does not read is still refused (above)."""
    document = _with(BASE | STRATEGY_SECTIONS[strategy], key, value)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
