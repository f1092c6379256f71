"""``clustersim validate``: check scenario files without running them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ClustersimError
from .base import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    Command,
    add_limit_arguments,
    gpu_types_phrase,
    nic_transport_phrase,
    out,
)
from .headline import auto_lines


class ValidateCommand(Command):
    name = "validate"
    order = 20
    help = "check scenario files without running them"
    description = (
        "Check each FILE: YAML, keys, units, devices named in the workload, and the run's "
        "estimated work (events) and memory (the simulator's peak, bytes) against their "
        "limits, and print both estimates: the memory to simulate, and with the run folder "
        "`clustersim run` builds in memory. A candidates file of `clustersim choose` (top-level "
        "clusters: and workload: naming a file) is checked as choose reads it: the file, its "
        "workload with each cluster, the prices. Exit 2 if any is invalid or too large to "
        "simulate."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "files", metavar="FILE", nargs="+", help="scenario (or candidates) YAML files"
        )
        add_limit_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..api import prepare
        from ..scenario import is_candidates_document, parse_scenario
        from ..scenario.overrides import read_document

        bad = 0
        for path in args.files:
            try:
                doc = read_document(path)  # read and parsed once: candidates or scenario
                if is_candidates_document(doc):
                    _validate_candidates(path)
                    continue
                scenario = parse_scenario(doc, str(path))
                prepared = prepare(scenario, max_events=args.max_events, max_memory=args.max_memory)
            except ClustersimError as exc:
                bad += 1
                print(str(exc), file=sys.stderr)
                continue
            topo = prepared.topology.describe()
            transport = nic_transport_phrase(prepared.scenario)
            out(
                f"ok  {path}: {topo.get('devices', 0)} devices, {topo.get('links', 0)} links; {prepared.strategy.describe()}"
            )
            for phrase in (gpu_types_phrase(prepared.topology), transport):
                if phrase:
                    out(f"    {phrase}")
            out(f"    {_work_line(prepared)}")
            out(f"    {_memory_line(prepared)}")
            for line in auto_lines(prepared.strategy.auto_choices):
                out(f"    {line}")
        if bad:
            print(f"{bad} of {len(args.files)} file(s) invalid", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK


def _validate_candidates(path: str) -> None:
    """Check a candidates file as ``clustersim choose`` reads it and print what it holds."""
    from ..studies.choose import load_choices, types_text

    choices = load_choices(path)
    clusters = ", ".join(
        f"{o.name} ({types_text(o.gpu_types).replace(';', ', ')})" for o in choices.options
    )
    out(f"ok  {path}: candidates file of clustersim choose; workload {choices.workload_source}")
    out(f"    {len(choices.options)} cluster(s): {clusters}")


def _work_line(prepared: Any) -> str:
    """``estimated work: 1.2 M events (...), limit 200,000,000 events``."""
    from ..budget import limit_text

    work = prepared.work
    limit = limit_text(prepared.strategy.max_events)
    if work is None:
        return f"estimated work: unknown (this workload does not estimate it), limit {limit}"
    return f"estimated work: {work.describe(output=True)}, limit {limit}"


def _memory_line(prepared: Any) -> str:
    """``estimated memory: 150 MB to simulate (...), 480 MB with clustersim run's outputs,
    limit 20.2 GB (80% of this machine's 25.3 GB)``, and what ``run`` would do over it."""
    from ..budget import format_bytes, memory_limit_text

    strategy = prepared.strategy
    simulate = strategy.estimate_memory(outputs=False)
    run = strategy.estimate_memory(outputs=True)
    limit = strategy.max_memory
    text = (
        f"estimated memory: {simulate.describe()} to simulate, {format_bytes(run.total)} with "
        "clustersim run's outputs, "
    )
    if limit is None:
        return text + "no limit (this machine's memory is unknown)"
    text += f"limit {memory_limit_text(limit, strategy.memory_limit_is_default)}"
    if run.total > limit:
        text += "; clustersim run would refuse it (over the limit with its outputs)"
    return text
