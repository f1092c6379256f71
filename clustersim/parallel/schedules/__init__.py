"""Pipeline schedules: one file per schedule, each class registering itself.

:mod:`.base` holds the :class:`Schedule` base (its registry, the checks of
``(p, m, v)``, the theoretical bubble), :func:`make_schedule` and
:func:`ideal_timeline`; :mod:`.naive`, :mod:`.gpipe`, :mod:`.one_f_one_b` and
:mod:`.interleaved` the built-in schedules.  A new schedule is one new file in this
folder with a ``Schedule`` subclass defining ``name``, and nothing else: the registry
imports every module of the folder (:func:`schedule_modules`), and a scenario's
``pipeline.schedule`` accepts every registered name.
"""

from .base import (
    BACKWARD,
    BUILTIN_SCHEDULES,
    FORWARD,
    Op,
    Schedule,
    ideal_timeline,
    make_schedule,
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
    "BUILTIN_SCHEDULES",
    "FORWARD",
    "GPipeSchedule",
    "InterleavedSchedule",
    "NaiveSchedule",
    "OneFOneBSchedule",
    "Op",
    "Schedule",
    "ideal_timeline",
    "make_schedule",
    "registered_schedules",
    "schedule_modules",
]
