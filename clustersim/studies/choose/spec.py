"""The candidates file of ``clustersim choose``: one training workload, the clusters to choose
between and what each costs, validated key by key (every problem at its key path).

```yaml
workload: ../llm/llama2_70b.yaml   # a training scenario, relative to this file
tokens: 2T                         # default: the workload's training.tokens
energy_price: 0.12                 # currency per kWh (optional; needs every gpu_power)
currency: USD                      # a label for the tables and the plot (optional)
search: {tp: [4, 8], pp: [4, 8], micro_batch: [1], zero: [1], chunks: [1]}
clusters:
  - name: a100-2to1
    gpu_hour_price: 5.12           # or {a100-sxm4-80gb: 5.12, h100-sxm5-80gb: 12.29}
    gpu_power: 400W                # or a mapping by GPU type
    cluster: {kind: two_tier, racks: 16, nodes_per_rack: 4, node: {preset: dgx-a100}}
```

A ``cluster`` is a cluster section, or the path of a YAML file holding one (a scenario's
``cluster:`` section, or a bare cluster section).  Units: prices in the file's currency
per GPU-hour and per kWh, powers in watts, tokens a count.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_validator,
)

from ...errors import Problem, join_path
from ...scenario.fields import Count, Invalid, LargeCount, Power, _Spec

CLUSTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A candidate's name: letters, digits, ``.``, ``_`` and ``-``, not starting with a dot or a
dash (it names the file ``plans/NAME.csv``)."""
NAME_CHARS = 64
"""Longest candidate name."""

Price = Annotated[float, Strict(), AllowInfNan(False), Field(gt=0)]
"""A price above 0 (currency per GPU-hour or per kWh)."""
GpuType = Annotated[str, Field(min_length=1)]
"""The name of a GPU type: the ``type`` of a topology device, else its GPU preset
(``a100-sxm4-80gb``, ``h100-sxm5-80gb``: ``clustersim list gpus``)."""


def _form(data: Any) -> str:
    """Which form a value takes: ``by_type`` (a mapping), ``text`` or ``one`` (anything else)."""
    if isinstance(data, dict):
        return "by_type"
    return "text" if isinstance(data, str) else "one"


PriceByType = Annotated[
    Annotated[Price, Tag("one")]
    | Annotated[Price, Tag("text")]
    | Annotated[dict[GpuType, Price], Tag("by_type")],
    Discriminator(_form),
]
"""A price for every GPU, or a mapping from GPU type to its price."""
PowerByType = Annotated[
    Annotated[Power, Tag("one")]
    | Annotated[Power, Tag("text")]
    | Annotated[dict[GpuType, Power], Tag("by_type")],
    Discriminator(_form),
]
"""Watts for every GPU (``700W``), or a mapping from GPU type to its watts."""
ClusterSection = Annotated[
    Annotated[dict[str, Any], Tag("by_type")]
    | Annotated[str, Field(min_length=1), Tag("text")]
    | Annotated[dict[str, Any], Tag("one")],
    Discriminator(_form),
]
"""A cluster section (a mapping) or the path of a file holding one."""


def _zero_form(data: Any) -> str:
    return "fsdp" if isinstance(data, str) else "stage"


ZeroStage = Annotated[
    Annotated[int, Strict(), Field(ge=0, le=3), Tag("stage")]
    | Annotated[Literal["fsdp"], Tag("fsdp")],
    Discriminator(_zero_form),
]
"""A ZeRO stage, 0 to 3 (``fsdp`` is 3)."""
Counts = Annotated[list[Count], Field(min_length=1)]


class SearchSpec(_Spec):
    """What plan's search tries on every cluster (each key as the plan flag of its name;
    a key left out searches what plan does without its flag)."""

    tp: Counts | None = None
    """Tensor-parallel degrees (``--tp``); default every valid one."""
    pp: Counts | None = None
    """Pipeline stages (``--pp``); default every valid count."""
    micro_batch: Counts | None = None
    """Samples per micro-batch (``--micro-batch``); default 1, 2, 4, 8."""
    zero: Annotated[list[ZeroStage], Field(min_length=1)] | None = None
    """ZeRO stages 0-3, ``fsdp`` = 3 (``--zero``); default 0, 1."""
    chunks: Counts | None = None
    """Model chunks per device (``--chunks``); default 1, 2 and the workload's own."""

    def zero_stages(self) -> tuple[int, ...] | None:
        """The ZeRO stages as numbers (``fsdp`` as 3), sorted, without repeats."""
        if self.zero is None:
            return None
        return tuple(sorted({3 if z == "fsdp" else int(z) for z in self.zero}))


class ClusterChoice(_Spec):
    """One cluster to choose between: its name, its prices and the cluster itself."""

    name: Annotated[str, Field(min_length=1, max_length=NAME_CHARS)]
    """Unique; names the cluster in the tables, the plot and ``plans/NAME.csv``."""
    description: str = ""
    """A line saying what the cluster is (choose.md)."""
    gpu_hour_price: PriceByType | None = None
    """Price of one GPU-hour, or a mapping from GPU type to it; default the cluster
    section's ``gpu_hour_price``, and one of the two is required."""
    gpu_power: PowerByType | None = None
    """Watts per GPU (``700W``; all in: its node's share and cooling if you like), or a
    mapping from GPU type to it: the energy."""
    cluster: ClusterSection
    """A cluster section as in any scenario (presets allowed), or the path of a YAML file
    (relative to this file) whose ``cluster:`` section, or whole document, is one."""

    @field_validator("name")
    @classmethod
    def _file_name(cls, name: str) -> str:
        if not re.fullmatch(CLUSTER_NAME, name):
            raise ValueError(
                f"{name!r} is not a plain name (it names the file plans/NAME.csv): letters, "
                "digits, '.', '_' and '-', starting with a letter or digit"
            )
        return name


class CandidatesFile(_Spec):
    """The whole candidates file."""

    name: Annotated[str, Field(min_length=1)] | None = None
    """The study's name, for titles (default: the file's name)."""
    description: str = ""
    """What the study asks (choose.md)."""
    workload: Annotated[str, Field(min_length=1)]
    """A training scenario file (``model:`` and ``training:``), relative to this file; each
    candidate's cluster replaces its ``cluster:`` section."""
    tokens: LargeCount | None = None
    """Tokens to train (``2T``); default the workload's ``training.tokens``."""
    energy_price: Price | None = None
    """Price of one kWh; needs ``gpu_power`` on every cluster."""
    currency: Annotated[str, Field(max_length=16)] = ""
    """The prices' currency, a label for tables and the plot (``USD``)."""
    search: SearchSpec = Field(default_factory=SearchSpec)
    """Restricts plan's search; the command line's flags override it key by key."""
    clusters: Annotated[list[ClusterChoice], Field(min_length=1)]
    """The clusters to choose between."""

    @model_validator(mode="after")
    def _names_and_power(self) -> CandidatesFile:
        problems = []
        first: dict[str, int] = {}
        for i, choice in enumerate(self.clusters):
            j = first.setdefault(choice.name, i)
            if j != i:
                where, message = (
                    join_path("clusters", i, "name"),
                    f"{choice.name!r} names clusters[{j}] too",
                )
                problems.append(Problem(where, message, "a name of its own for each cluster"))
            if self.energy_price is not None and choice.gpu_power is None:
                problems.append(
                    Problem(
                        join_path("clusters", i, "gpu_power"),
                        "missing: energy_price is given, so every cluster needs its GPUs' power",
                        "watts per GPU (700W), or a mapping from GPU type to watts",
                    )
                )
        if problems:
            raise Invalid(problems)
        return self
