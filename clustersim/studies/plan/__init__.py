"""``clustersim plan``: search dp x tp x pp x micro-batch x ZeRO x chunks configurations.

* :mod:`.options` -- what to search and how to simulate (the flags);
* :mod:`.scenario` -- the training scenario read, its cluster resized;
* :mod:`.space` -- the search space and the configurations in it (the rules);
* :mod:`.candidates` -- each configuration's document, checked as a run would check it;
* :mod:`.runs` -- simulating candidates (the studies' one process pool) and
  verifying the best ones with the flow-level model;
* :mod:`.tables` -- ranking, the verdict, the table and plan.csv/md/png/svg;
* :mod:`.figure` -- plan.png: throughput relative to the best, on a zoomed axis.

``clustersim.plan``, its old path, still imports for one release, with a DeprecationWarning
(:mod:`clustersim._compat`).
"""

from .candidates import *  # noqa: F403
from .figure import *  # noqa: F403
from .options import *  # noqa: F403
from .runs import *  # noqa: F403
from .runs import _outcome  # noqa: F401
from .scenario import *  # noqa: F403
from .space import *  # noqa: F403
from .tables import *  # noqa: F403
