"""Pipeline schedules: one file per schedule, each class registering itself.

:mod:`.base` holds the :class:`Schedule` base (its registry, the checks of
``(p, m, v)``, the theoretical bubble), :func:`make_schedule` and
:func:`ideal_timeline`; :mod:`.naive`, :mod:`.gpipe`, :mod:`.one_f_one_b` and
:mod:`.interleaved` the built-in schedules.  A new schedule is a new file with a
``Schedule`` subclass defining ``name``, listed in ``BUILTIN_SCHEDULES``.
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
]
