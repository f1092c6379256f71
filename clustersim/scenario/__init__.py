"""The scenario format (being split into modules; see :mod:`clustersim.scenario.cluster`)."""

from .cluster import *  # noqa: F403
from .cluster import (  # noqa: F401
    MAX_CHANNELS,
    Bool,
    Count,
    DataParallelSpec,
    Glob,
    Int,
    LayerSpec,
    ModelSpec,
    ParallelismSpec,
    ParameterServerSpec,
    PipelineSpec,
    ScenarioError,
    TransformerSpec,
    __all__,  # noqa: F401
    _load_yaml,
    _read_text,
)
