"""YAML scenario -> validated, typed :class:`Scenario`, with clear errors.

The models of this package are the scenario format.  Every value is SI inside (seconds,
bytes, bytes per second, FLOP/s); the YAML writes units (``100Gb/s``) and
:mod:`clustersim.units` reads them.  YAML key names are the field aliases.

Every problem in a document is reported at once, each as a
:class:`~clustersim.errors.Problem` whose path uses the YAML key names
(``cluster.node.nic.bandwidth``, ``stragglers[1].slowdown``) and whose message
is plain English.  :func:`validate_model` does that for any pydantic model, so
workload plugins validate their own section the same way.

The package, one module per concept; each imports only the modules listed above it:

* :mod:`.fields` -- field types (quantities with units, strict numbers), the base
  model, tagged unions;
* :mod:`.devices` -- compute devices (``DeviceSpec``), hardware presets, peaks by
  precision and pricing at the training precision;
* :mod:`.cluster` -- the ``cluster:`` section (links, nodes, shapes);
* :mod:`.stragglers` -- the ``stragglers:`` section;
* :mod:`.failures` -- the ``failures:`` and ``recovery:`` sections;
* :mod:`.checkpoint` -- the ``checkpoint:`` section;
* :mod:`.training` -- the training sections (``model``, ``training``,
  ``data_parallel``, ``parallelism``, ``zero``, ``pipeline``) and ``network``;
* :mod:`.validation` -- :func:`validate_model` and the wording of its problems;
* :mod:`.document` -- :class:`Scenario` and :func:`parse_scenario`;
* :mod:`.loader` -- :func:`load_scenario`: the file, its YAML, its limits;
* :mod:`.schema` -- :func:`scenario_json_schema`;
* :mod:`.presets` -- presets written out in a document (``scenario.resolved.yaml``) and the
  folder a scenario's relative files are read from;
* :mod:`.shorthand` -- cluster sections from a few parameters (``flat_cluster``,
  ``two_tier_cluster``), a minimal scenario around one, a file holding either
  (imported as ``clustersim.scenario.shorthand``; nothing of it is re-exported here).

This module only re-exports: every public name of the former ``scenario.py``
(with :class:`~clustersim.errors.ScenarioError` and the two YAML helpers the
compare sweep uses) stays importable from ``clustersim.scenario``;
``__all__`` is unchanged.
"""

from clustersim.errors import ScenarioError  # noqa: F401

from .checkpoint import CheckpointInterval, CheckpointSpec, StorageSpec  # noqa: F401
from .cluster import (  # noqa: F401
    CLUSTER_KINDS,
    MAX_DEVICES,
    MAX_LINKS,
    ClusterSpec,
    CustomCluster,
    CustomDevice,
    CustomLink,
    FlatCluster,
    RailOptimizedCluster,
    ThreeTierCluster,
    TwoTierCluster,
)
from .devices import (  # noqa: F401
    CPU_DEFAULTS,
    PRECISIONS,
    ComputeSpec,
    CurveSpec,
    DeviceSpec,
    Precision,
)
from .document import (  # noqa: F401
    EngineSpec,
    Scenario,
    is_candidates_document,
    parse_scenario,
    with_seed,
)
from .experts import MoESpec  # noqa: F401
from .failures import (  # noqa: F401
    FailureSpec,
    RandomFailure,
    RecoverySpec,
    ScheduledDeviceFailure,
    ScheduledLinkFailure,
)
from .fields import (  # noqa: F401
    MAX_SEED,
    TAG_ERROR,
    Bandwidth,
    Bool,
    Count,
    Float,
    FlopCount,
    FlopRate,
    Glob,
    GpuIndex,
    Int,
    Invalid,
    PositiveSize,
    Seed,
    Size,
    TimeSpan,
)
from .loader import (  # noqa: F401
    MAX_FILE_BYTES,
    MAX_LIST_ITEMS,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    _load_yaml,
    _read_text,
    is_candidates_file,
    load_scenario,
)
from .model import (  # noqa: F401
    MAX_LAYERS,
    MAX_ZIPF_EXPONENT,
    EmbeddingSpec,
    LayerSpec,
    ModelSpec,
    TransformerSpec,
    ZipfKeys,
)
from .network import (  # noqa: F401
    MAX_CHANNELS,
    PROTOCOL_NAMES,
    Channels,
    NetworkSpec,
    Protocol,
)
from .node import LinkSpec, NicSpec, NodeSpec, NvlinkSpec, TcpSpec, UplinkSpec  # noqa: F401
from .schema import (  # noqa: F401
    JSON_SCHEMA_DIALECT,
    scenario_json_schema,
)
from .stragglers import (  # noqa: F401
    SLOWDOWN_DISTS,
    STRAGGLER_FORMS,
    ExponentialSlowdown,
    FixedStraggler,
    LinkStraggler,
    LognormalSlowdown,
    RandomStraggler,
    RandomStragglerSpec,
    SlowdownDist,
    StragglerSpec,
    UniformSlowdown,
)
from .training import (  # noqa: F401
    MAX_PS_KEYS,
    AllreduceSyncSpec,
    DataParallelSpec,
    OffloadSpec,
    ParallelAxis,
    ParallelismSpec,
    ParameterServerSpec,
    PipelineSpec,
    TrainingSpec,
    ZeroSpec,
)
from .validation import (  # noqa: F401
    validate_model,
)

__all__ = [
    "CLUSTER_KINDS",
    "Bandwidth",
    "FlopCount",
    "FlopRate",
    "Size",
    "TimeSpan",
    "MAX_DEVICES",
    "MAX_FILE_BYTES",
    "MAX_LINKS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ClusterSpec",
    "CustomCluster",
    "CustomDevice",
    "CustomLink",
    "DeviceSpec",
    "ExponentialSlowdown",
    "FixedStraggler",
    "FlatCluster",
    "Invalid",
    "LinkSpec",
    "NicSpec",
    "TcpSpec",
    "LinkStraggler",
    "LognormalSlowdown",
    "NodeSpec",
    "NvlinkSpec",
    "RandomStraggler",
    "RandomStragglerSpec",
    "Scenario",
    "StragglerSpec",
    "TwoTierCluster",
    "UniformSlowdown",
    "UplinkSpec",
    "load_scenario",
    "parse_scenario",
    "with_seed",
    "scenario_json_schema",
    "validate_model",
]
