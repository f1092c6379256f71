"""Data-parallel training with parameter servers (``parameter_server``): sync, backup, async,
ssp and geo (the model: :mod:`.strategy`).

* :mod:`.strategy` -- running it (:class:`ParameterServer`): the workers' iterations;
* :mod:`.server` -- the servers' side: pushes, rounds, updates, pulls;
* :mod:`.layout` -- keys, their distribution and sharding, and which devices work and serve;
* :mod:`.pipeline` -- partitions and ordered worker-server connections (BytePS);
* :mod:`.backup` -- backup workers: cancelling the workers a round leaves out;
* :mod:`.hierarchy` -- multi-level aggregation inside nodes (reduce-scatter, shards up);
* :mod:`.embedding` -- a sparse embedding table's row shards;
* :mod:`.replication` -- chain replication and a failed server's failover;
* :mod:`.report` -- its summary built: training times (rounds, or each worker's periods);
* :mod:`.summary` -- its part of summary.json (:class:`ParameterServerSummary`) and blocks;
* :mod:`.work` -- the work a run will do, estimated before it runs.
"""

from .layout import Key, assign_keys, key_blocks
from .strategy import ParameterServer
from .summary import ParameterServerSummary

__all__ = ["Key", "ParameterServer", "ParameterServerSummary", "assign_keys", "key_blocks"]
