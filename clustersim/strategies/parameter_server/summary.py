"""The parameter-server part of summary.json (:class:`ParameterServerSummary`, registered under
the workload ``parameter_server``; :mod:`.report` builds it) and the blocks it holds: the
servers' settings and load, the placement of keys, chain replication."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...metrics import (
    OPTIONAL,
    OPTIONAL_SPLICE,
    SPLICE,
    DeviceShares,
    ModelInfo,
    SummaryPart,
    TrainingSummary,
)


@dataclass(frozen=True)
class ServerSettings(SummaryPart):
    """The ``parameter_server`` block: the mode and the setting that mode takes."""

    mode: str
    placement: str
    backup_k: int | None = field(default=None, metadata=OPTIONAL)
    staleness: int | None = field(default=None, metadata=OPTIONAL)
    geo_period: int | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class ServerLoad(SummaryPart):
    params: float
    bytes: float


@dataclass(frozen=True)
class KeyPlacement(SummaryPart):
    """One parameter key: its size and the server that holds it."""

    name: str
    params: float
    bytes: float
    server: str


@dataclass(frozen=True)
class ReplicationSummary(SummaryPart):
    """Chain replication and failover of a parameter-server run (``replicas`` above 1;
    :mod:`.replication`)."""

    replicas: int
    replication_bytes: float
    """Bytes of the updates forwarded along the chains (every hop that arrived)."""
    failovers: int
    """Server failures played during training."""
    failover_lost_s: float
    """Sum over failovers of the time from the failure until every request the failed
    master owed was answered by the new one."""


@dataclass(frozen=True)
class ParameterServerSummary(TrainingSummary):
    """Data-parallel training with parameter servers (sync, backup, async, ssp, geo)."""

    name = "parameter_server"
    description = "training keys, updates_per_s, staleness, servers, keys, pushes"

    updates_per_s: float
    iterations_per_worker: dict[str, int]
    staleness_histogram: dict[str, int]
    model: ModelInfo
    parameter_server: ServerSettings
    workers: list[str]
    servers: dict[str, ServerLoad]
    keys: list[KeyPlacement]
    global_batch: float
    pushes_per_worker: dict[str, float]
    key_pushes: int
    key_pushes_dropped: int
    busiest_server: str
    """The server that moved the most bytes (pushed to it and pulled from it)."""
    busiest_server_share: float
    """Its share of the bytes all servers moved (0 when none crossed the network)."""
    shares: DeviceShares = field(metadata=SPLICE)
    cancelled_compute_s: float | None = field(default=None, metadata=OPTIONAL)
    cancelled_push_bytes: float | None = field(default=None, metadata=OPTIONAL)
    embedding_rows_touched_per_worker: float | None = field(default=None, metadata=OPTIONAL)
    """``model.embedding``: expected unique rows (every table) a worker's batch touches."""
    embedding_push_bytes_per_worker: float | None = field(default=None, metadata=OPTIONAL)
    """``model.embedding``: bytes of those rows' gradients a worker pushes per iteration."""
    embedding_rows_updated: float | None = field(default=None, metadata=OPTIONAL)
    """``model.embedding``: expected unique rows one server update of the table changes."""
    replication: ReplicationSummary | None = field(default=None, metadata=OPTIONAL_SPLICE)

    def replicas(self) -> list[list[str]]:
        """Each worker holds a whole replica (the servers belong to none)."""
        return [[w] for w in self.workers or []]
