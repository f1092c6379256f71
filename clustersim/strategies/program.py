"""The ``program`` workload: a hand-written list of operations with dependencies.

```yaml
workload:
  program:
    - {id: in1, transfer: {src: rack0/node0/gpu1, dst: rack0/node0/gpu0, bytes: 160MB}}
    - {id: sum, compute: {device: rack0/node0/gpu0, flops: 0}, after: [in1]}
```

Each operation starts as soon as every operation in its ``after:`` list has
finished (at time 0 when the list is empty).  Any communication pattern can be
written this way; the validation cases D1-D3 and N1-N4 are.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..budget import WorkEstimate
from ..engine import Simulation
from ..errors import Problem, ScenarioError, hinted, join_path
from ..metrics import StrategySummary, SummaryPart
from ..scenario import FlopCount, Size, TimeSpan
from .base import Strategy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TransferOp(_Strict):
    """Move ``bytes`` from device ``src`` to device ``dst`` over the network."""

    src: str = Field(description="source device, full path (rack0/node0/gpu1)")
    dst: str = Field(description="destination device, full path")
    size_bytes: Size = Field(alias="bytes", description="message size, e.g. 160MB")


class ComputeOp(_Strict):
    """Work on one device: exactly one of flops, seconds or bytes (memory-bound)."""

    device: str = Field(description="device, full path")
    flops: FlopCount | None = Field(None, description="FLOPs; time = flops / (peak x efficiency)")
    seconds: TimeSpan | None = Field(None, description="duration given directly, e.g. 1.5ms")
    size_bytes: Size | None = Field(
        None, alias="bytes", description="memory-bound work: time = bytes / memory bandwidth"
    )

    @field_validator("flops", "seconds", "size_bytes", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("expected an amount, got null (leave the key out instead)")
        return value

    @model_validator(mode="after")
    def _exactly_one_amount(self) -> ComputeOp:
        given = [
            k
            for k, v in (
                ("flops", self.flops),
                ("seconds", self.seconds),
                ("bytes", self.size_bytes),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of flops, seconds or bytes (got {', '.join(given) or 'none'})"
            )
        return self


class ProgramOp(_Strict):
    """One operation of a program: a transfer or a compute, after others."""

    id: str = Field(min_length=1, description="unique name of the operation")
    transfer: TransferOp | None = Field(None, description="move bytes from one device to another")
    compute: ComputeOp | None = Field(None, description="run work on one device")
    after: list[str] = Field(default_factory=list, description="ids that must finish first")
    label: str | None = Field(None, description="label in the timeline (default: the id)")

    @model_validator(mode="after")
    def _exactly_one_action(self) -> ProgramOp:
        if (self.transfer is None) == (self.compute is None):
            raise ValueError("give exactly one of transfer or compute")
        return self


class ProgramWorkload(_Strict):
    """``workload: {program: [...]}``."""

    program: list[ProgramOp] = Field(min_length=1, description="operations with dependencies")


@dataclass(frozen=True)
class OperationTimes(SummaryPart):
    """When one hand-written operation ran (seconds)."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class ProgramSummary(StrategySummary):
    """Hand-written operations: when each ran."""

    name = "program"
    description = "operations: start_s and end_s of each operation"

    operations: dict[str, OperationTimes]


