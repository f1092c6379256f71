"""The ``model.moe`` section: a mixture of experts on a transformer
(:mod:`clustersim.model.moe` has the model, :mod:`clustersim.model.moe_models` builds it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Strict, Tag

from .fields import Count, Float, _Spec

MAX_SKEW_EXPONENT = 16.0
"""Largest Zipf exponent of the routing skew (as ``ZipfKeys``): beyond it the coldest experts
underflow to nothing."""

MAX_EXPERTS = 65_536
"""Most routed experts an MoE layer may have."""


class ExpertLayersSpec(_Spec):
    """Which blocks are MoE by a rule: every ``every``-th block after the first ``first_dense``
    dense ones (Megatron-LM's ``--moe-layer-freq``; DeepSeek's ``first_k_dense_replace``)."""

    every: Count = 1
    """One MoE block every this many blocks (1: each)."""
    first_dense: Annotated[int, Strict(), Field(ge=0)] = 0
    """Leading blocks that keep their dense MLP."""


class ZipfSkew(_Spec):
    """Expert e (0 the hottest) receives a share of the tokens proportional to 1 / (e+1)^s."""

    zipf: Float = Field(ge=0, le=MAX_SKEW_EXPONENT)
    """The exponent s (0 is uniform)."""


class MaxLoadSkew(_Spec):
    """The hottest expert receives ``max_load`` x the mean load; the others share the rest."""

    max_load: Float = Field(ge=1)
    """Busiest expert's load over the mean (1 is uniform; at most the number of experts)."""


def _skew_form(data: Any) -> str:
    if isinstance(data, dict):
        return "max_load" if "max_load" in data else "zipf"
    return "max_load" if isinstance(data, MaxLoadSkew) else "zipf"


ExpertSkew = Annotated[
    Annotated[ZipfSkew, Tag("zipf")] | Annotated[MaxLoadSkew, Tag("max_load")],
    Discriminator(_skew_form),
]
"""``{zipf: s}`` or ``{max_load: r}``: how unevenly the router spreads tokens over experts."""


def _layers_form(data: Any) -> str:
    if isinstance(data, str):
        return "named"
    return "listed" if isinstance(data, list) else "rule"


ExpertLayers = Annotated[
    Annotated[Literal["all"], Tag("named")]
    | Annotated[list[Annotated[int, Strict(), Field(ge=0)]], Tag("listed")]
    | Annotated[ExpertLayersSpec, Tag("rule")],
    Discriminator(_layers_form),
]
"""``all``, a list of block indices (0-based), or ``{every: n, first_dense: k}``."""


class MoESpec(_Spec):
    """Mixture of experts (:mod:`clustersim.model.moe`): the MLP of the chosen blocks becomes
    ``experts`` expert MLPs, each token routed to ``top_k`` of them.  On a preset that has
    experts already, the keys given replace the preset's."""

    experts: Annotated[int, Strict(), Field(ge=1, le=MAX_EXPERTS)] | None = None
    """Routed experts per MoE layer (E); required unless the preset has experts."""
    top_k: Count | None = None
    """Experts each token is routed to (default 2, or the preset's)."""
    capacity_factor: Float | None = Field(None, ge=1, le=64)
    """Each expert's buffer is padded to capacity_factor x its mean load (default 1)."""
    expert_layers: ExpertLayers | None = None
    """Which blocks are MoE: ``all`` (default), a list of indices or ``{every, first_dense}``."""
    expert_ffn: Count | None = None
    """Width of one expert's feed-forward network (default: the model's ffn; fine-grained
    experts are narrower)."""
    shared_experts: Annotated[int, Strict(), Field(ge=0, le=MAX_EXPERTS)] | None = None
    """Experts every token passes through, each of width ``expert_ffn`` (DeepSeekMoE; default 0)."""
    skew: ExpertSkew | None = None
    """Uneven routing: ``{zipf: s}`` or ``{max_load: r}`` (default: uniform)."""
