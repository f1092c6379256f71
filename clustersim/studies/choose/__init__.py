"""``clustersim choose``: one training workload on several candidate clusters, compared on
cost and time to train.

* :mod:`.spec` -- the candidates file's keys (pydantic, key-path errors);
* :mod:`.choices` -- the file read: the workload, each cluster put into it and checked, the
  tokens, each cluster's GPUs by type and their price per hour;
* :mod:`.costs` -- pricing, one function per concept (GPU types, per-type totals, the bill);
* :mod:`.frontier` -- the Pareto frontier of cost and time to train;
* :mod:`.study` -- plan's search on every cluster (:mod:`clustersim.studies.plan`), all the
  simulations in one pool, each cluster's best configuration that fits, priced;
* :mod:`.tables` -- the table, the verdict, choose.csv/md and the folder;
* :mod:`.figure` -- frontier.png/svg.
"""

from .choices import Choices, ClusterOption, load_choices
from .costs import Bill, cluster_bill, gpu_types, per_type_total, spec_type, types_text
from .frontier import frontier_steps, pareto_optimal
from .spec import CandidatesFile, ClusterChoice, SearchSpec
from .study import ClusterResult, enumerate_clusters, plan_options, results, run_clusters
from .tables import CSV_COLUMNS, csv_text, format_table, markdown_text, verdict, write_outputs

__all__ = [
    "CSV_COLUMNS",
    "Bill",
    "CandidatesFile",
    "Choices",
    "ClusterChoice",
    "ClusterOption",
    "ClusterResult",
    "SearchSpec",
    "cluster_bill",
    "csv_text",
    "enumerate_clusters",
    "format_table",
    "frontier_steps",
    "gpu_types",
    "load_choices",
    "markdown_text",
    "pareto_optimal",
    "per_type_total",
    "plan_options",
    "results",
    "run_clusters",
    "spec_type",
    "types_text",
    "verdict",
    "write_outputs",
]
