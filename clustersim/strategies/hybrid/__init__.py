"""The 3D hybrid strategy (``pipeline``): pipeline x tensor x data parallelism, ZeRO-1.

* :mod:`.stages` -- what each stage holds and costs;
* :mod:`.layout` -- the configuration, checked (:class:`HybridLayout`);
* :mod:`.strategy` -- running it (:class:`Pipeline`);
* :mod:`.report` -- its summary built: FLOPs, bubbles, memory, traffic (:class:`HybridReport`);
* :mod:`.summary` -- its part of summary.json (:class:`HybridSummary`) and the blocks it holds;
* :mod:`.accounting` -- activation memory, bubbles per iteration, link sharing;
* :mod:`.split_backward` -- the zero-bubble schedules' B and W: FLOPs and memory;
* :mod:`.flush_free` -- PipeDream and PipeDream-2BW running on across iterations.
"""

from .accounting import bubble_by_iteration
from .stages import StagePlan, peak_stored, plan_stages
from .strategy import Pipeline

__all__ = ["Pipeline", "StagePlan", "bubble_by_iteration", "peak_stored", "plan_stages"]
