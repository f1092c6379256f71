"""Mixture-of-experts models: a scenario's ``model.moe``.

:func:`with_moe` gives a transformer (preset or ``model.transformer``) the experts a
``model.moe`` section describes; on a preset that has experts already the keys given
replace the preset's (the MoE presets are in :mod:`clustersim.model.moe_presets`).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import Problem, ScenarioError, join_path
from ..scenario import MoESpec
from .layers import Model
from .moe import MoE, moe_blocks
from .transformer import Transformer

__all__ = ["moe_from_spec", "with_moe"]

DEFAULT_TOP_K = 2
"""Experts per token when neither ``model.moe.top_k`` nor the preset says (GShard, Mixtral)."""


def with_moe(model: Model, spec: MoESpec, path: str = "model.moe") -> Model:
    """``model`` with the experts of ``spec`` (its transformer shape rebuilt)."""
    shape = model.transformer
    if shape is None:
        raise ScenarioError(
            Problem(
                path,
                "experts replace the MLPs of a transformer; this model is a list of layers",
                "a transformer preset (e.g. gpt3-1.3b) or model.transformer",
            )
        )
    moe = moe_from_spec(spec, shape, path)
    return replace(shape, moe=moe).build(model.name)


def moe_from_spec(spec: MoESpec, shape: Transformer, path: str = "model.moe") -> MoE:
    """The experts ``spec`` describes for ``shape`` (its own experts as defaults)."""
    base = shape.moe
    experts = _pick(spec.experts, base and base.experts, None)
    if experts is None:
        raise ScenarioError(
            Problem(join_path(path, "experts"), "is required", "the number of routed experts")
        )
    top_k = _pick(spec.top_k, base and base.top_k, DEFAULT_TOP_K)
    if top_k > experts:
        raise ScenarioError(
            Problem(
                join_path(path, "top_k"),
                f"{top_k} experts per token, but the layer has {experts}",
                f"1 to {experts}",
            )
        )
    skew = _skew(spec, base, experts, path)
    return MoE(
        experts=experts,
        top_k=top_k,
        blocks=_blocks(spec, base, shape.layers, path),
        expert_ffn=_pick(spec.expert_ffn, base and base.expert_ffn, shape.ffn),
        shared_experts=_pick(spec.shared_experts, base and base.shared_experts, 0),
        capacity_factor=_pick(spec.capacity_factor, base and base.capacity_factor, 1.0),
        skew=skew,
    )


def _pick(given: object, preset: object, default: object) -> object:
    """The key given, else the preset's value, else the default."""
    if given is not None:
        return given
    return preset if preset is not None else default


def _blocks(spec: MoESpec, base: MoE | None, layers: int, path: str) -> tuple[int, ...]:
    rule = spec.expert_layers
    if rule is None:
        return base.blocks if base is not None else moe_blocks(layers)
    key = join_path(path, "expert_layers")
    if rule == "all":
        return moe_blocks(layers)
    if isinstance(rule, list):
        late = [i for i in rule if i >= layers]
        if late or not rule:
            what = f"block {late[0]} does not exist" if late else "lists no block"
            raise ScenarioError(Problem(key, what, f"indices 0 to {layers - 1}"))
        return moe_blocks(layers, listed=rule)
    if rule.first_dense >= layers:
        raise ScenarioError(
            Problem(
                join_path(key, "first_dense"),
                f"{rule.first_dense} dense blocks leave none of the {layers} for experts",
                f"0 to {layers - 1}",
            )
        )
    return moe_blocks(layers, every=rule.every, first_dense=rule.first_dense)


def _skew(spec: MoESpec, base: MoE | None, experts: int, path: str) -> tuple[str, float] | None:
    if spec.skew is None:
        return base.skew if base is not None else None
    if hasattr(spec.skew, "zipf"):
        return ("zipf", spec.skew.zipf)
    ratio = spec.skew.max_load
    if ratio > experts:
        raise ScenarioError(
            Problem(
                join_path(path, "skew.max_load"),
                f"{ratio:g} x the mean load is more than all the tokens of {experts} experts",
                f"1 to {experts}",
            )
        )
    return ("max_load", ratio)
