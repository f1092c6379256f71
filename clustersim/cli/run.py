"""``clustersim run``: simulate one scenario, write its run folder, print a summary."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, ScenarioError
from ..metrics import (
    GoodputSummary,
    Summary,
    TrainingSummary,
    UsageSummary,
)
from ..units import format_bandwidth, format_size, format_time
from .base import EXIT_OK, Command, add_limit_arguments, gpu_types_phrase, nic_transport_phrase, out
from .headline import auto_lines, bubble_line, iteration_line, memory_line
from .outputs import add_output_arguments, output_modes
from .overrides import add_override_arguments, override_settings
from .progress import Progress, SimulationProgress, notice, wanted

if TYPE_CHECKING:
    from ..strategies.parameter_server.summary import ParameterServerSummary


class RunCommand(Command):
    name = "run"
    order = 10
    help = "simulate a scenario and write summary.json, timeline.csv, links.csv, trace.json (and gantt.png/svg for training and traces)"
    description = (
        "Simulate SCENARIO and write DIR/summary.json, DIR/timeline.csv, DIR/links.csv, "
        "DIR/trace.json and DIR/scenario.resolved.yaml (the scenario as run: every --set, --network, "
        "--seed, --max-events and --max-memory applied; `clustersim run DIR/scenario.resolved.yaml` runs it "
        "again), plus DIR/gantt.png and DIR/gantt.svg for training scenarios and replayed traces. DIR is "
        "checked before simulating and replaced as a unit: the files are written into a "
        "temporary folder beside it, which then takes its place, so DIR holds the old "
        "complete set or the new one, never a mix. On a cluster of 4,096 devices or more DIR "
        "is folded by default (see the output options): trace.json and timeline.csv hold one "
        "replica, summary.json's per-device entries their 10 highest and 10 lowest devices "
        "(DIR/devices.csv every device) and links.csv equal links once; summary.json's "
        "'folded' block says what was folded. The run's work (events) and the simulator's "
        "peak memory, the run folder built in memory included, are estimated first and a run "
        "over either limit is refused (exit 2); a run estimated longer than about 10 s says so on "
        "stderr before it starts (how long, its events, and what shortens it, e.g. --set "
        "training.iterations=1). Prints a short summary."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
        parser.add_argument(
            "-o",
            "--output",
            metavar="DIR",
            help="output folder, replaced as a whole; refused if it holds files clustersim "
            "does not write (default: reports/<scenario name>)",
        )
        parser.add_argument(
            "--seed", type=int, help="override the scenario's seed (0 .. 4294967295, 2**32 - 1)"
        )
        parser.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            help="print only the output folder (no progress, no notice of a long run)",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="verify invariants (link capacity, bytes delivered, compute streams, "
            "dependencies); violations exit with code 2",
        )
        parser.add_argument(
            "--strict-memory",
            action="store_true",
            help="refuse (exit 2, before simulating) a training run whose peak memory per "
            "device exceeds the device's capacity; without it such a run is simulated, "
            "marked in summary.json (memory.fits: false) and warned about",
        )
        add_override_arguments(parser)
        add_limit_arguments(parser)
        add_output_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..api import simulate
        from ..budget import with_limit
        from ..outputs.paths import check_output_folder
        from ..scenario import with_seed
        from ..scenario.overrides import described, load_with_settings, resolved_yaml, with_choices
        from ..scenario.presets import expanded_document
        from ..strategies.kernel_times import anchor_kernel_paths
        from ..strategies.trace import anchor_trace_paths

        settings = override_settings(args, source=args.scenario)
        if args.seed is not None and any(s.key == "seed" for s in settings):
            message = "the seed is given twice, by --seed and by --set seed"
            raise ScenarioError(Problem("--seed", message, "one of them"), args.scenario)
        doc, scenario = load_with_settings(args.scenario, settings)
        given = args.output is not None
        out_dir = Path(args.output) if given else Path("reports") / _safe_name(scenario.name)
        check_output_folder(args.output if given else out_dir, "-o" if given else "output folder")
        if args.seed is not None:
            scenario = with_seed(scenario, args.seed, "--seed")
            doc = {**doc, "seed": args.seed}
        source = described(args.scenario, [s.text() for s in settings])
        expanded, presets = expanded_document(doc, args.scenario)  # catalog values written out
        anchored = anchor_trace_paths(expanded, args.scenario)  # a trace beside the scenario
        anchored = anchor_kernel_paths(anchored, args.scenario)  # and a kernels CSV
        progress = SimulationProgress(wanted(args.quiet))
        goodput = Progress(wanted(args.quiet), "goodput", unit="Monte Carlo run")
        started = time.monotonic()
        try:
            result = simulate(
                scenario,
                progress=progress if progress.enabled else None,
                check=args.check,
                strict_memory=args.strict_memory,
                max_events=args.max_events,
                goodput_progress=goodput if goodput.enabled else None,
                max_memory=args.max_memory,
                outputs=True,
                announce=lambda text: notice(text, args.quiet),
            )
        finally:
            progress.close()
            goodput.close()
        wall = time.monotonic() - started
        chosen = {key: c.value for key, c in (result.typed_summary.auto_choices or {}).items()}
        resolved = resolved_yaml(  # what auto chose written in, so that it runs alike
            with_limit(with_choices(anchored, chosen), args.max_events, args.max_memory),
            source,
            presets,
        )
        _warn_memory(result.typed_summary)
        written = result.write(
            out_dir, "-o" if given else "output folder", resolved, output_modes(args)
        )
        if args.quiet:
            out(str(out_dir))
        else:
            _print_summary(result, wall)
            out(f"wrote {', '.join(str(p) for p in written)}")
            gantt = [p for p in written if p.name == "gantt.png"]
            if gantt:
                out(f"Gantt chart: {gantt[0]}  (clustersim report {out_dir} writes report.html)")
        return EXIT_OK


def _warn_memory(summary: Summary) -> None:
    """A warning on stderr when the run does not fit in device memory."""
    from ..model.memory import over_capacity_message

    message = over_capacity_message(summary.memory)
    if message:
        sys.stderr.write(f"warning: {summary.header.scenario} {message}\n")
        sys.stderr.flush()


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def _print_summary(result: Any, wall_s: float) -> None:
    # the families' summary types: imported with their strategies, which the run loaded
    from ..strategies.collective import CollectiveSummary
    from ..strategies.parameter_server.summary import ParameterServerSummary
    from ..strategies.trace import TraceSummary

    s: Summary = result.typed_summary
    head, part = s.header, s.strategy
    topo = result.topology.describe()
    out(f"scenario  {head.scenario} (seed {head.seed}, workload {head.workload})")
    phrases = [gpu_types_phrase(result.topology), nic_transport_phrase(result.scenario)]
    out(
        f"cluster   {topo.get('devices', 0)} devices, {topo.get('links', 0)} links"
        + "".join(f"; {phrase}" for phrase in phrases if phrase)
    )
    out(f"makespan  {format_time(head.makespan_s)}")
    if isinstance(part, TrainingSummary):
        out(iteration_line(part, s.usage))
        bubble = bubble_line(part)
        if bubble is not None:
            out(bubble)
        _print_usage(part, s.usage)
    if isinstance(part, ParameterServerSummary):
        _print_servers(part)
    if isinstance(part, CollectiveSummary):
        out(
            f"collective {format_time(part.time_s)}, algbw {part.algbw_GBps:.2f} GB/s, "
            f"busbw {part.busbw_GBps:.2f} GB/s"
        )
    if isinstance(part, TraceSummary):
        out(
            f"trace     recorded span {format_time(part.trace_span_s)}; compute "
            f"{format_time(part.compute_s)} (recorded {format_time(part.trace_compute_s)}), "
            f"collectives {format_time(part.communication_s)} "
            f"(recorded {format_time(part.trace_communication_s)})"
        )
    if s.resilience is not None:
        _print_goodput(s.resilience)
    if s.memory is not None:
        out(memory_line(s.memory))
    for line in auto_lines(s.auto_choices):
        out(line)
    if s.tcp is not None:
        tcp = s.tcp
        out(
            f"tcp       {format_size(tcp.nic_bytes)} through TCP NICs cost "
            f"{format_time(tcp.cpu_s)} of kernel CPU; {tcp.busiest_node} "
            f"{format_time(tcp.busiest_node_cpu_s)}, {tcp.busiest_node_cores:.2f} cores busy"
        )
    engine = s.engine
    if engine is not None:
        out(
            f"engine    {engine.records} records, {engine.flows_completed} flows, "
            f"{engine.rate_recomputations} rate recomputations in {wall_s:.2f} s wall"
        )
    if result.links:
        out("busiest links:")
        for row in result.links[:5]:
            out(
                f"  {row['link']:<48} {100 * row['utilisation']:6.1f}% of {format_bandwidth(row['bandwidth_Bps'])}, "
                f"{format_size(row['bytes'])}, peak {row['peak_flows']} flows"
            )


def _print_usage(part: TrainingSummary, usage: UsageSummary | None) -> None:
    """One-replica mode's worker counts; the job's time to train, GPU-hours and cost."""
    played = getattr(part, "played_replicas", None)
    if played:
        out(
            f"replicas  every replica's result, {played:,} played of {part.simulated_replicas:,}"
            " (one per class of alike replicas: exactly every replica here)"
        )
    total = getattr(part, "workers_total", None)
    if total:
        classes = getattr(part, "replica_classes", None)
        how = "replicas identical"
        if classes:
            shown = ", ".join(f"replica {c.replica} for {c.replicas}" for c in classes[:3])
            more = f", {len(classes) - 3} more" if len(classes) > 3 else ""
            how = f"one replica of each of {len(classes)} classes: {shown}{more}"
        out(f"workers   {part.workers_simulated:,} simulated of {total:,} ({how})")
        if getattr(part, "replicas_exact", None) is not None:
            out(f"replicas  {_exactness(part)}")
    if usage is None or usage.time_to_train_s is None:
        return
    text = f"train     {_span(usage.time_to_train_s)} to train, {usage.gpu_hours:,.0f} GPU-hours"
    if usage.cost is not None:
        text += f", cost {usage.cost:,.0f}"
    out(text)


def _exactness(part: TrainingSummary) -> str:
    """Whether one replica per class is exactly every replica (``replicas_exact``)."""
    if part.replicas_exact:
        return "exactly every replica with the same collectives"
    return (
        f"approximate: {part.replicas_inexact_reason} (simulate_replicas: all plays every replica)"
    )


def _print_servers(part: ParameterServerSummary) -> None:
    """The parameter servers: the busiest, replication and failovers, cancelled work."""
    text = (
        f"servers   {len(part.servers)}, busiest {part.busiest_server} "
        f"({100 * part.busiest_server_share:.1f}% of the bytes servers moved)"
    )
    rep = part.replication
    if rep is not None:
        text += f"; replicas {rep.replicas}, {format_size(rep.replication_bytes)} forwarded"
        if rep.failovers:
            text += (
                f"; {rep.failovers} failover(s), {format_time(rep.failover_lost_s)} "
                "until the new masters answered"
            )
    if part.cancelled_compute_s:
        text += f"; {format_time(part.cancelled_compute_s)} of compute cancelled"
    out(text)


def _span(seconds: float) -> str:
    """A long time for people: ``30.1 d``, ``5.2 h``, ``12.5 min``, else :func:`format_time`."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return format_time(seconds)


def _print_goodput(g: GoodputSummary) -> None:
    """The whole job's outlook: time to train, goodput, where the time went."""
    out(
        f"job       {g.iterations_to_train:,} iterations: {_span(g.ideal_time_to_train_s)} "
        f"without failures, expected {_span(g.expected_time_to_train_s)} "
        f"(goodput {100 * g.goodput:.1f}%, {g.goodput_samples} sampled failure histories)"
    )
    lost = ", ".join(f"{kind} {_span(s)}" for kind, s in g.time_lost_s.items() if s >= 1e-3)
    out(f"lost      {lost or 'nothing'}")
    best = (
        f"; best {_span(g.best_checkpoint_interval_s)}"
        if g.best_checkpoint_interval_s is not None
        else ""
    )
    out(
        f"checkpoint every {_span(g.checkpoint_interval_s)} of work, "
        f"{format_time(g.checkpoint_blocking_s)} paused each{best}"
    )
