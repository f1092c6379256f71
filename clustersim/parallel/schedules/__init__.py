"""Pipeline schedules: one file per schedule, each class registering itself.

:mod:`.base` holds the :class:`Schedule` base (its registry, the checks of
``(p, m, v)``, the theoretical bubble, where each chunk sits: ``virtual_stage`` /
``device_of``), :func:`make_schedule`, :func:`ideal_timeline` and the op dependencies.
The built-in schedules:

* :mod:`.naive`, :mod:`.gpipe`, :mod:`.one_f_one_b` (PipeDream-Flush), :mod:`.interleaved`
  (Megatron-LM's ``v`` chunks per device): forward ``fwd`` and backward ``bwd`` ops,
  a flush each iteration;
* :mod:`.zb_h1` and :mod:`.zb_v` (Qi et al. 2024): the backward split into B
  (``bwd_input``, the input gradient sent to the previous stage) and W (``bwd_weight``,
  the weight gradient, needing only the same stage's B) so that W fills the bubbles;
  ZB-V places its two chunks per device in a V (device ``s``: virtual stages ``s`` and
  ``2p - 1 - s``);
* :mod:`.pipedream` and :mod:`.pipedream_2bw` (Narayanan et al. 2019, 2021): 1F1B
  without a flush, the pipeline running on across iterations, with weight stashing
  (``p - s`` versions on stage ``s``) or double-buffered weights (2 versions).

A new schedule is one new file in this folder with a ``Schedule`` subclass defining
``name``, and nothing else: the registry imports every module of the folder
(:func:`schedule_modules`), and a scenario's ``pipeline.schedule`` accepts every
registered name.
"""

from .base import (
    BACKWARD,
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    BUILTIN_SCHEDULES,
    FORWARD,
    Op,
    Schedule,
    dependency,
    ideal_timeline,
    make_schedule,
    played_timeline,
    registered_schedules,
    schedule_modules,
)

registered_schedules()  # register the built-ins in BUILTIN_SCHEDULES order

from .gpipe import GPipeSchedule  # noqa: E402
from .interleaved import InterleavedSchedule  # noqa: E402
from .naive import NaiveSchedule  # noqa: E402
from .one_f_one_b import OneFOneBSchedule  # noqa: E402

__all__ = [
    "BACKWARD",
    "BACKWARD_INPUT",
    "BACKWARD_WEIGHT",
    "BUILTIN_SCHEDULES",
    "FORWARD",
    "GPipeSchedule",
    "InterleavedSchedule",
    "NaiveSchedule",
    "OneFOneBSchedule",
    "Op",
    "Schedule",
    "dependency",
    "ideal_timeline",
    "played_timeline",
    "make_schedule",
    "registered_schedules",
    "schedule_modules",
]
