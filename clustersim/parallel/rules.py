"""The validity rules of a parallel configuration, in one place.

Each rule returns the :class:`~clustersim.errors.Problem` that forbids a
configuration (with the scenario key path and what is allowed), or None.  The
hybrid strategy raises the problem; ``clustersim plan`` uses the same rules to
leave forbidden configurations out of its search.

* :func:`tensor_parallel_problem` -- tensor parallelism splits a transformer's
  attention heads, so ``tp`` must divide them (Megatron-LM);
* :func:`sharded_zero_problem` -- ZeRO stages that shard gradients (2) or also
  parameters (3) run on data parallelism alone (tp = pp = 1), as in DeepSpeed.

Still checked where they were: the schedules' own ``(p, m, v)`` rules
(:meth:`~clustersim.parallel.schedules.Schedule.problems`), placement's
divisibility and node rules (:mod:`clustersim.parallel.placement`), and plan's
search restrictions (powers of two, whole blocks per stage).
"""

from __future__ import annotations

from ..errors import Problem

SHARDED_STAGE = 2
"""The first ZeRO stage that shards gradients (and, at 3, parameters)."""


def tensor_parallel_problem(tp: int, heads: int | None) -> Problem | None:
    """Why ``tp`` cannot split a model with ``heads`` attention heads (None: not a
    transformer), or None if it can."""
    if tp == 1:
        return None
    if heads is None:
        return Problem(
            "parallelism.tp",
            "tensor parallelism splits transformer layers; this model is a list of layers",
            "tp: 1, or a transformer model (a preset such as gpt3-1.3b, or model.transformer)",
        )
    if heads % tp:
        return Problem(
            "parallelism.tp",
            f"tp {tp} does not divide the model's {heads} attention heads",
            f"a divisor of {heads}",
        )
    return None


def sharded_zero_problem(stage: int, tp: int, pp: int, pipeline_section: bool) -> Problem | None:
    """Why ZeRO ``stage`` cannot run with ``tp`` x ``pp`` (and a ``pipeline`` section), or None."""
    if stage < SHARDED_STAGE or (tp == pp == 1 and not pipeline_section):
        return None
    if pp > 1:
        return Problem(
            "zero.stage",
            f"ZeRO stage {stage} shards gradients"
            f"{' and parameters' if stage == 3 else ''}, which pipeline parallelism "
            "accumulates over micro-batches on each stage (DeepSpeed does not combine "
            "them either)",
            "0 or 1 with pp > 1",
        )
    return Problem(
        "zero.stage",
        f"ZeRO stage {stage} is simulated for data parallelism alone "
        "(tp 1, pp 1, no pipeline section)",
        "0 or 1 with tensor or pipeline parallelism; 2, 3 or fsdp with tp 1 and pp 1",
    )
