"""Mixture of experts: the shape of an MoE feed-forward layer, its load across experts.

An MoE block replaces the dense feed-forward network of a transformer block by
``E`` experts (each a feed-forward network of width ``f_e``, gated like the
model's FFN), a router (a linear map h -> E, ``h E`` parameters) and optional
shared experts that every token passes through (DeepSeekMoE, Dai et al. 2024).
Each token goes to its ``k`` highest-scoring experts (``top_k``).  Which blocks
are MoE is ``expert_layers``: every block, every n-th, a list, or all but the
first few (DeepSeek's dense first layers).

Per token (``m`` weight matrices per expert: 3 gated, else 2):

* **parameters** of an MoE layer: norm + ``h E`` (router) + ``(E + shared) m h f_e``
  (every expert counts);
* **forward FLOPs**: ``2 h E`` (router) + ``(k + shared) 2 m h f_e`` -- the
  *active* experts only (model FLOPs, no padding);
* **activation bytes**: the router's input and the experts' input (2 h each) and
  ``c k + shared`` times one expert MLP's stored tensors (gated: gate, up and
  product outputs, 3 x 2 f_e bytes), where ``c`` is the capacity factor: each
  expert's buffer is padded to ``c x tokens x k / E`` tokens (Fedus et al. 2021).

**Load across experts** (``skew``).  Expert ``e`` receives the share ``p_e`` of a
layer's ``tokens x k`` assignments: ``1/E`` each without skew; with
``{zipf: a}`` ``p_e`` goes as ``1/(e+1)^a`` (expert 0 the hottest); with
``{max_load: r}`` the hottest expert gets ``r / E`` and the others share the
rest equally.  Under expert parallelism over ``ep`` GPUs GPU ``g`` holds experts
``g E/ep .. (g+1) E/ep - 1`` (Megatron-Core's contiguous placement, so Zipf's
hottest experts share GPU 0: the worst case), and every expert's buffer is at
least its capacity (padding) and holds all its tokens (dropless routing, Megatron-Core's
default: none are dropped).  GPU ``g``'s *load factor* is

    L_g = ep x sum over its experts of max(c / E, p_e)

(1 without skew and padding): its expert work and the bytes it receives in the
dispatch all-to-all are ``L_g`` times the mean.  The busiest GPU sets the pace.
Units: parameters, FLOPs and bytes per sequence (as :mod:`clustersim.model.transformer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["MoE", "expert_shares", "load_factors", "moe_blocks"]


@dataclass(frozen=True)
class MoE:
    """The experts of a transformer's MoE blocks (see the module docstring)."""

    experts: int
    """Routed experts per MoE layer (E)."""
    top_k: int
    """Experts each token is routed to (k)."""
    blocks: tuple[int, ...]
    """Indices of the MoE blocks (0-based); the others keep the dense FFN."""
    expert_ffn: int
    """Width of one expert's feed-forward network (f_e)."""
    shared_experts: int = 0
    """Experts every token passes through (each of width ``expert_ffn``)."""
    capacity_factor: float = 1.0
    """Each expert's buffer holds capacity_factor x its mean load (padding)."""
    skew: tuple[str, float] | None = None
    """``("zipf", a)``, ``("max_load", r)`` or None (uniform routing)."""
    _block_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} is more than the {self.experts} experts")
        object.__setattr__(self, "_block_set", frozenset(self.blocks))

    def is_moe(self, block: int) -> bool:
        """Whether block ``block`` (0-based) is an MoE block."""
        return block in self._block_set

    @property
    def active_experts(self) -> int:
        """Experts one token passes through: top_k routed + shared."""
        return self.top_k + self.shared_experts

    def shares(self) -> list[float]:
        """p_e: the share of the assignments each expert receives (sums to 1)."""
        return expert_shares(self.experts, self.skew)

    def load_factors(self, ep: int) -> list[float]:
        """L_g of each of the ``ep`` GPUs (module docstring)."""
        return load_factors(self.shares(), ep, self.capacity_factor)

    def busiest_load(self, ep: int) -> float:
        """The largest L_g: the busiest GPU's expert work over the mean (>= capacity factor)."""
        return max(self.load_factors(ep))


def expert_shares(experts: int, skew: tuple[str, float] | None) -> list[float]:
    """Share of the token assignments per expert, hottest first (uniform without skew)."""
    if skew is None:
        return [1.0 / experts] * experts
    kind, value = skew
    if kind == "zipf":
        weights = [1.0 / (e + 1) ** value for e in range(experts)]
        total = sum(weights)
        return [w / total for w in weights]
    if experts == 1:
        return [1.0]
    hottest = value / experts
    rest = (1.0 - hottest) / (experts - 1)
    return [hottest] + [rest] * (experts - 1)


def load_factors(shares: Sequence[float], ep: int, capacity_factor: float) -> list[float]:
    """L_g = ep x sum of max(c / E, p_e) over GPU g's E/ep contiguous experts."""
    experts = len(shares)
    per_gpu = experts // ep
    floor = capacity_factor / experts
    return [
        ep * sum(max(floor, p) for p in shares[g * per_gpu : (g + 1) * per_gpu]) for g in range(ep)
    ]


def moe_blocks(
    layers: int,
    *,
    every: int = 1,
    first_dense: int = 0,
    listed: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Indices of the MoE blocks: ``listed``, or every ``every``-th block after the first
    ``first_dense`` dense ones (Megatron's ``--moe-layer-freq``: block i is MoE when
    ``(i - first_dense) % every == 0``)."""
    if listed is not None:
        return tuple(sorted(set(listed)))
    return tuple(i for i in range(first_dense, layers) if (i - first_dense) % every == 0)