class Program(Strategy):
    """Run a hand-written list of transfers and computes with dependencies."""

    name = "program"
    description = "hand-written operations (transfer, compute) with after: dependencies"
    config_model = ProgramWorkload

    def check(self) -> None:
        """Ids unique, dependencies known and acyclic, devices exist."""
        ops = self.config.program
        problems: list[Problem] = []
        seen: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.id in seen:
                problems.append(
                    Problem(
                        join_path("workload.program", i, "id"),
                        f"duplicate id '{op.id}' (first at program[{seen[op.id]}])",
                        "unique ids",
                    )
                )
            seen.setdefault(op.id, i)
        for i, op in enumerate(ops):
            for j, dep in enumerate(op.after):
                if dep not in seen:
                    problems.append(
                        Problem(
                            join_path("workload.program", i, "after", j),
                            hinted(f"unknown id '{dep}'", dep, seen),
                            "ids of other operations",
                        )
                    )
        if problems:
            raise ScenarioError(problems)
        self.order = _topological_order(ops)
        for i, op in enumerate(ops):
            self._check_devices(i, op)

    def _check_devices(self, i: int, op: ProgramOp) -> None:
        base = join_path("workload.program", i)
        if op.transfer is not None:
            self.topology.device(op.transfer.src, join_path(base, "transfer.src"))
            self.topology.device(op.transfer.dst, join_path(base, "transfer.dst"))
            try:
                self.topology.routes(op.transfer.src, op.transfer.dst)
            except ScenarioError:
                raise ScenarioError(
                    Problem(
                        join_path(base, "transfer"),
                        f"no route from {op.transfer.src} to {op.transfer.dst}: "
                        "the cluster's links do not connect them",
                        "devices joined by a path of links",
                    )
                ) from None
        else:
            self.topology.device(op.compute.device, join_path(base, "compute.device"))

    def estimate_work(self) -> WorkEstimate:
        """A record per operation, a transfer per transfer operation."""
        ops = self.config.program
        return WorkEstimate(sum(op.transfer is not None for op in ops), len(ops))

    def describe(self) -> str:
        n = len(self.config.program)
        return f"program of {n} operation{'' if n == 1 else 's'}"

    def start(self, sim: Simulation) -> None:
        self.times: dict[str, tuple[float, float]] = {}
        done: dict[str, Any] = {}
        for op in self.order:
            done[op.id] = sim.process(self._run(sim, op, [done[d] for d in op.after]))

    def _run(self, sim: Simulation, op: ProgramOp, deps: list[Any]) -> Generator[Any, Any, None]:
        if deps:
            yield sim.all_of(deps)
        start = sim.now
        label = op.label or op.id
        if op.transfer is not None:
            t = op.transfer
            yield sim.transfer(t.src, t.dst, t.size_bytes, label=label, op=op.id)
        else:
            c = op.compute
            yield sim.compute(
                c.device,
                flops=c.flops,
                seconds=c.seconds,
                bytes=c.size_bytes,
                label=label,
                op=op.id,
            )
        self.times[op.id] = (start, sim.now)

    def summarize(self, sim: Simulation) -> ProgramSummary:
        """When each operation started and ended."""
        unfinished = [op.id for op in self.config.program if op.id not in self.times]
        if unfinished:
            from ..errors import SimulationError

            raise SimulationError(f"operations never finished: {', '.join(unfinished[:20])}")
        return ProgramSummary(
            {op.id: OperationTimes(*self.times[op.id]) for op in self.config.program}
        )


def _topological_order(ops: list[ProgramOp]) -> list[ProgramOp]:
    """Operations so that each comes after its dependencies; a cycle is a ScenarioError."""
    index = {op.id: i for i, op in enumerate(ops)}
    state = [0] * len(ops)  # 0 new, 1 on stack, 2 done
    order: list[ProgramOp] = []
    for root in range(len(ops)):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, k = stack[-1]
            deps = ops[node].after
            if k < len(deps):
                stack[-1] = (node, k + 1)
                nxt = index[deps[k]]
                if state[nxt] == 1:
                    cycle = [ops[n].id for n, _ in stack[[n for n, _ in stack].index(nxt) :]] + [
                        ops[nxt].id
                    ]
                    raise ScenarioError(
                        Problem(
                            join_path("workload.program", node, "after"),
                            f"dependency cycle: {' -> '.join(cycle)}",
                            "an acyclic after: graph",
                        )
                    )
                if state[nxt] == 0:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                order.append(ops[node])
                stack.pop()
    return order
