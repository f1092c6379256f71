"""Sparse embeddings on parameter servers: a recommendation model's table, sharded by rows,
pushed and pulled only where a batch touches it.  See
:mod:`clustersim.strategies.parameter_server.strategy` and :mod:`clustersim.model.embedding`.

```yaml
model:
  layers: [{name: mlp, params: 2e6, flops: 4e6}]
  embedding: {rows: 10000000, dim: 64, lookups_per_sample: 26, distribution: {zipf: 1.05}}
data_parallel: {sync: ps, ps: {servers: 4, placement: dedicated, sharding: range}}
```

**Keys.**  The table (every one of ``tables``) is cut by rows into one key per server,
``embedding[j]`` on server ``j``: ``hash`` and ``balanced`` sharding spread the rows (row
``r`` to server ``r mod S``, as a PS hashing row ids does: every shard gets hot and cold
rows alike), ``range`` gives server ``j`` the contiguous rows ``floor(j rows / S)`` ..
``floor((j+1) rows / S) - 1`` -- under Zipf, server 0 holds the hot rows.  The dense
layers keep their layer keys, made and sharded as for the model without the table.

**Traffic.**  A worker with ``b`` samples does ``L = b x lookups_per_sample`` lookups per
table and iteration; its push of ``embedding[j]`` carries the gradient rows of shard
``j`` it touched, ``E[unique rows of shard j in L lookups] x tables x dim`` values, and its
pull brings back as many (:attr:`Key.access` = that / the shard's rows).  The server
aggregates each push (its bytes), and its update changes the union of the rows of the
pushes it applies (:attr:`Key.update_access`): sync, ``n x L`` lookups (every worker);
backup, ``k x L``; async and ssp, ``L`` (each push is applied alone).  Expected values:
every key is still pushed and pulled each iteration, and runs stay deterministic.

**Refused** (an error naming the key): ``mode: geo`` (its local steps would update the
whole table on every worker and push it as a delta), ``hierarchy`` (a node's sum of its
workers' rows is their union, which its hops do not model), synthetic
``key_distribution`` (the table brings its own keys), and a ``global_batch`` the workers do
not split evenly (every worker's push must carry the same expected rows).

Workers do not hold the table (the PS strategy has no memory plan; a PS-trained
recommender keeps its tables on the servers and workers cache the rows they touch).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import Problem, ScenarioError
from ...model.embedding import EmbeddingTable, shard_sizes, unique_rows_by_shard
from ...model.layers import Model
from .. import training
from .layout import PS_KEY, Block, make_blocks

if TYPE_CHECKING:
    from .strategy import ParameterServer


def layout_blocks(ps: ParameterServer) -> list[Block]:
    """The keys of ``ps``'s model: the embedding shards, then the dense layer keys."""
    model, servers = ps.model, len(ps.servers)
    table: EmbeddingTable | None = model.embedding
    if table is None:
        return make_blocks(ps.ps, model, servers)
    _check(ps)
    dense = Model(model.name, model.layers[1:], model.transformer)
    blocks = [replace(b, layer=b.layer + 1) for b in make_blocks(ps.ps, dense, servers)]
    return embedding_blocks(ps, table) + blocks


def _row_sharding(ps: ParameterServer) -> str:
    return "range" if ps.ps.sharding == "range" else "spread"


def _lookups(ps: ParameterServer, table: EmbeddingTable) -> tuple[float, float]:
    """Lookups per table behind one push (a worker's) and behind one update."""
    push = ps.samples[0] * table.lookups
    pushes = ps.k if ps.ps.mode in ("sync", "backup") else 1
    return push, pushes * push


def _per_shard(ps: ParameterServer, table: EmbeddingTable, lookups: float) -> tuple[float, ...]:
    """Expected unique rows of each server's shard (one table) that ``lookups`` touch."""
    return unique_rows_by_shard(table.rows, table.zipf, lookups, len(ps.servers), _row_sharding(ps))


def embedding_blocks(ps: ParameterServer, table: EmbeddingTable) -> list[Block]:
    """One key ``embedding[j]`` per server ``j`` that holds rows (see the module docstring)."""
    name = ps.model.layers[0].name
    push, update = _lookups(ps, table)
    pushed, updated = _per_shard(ps, table, push), _per_shard(ps, table, update)
    sizes = shard_sizes(table.rows, len(ps.servers), _row_sharding(ps))
    return [
        Block(
            f"{name}[{j}]",
            0,
            float(table.tables * size * table.dim),
            pushed[j] / size,
            updated[j] / size,
            server=j,
        )
        for j, size in enumerate(sizes)
        if size > 0
    ]


def _check(ps: ParameterServer) -> None:
    spec, n = ps.ps, len(ps.workers)
    refusals = [
        (
            spec.mode == "geo",
            f"{PS_KEY}.mode",
            "mode geo cannot train model.embedding: its local steps would update the whole "
            "table on every worker and push it as a delta",
            "sync, backup, async or ssp",
        ),
        (
            spec.hierarchy not in (None, ["server"]),
            f"{PS_KEY}.hierarchy",
            "a hierarchy cannot carry model.embedding: a node's sum of its workers' rows is "
            "their union, which its hops do not model",
            "[server] or leave hierarchy out",
        ),
        (
            spec.key_distribution != "layers",
            f"{PS_KEY}.key_distribution",
            "synthetic keys cannot go with model.embedding: the table brings its own keys",
            "layers (the default)",
        ),
        (
            ps.train.global_batch % n != 0,
            "training.global_batch",
            f"with model.embedding the global batch {ps.train.global_batch} must split "
            f"evenly over the {n} workers (every push carries the same expected rows)",
            f"a multiple of {n}",
        ),
    ]
    for refused, path, what, allowed in refusals:
        if refused:
            raise ScenarioError(Problem(path, what, allowed))


def embedding_fields(ps: ParameterServer) -> dict[str, Any]:
    """The summary's embedding keys (none without a table): per worker and iteration, the
    expected unique rows touched (every table) and the bytes of their gradients pushed
    (pulls bring back as many); the rows one update of the table changes."""
    table: EmbeddingTable | None = ps.model.embedding
    if table is None:
        return {}
    push, update = _lookups(ps, table)
    rows = table.tables * sum(_per_shard(ps, table, push))
    per_value = training.BYTES_PER_VALUE[ps.train.precision]
    return {
        "embedding_rows_touched_per_worker": rows,
        "embedding_push_bytes_per_worker": rows * table.dim * per_value,
        "embedding_rows_updated": table.tables * sum(_per_shard(ps, table, update)),
    }
