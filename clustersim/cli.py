"""The ``clustersim`` command line.

Each subcommand is a :class:`Command` subclass that registers itself by
defining ``name``; ``main`` builds the parser from the registry.  Bad input
(any :class:`~clustersim.errors.ClustersimError`) prints one clear message per
problem and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from . import __version__
from .collectives import bench
from .errors import ClustersimError, SimulationError
from .units import format_bandwidth, format_size, format_time

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

_COMMANDS: dict[str, type[Command]] = {}


class Command:
    """A subcommand: ``name``, one-line ``help``, its arguments and ``run``."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _COMMANDS[cls.name] = cls

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments to ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit code."""
        raise NotImplementedError


def _out(text: str = "") -> None:
    print(text, flush=True)


class _Progress:
    """Prints simulated time on stderr while a long run goes on (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, now_s: float) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        if elapsed < 1.0:
            return
        sys.stderr.write(
            f"\r  simulating... t = {format_time(now_s)} simulated, {elapsed:.0f} s wall"
        )
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 72 + "\r")
            sys.stderr.flush()


class RunCommand(Command):
    name = "run"
    help = "simulate a scenario and write summary.json, timeline.csv, links.csv, trace.json (and gantt.png/svg for training)"
    description = (
        "Simulate SCENARIO and write DIR/summary.json, DIR/timeline.csv, DIR/links.csv and "
        "DIR/trace.json, plus DIR/gantt.png and DIR/gantt.svg for training scenarios (each "
        "written to a temporary name first, then moved into place). Prints a short summary."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
        parser.add_argument(
            "-o", "--output", metavar="DIR", help="output folder (default: reports/<scenario name>)"
        )
        parser.add_argument("--seed", type=int, help="override the scenario's seed")
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="print only the output folder"
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

    def run(self, args: argparse.Namespace) -> int:
        from .api import simulate
        from .scenario import load_scenario

        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.model_copy(update={"seed": args.seed})
        progress = _Progress(sys.stderr.isatty() and not args.quiet)
        started = time.monotonic()
        try:
            result = simulate(
                scenario,
                progress=progress if progress.enabled else None,
                check=args.check,
                strict_memory=args.strict_memory,
            )
        finally:
            progress.close()
        wall = time.monotonic() - started
        _warn_memory(result.summary)
        out_dir = Path(args.output) if args.output else Path("reports") / _safe_name(scenario.name)
        written = result.write(out_dir)
        if args.quiet:
            _out(str(out_dir))
        else:
            _print_summary(result, wall)
            _out(f"wrote {', '.join(str(p) for p in written)}")
            gantt = [p for p in written if p.name == "gantt.png"]
            if gantt:
                _out(f"Gantt chart: {gantt[0]}  (clustersim report {out_dir} writes report.html)")
        return EXIT_OK


def _warn_memory(summary: dict[str, Any]) -> None:
    """A warning on stderr when the run does not fit in device memory."""
    from .memory import over_capacity_message

    message = over_capacity_message(summary.get("memory", {}))
    if message:
        sys.stderr.write(f"warning: {summary['scenario']} {message}\n")
        sys.stderr.flush()


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def _print_summary(result: Any, wall_s: float) -> None:
    s = result.summary
    topo = result.topology.describe()
    _out(f"scenario  {s['scenario']} (seed {s['seed']}, workload {s['workload']})")
    _out(f"cluster   {topo.get('devices', 0)} devices, {topo.get('links', 0)} links")
    _out(f"makespan  {format_time(s['makespan_s'])}")
    if "iteration_time_s" in s:
        _out(
            f"iteration {format_time(s['iteration_time_s'])} mean over {len(s['iteration_times_s'])}, "
            f"{s['throughput_samples_per_s']:,.1f} samples/s"
        )
    if "busbw_GBps" in s:
        _out(
            f"collective {format_time(s['time_s'])}, algbw {s['algbw_GBps']:.2f} GB/s, busbw {s['busbw_GBps']:.2f} GB/s"
        )
    memory = s.get("memory")
    if memory:
        verdict = (
            "fits"
            if memory["fits"]
            else f"DOES NOT FIT on {memory['devices_over_capacity']} device(s)"
        )
        _out(
            f"memory    peak {format_size(memory['peak_bytes'])} of "
            f"{format_size(memory['capacity_bytes'])} on {memory['peak_device']} ({verdict})"
        )
    engine = s["engine"]
    _out(
        f"engine    {engine['records']} records, {engine['flows_completed']} flows, "
        f"{engine['rate_recomputations']} rate recomputations in {wall_s:.2f} s wall"
    )
    if result.links:
        _out("busiest links:")
        for row in result.links[:5]:
            _out(
                f"  {row['link']:<48} {100 * row['utilisation']:6.1f}% of {format_bandwidth(row['bandwidth_Bps'])}, "
                f"{format_size(row['bytes'])}, peak {row['peak_flows']} flows"
            )


class ValidateCommand(Command):
    name = "validate"
    help = "check scenario files without running them"
    description = "Check each FILE: YAML, keys, units, devices named in the workload. Exit 2 if any is invalid."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", metavar="FILE", nargs="+", help="scenario YAML files")

    def run(self, args: argparse.Namespace) -> int:
        from .api import prepare

        bad = 0
        for path in args.files:
            try:
                prepared = prepare(path)
            except ClustersimError as exc:
                bad += 1
                print(str(exc), file=sys.stderr)
                continue
            topo = prepared.topology.describe()
            _out(
                f"ok  {path}: {topo.get('devices', 0)} devices, {topo.get('links', 0)} links; {prepared.strategy.describe()}"
            )
        if bad:
            print(f"{bad} of {len(args.files)} file(s) invalid", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK


class SchemaCommand(Command):
    name = "schema"
    help = "print the JSON Schema of the scenario format"
    description = (
        "Print the JSON Schema of scenario files, for editors that check and complete YAML."
    )

    def run(self, args: argparse.Namespace) -> int:
        from .api import json_schema

        _out(json.dumps(json_schema(), indent=2))
        return EXIT_OK


class ListCommand(Command):
    name = "list"
    help = "list registered plugins (strategies, collective algorithms, model presets) or commands"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "what",
            choices=["strategies", "algorithms", "models", "commands"],
            help="what to list",
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.what == "algorithms":
            from .collectives import registered_algorithms

            for name, cls in registered_algorithms().items():
                ops = ", ".join(sorted(cls.ops))
                _out(f"{name:<20} {cls.description or cls.__doc__.splitlines()[0]} [{ops}]")
            return EXIT_OK
        if args.what == "models":
            from .models import registered_presets

            for name, found in registered_presets().items():
                model = found.build()
                _out(
                    f"{name:<16} {model.params / 1e6:>9.1f} M params  "
                    f"{model.forward_flops / 1e9:>9.2f} GFLOPs/sample forward  {found.description}"
                )
            return EXIT_OK
        if args.what == "commands":
            for name, cls in sorted(_COMMANDS.items()):
                _out(f"{name:<12} {cls.help}")
            return EXIT_OK
        from .strategies import registered_strategies

        for name, cls in registered_strategies().items():
            _out(f"{name:<12} {cls.description}")
        return EXIT_OK


class CollectiveCommand(Command):
    name = "collective"
    help = "time a collective over a range of sizes, nccl-tests style"
    description = (
        "Simulate one collective operation for every size and algorithm and print, per size, "
        "the time (us), algorithm bandwidth and bus bandwidth (GB/s = 1e9 bytes/s, nccl-tests "
        "definitions) of each algorithm. The cluster comes from --cluster FILE (a scenario or "
        "its cluster section) or from --devices/--topology/--bandwidth/--latency."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        what = parser.add_argument_group("what to time")
        what.add_argument(
            "--op", required=True, help="operation: allreduce, allgather, reducescatter, ..."
        )
        what.add_argument(
            "--algorithm",
            default="all",
            metavar="NAME|all",
            help="algorithm, or all applicable ones (default: all)",
        )
        what.add_argument(
            "--bytes",
            default="1MB:1GB:x4",
            metavar="SIZE|MIN:MAX:xF|MIN:MAX:+STEP",
            help="size (nccl-tests meaning) or range multiplied by F or stepped by STEP "
            "(default: 1MB:1GB:x4)",
        )
        what.add_argument(
            "--group", metavar="GLOB", help="devices in the group (default: every GPU)"
        )
        what.add_argument("--root", type=int, default=0, help="root rank of rooted operations (0)")
        what.add_argument("--chunk", metavar="SIZE", help="pipelining chunk (algorithm default)")
        what.add_argument(
            "--bidirectional", action="store_true", help="rings run both ways, half each way"
        )
        what.add_argument(
            "--reduce-cost",
            action="store_true",
            help="reductions cost bytes / memory bandwidth (default: free)",
        )
        what.add_argument(
            "--model",
            choices=["flow", "analytical"],
            default="flow",
            help="flow-level max-min, or congestion-aware analytical: the alpha-beta "
            "formula with link sharing (default: flow)",
        )
        what.add_argument(
            "--channels",
            type=int,
            default=1,
            metavar="N",
            help="run each collective as N equal slices at once, NCCL's channels (default: 1)",
        )
        what.add_argument(
            "--protocol",
            metavar="NAME",
            help="price NCCL's protocol on top of the links: LL, LL128, Simple, or auto "
            "(the fastest by the cost model; default: none)",
        )
        what.add_argument(
            "--iterations",
            type=int,
            default=1,
            help="back-to-back runs per point; time is their mean (default: 1)",
        )
        where = parser.add_argument_group("cluster")
        where.add_argument("--cluster", metavar="FILE", help="scenario or cluster-section YAML")
        where.add_argument("--devices", type=int, metavar="N", help="devices of a flat topology")
        where.add_argument(
            "--topology",
            choices=list(bench.TOPOLOGIES),
            help=f"cluster shape (default: {_DEFAULT_TOPOLOGY})",
        )
        where.add_argument(
            "--bandwidth",
            help=f"each link (two_tier: each NIC), each direction (default: {_shown('--bandwidth')})",
        )
        where.add_argument(
            "--latency",
            metavar="TIME",
            help=f"each link (two_tier: each NIC) (default: {_shown('--latency')})",
        )
        for flag, (_, metavar, text) in _TWO_TIER_FLAGS.items():
            where.add_argument(
                flag, metavar=metavar, help=f"two_tier: {text} (default: {_shown(flag)})"
            )
        out = parser.add_argument_group("output")
        out.add_argument("--json", action="store_true", help="print the rows as JSON")
        out.add_argument("--csv", metavar="FILE", help="also write the rows as CSV")
        out.add_argument("--plot", metavar="FILE.png", help="also plot busbw against size")

    def run(self, args: argparse.Namespace) -> int:
        from .collectives import bench, canonical_op
        from .units import parse_size

        op = canonical_op(args.op, "--op")
        sizes = bench.parse_sizes(args.bytes)
        chunk = _flag_quantity(parse_size, args.chunk, "--chunk") if args.chunk else None
        scenario, where = _bench_scenario(args)
        progress = _CountProgress(
            sys.stderr.isatty(), "collective: point {done} of {total}", _PROGRESS_MIN_POINTS
        )
        try:
            rows = bench.sweep(
                scenario,
                op,
                sizes,
                args.algorithm,
                group=args.group,
                root=args.root,
                chunk_bytes=chunk,
                bidirectional=args.bidirectional,
                reduce_cost=args.reduce_cost,
                model=args.model,
                iterations=args.iterations,
                progress=progress,
                channels=args.channels,
                protocol=args.protocol,
            )
        finally:
            progress.close()
        devices = rows[0]["devices"] if rows else 0
        title = f"{op} on {devices} device{'' if devices == 1 else 's'}, {where}"
        if args.json:
            _out(json.dumps(rows, indent=2))
        else:
            _print_bench_table(rows, f"{title}; model {args.model}, {args.iterations} iteration(s)")
        _write_bench_files(args, rows, title, note=sys.stderr if args.json else sys.stdout)
        return EXIT_OK


_DEFAULT_TOPOLOGY = "switch"
_TWO_TIER_FLAGS = {
    "--racks": ("racks", "N", "racks"),
    "--nodes-per-rack": ("nodes_per_rack", "N", "nodes in each rack"),
    "--gpus-per-node": ("gpus_per_node", "N", "GPUs in each node"),
    "--oversubscription": ("oversubscription", "RATIO", "rack uplink oversubscription ratio"),
    "--pcie": ("pcie", "BANDWIDTH", "each device's PCIe link"),
    "--nvlink": ("nvlink", "BANDWIDTH", "NVSwitch bandwidth per GPU, or none"),
}
"""Flags only two_tier takes: flag -> (keyword of ``two_tier_cluster``, metavar, help)."""
_KEYWORDS = {
    "--bandwidth": "nic_bandwidth",
    "--latency": "nic_latency",
    **{flag: keyword for flag, (keyword, _, _) in _TWO_TIER_FLAGS.items()},
}
"""Topology flag -> keyword of ``two_tier_cluster`` (whose default the flag takes)."""
_PROGRESS_MIN_POINTS = 8


class _CountProgress:
    """A count of finished runs on stderr while many go on (only on a terminal)."""

    def __init__(self, enabled: bool, template: str, min_total: int = 1) -> None:
        self.enabled = enabled
        self.template = template
        """The line shown, with ``{done}`` and ``{total}``."""
        self.min_total = min_total
        """Totals below this show nothing (short sweeps need no progress)."""
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_total:
            return
        sys.stderr.write("\r  " + self.template.format(done=done, total=total))
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 48 + "\r")
            sys.stderr.flush()


def _default(flag: str) -> Any:
    """The value a topology flag takes when not given: ``two_tier_cluster``'s default."""
    return bench.TWO_TIER_DEFAULTS[_KEYWORDS[flag]]


def _shown(flag: str) -> str:
    """The default of a topology flag as its help shows it (``1``, not ``1.0``)."""
    value = _default(flag)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flag_quantity(parse: Any, value: Any, flag: str) -> float:
    """``value`` read by the units parser ``parse``; a ScenarioError naming ``flag`` if bad."""
    from .errors import Problem, ScenarioError
    from .units import UnitError

    try:
        return parse(value)
    except UnitError as exc:
        raise ScenarioError(Problem(flag, exc.message, exc.allowed)) from None


def _bench_scenario(args: argparse.Namespace) -> tuple[Any, str]:
    """The scenario to benchmark on and a phrase naming its cluster, from --cluster or the flags."""
    from .collectives import bench
    from .errors import Problem, ScenarioError

    flat_flags = {"--devices": args.devices, "--topology": args.topology}
    flat_flags.update({"--bandwidth": args.bandwidth, "--latency": args.latency})
    tier_flags = {flag: getattr(args, _dest(flag)) for flag in _TWO_TIER_FLAGS}
    if args.cluster:
        given = [f for f, v in {**flat_flags, **tier_flags}.items() if v is not None]
        if given:
            raise ScenarioError(Problem("--cluster", f"cannot be combined with {', '.join(given)}"))
        scenario = bench.load_cluster(args.cluster)
        return scenario, f"{Path(args.cluster).name} ({scenario.cluster.kind})"
    kind = args.topology or _DEFAULT_TOPOLOGY
    if kind != "two_tier":
        given = [f for f, v in tier_flags.items() if v is not None]
        if given:
            raise ScenarioError(
                Problem(given[0], f"only applies to --topology two_tier, not {kind}")
            )
    cluster = _flag_cluster(args, kind)
    return bench.scenario_of(cluster, "collective", "command line"), _flag_phrase(cluster)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _flag_cluster(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The ``cluster:`` section the topology flags describe (units checked, errors name flags)."""
    from .collectives import bench
    from .errors import Problem, ScenarioError
    from .units import parse_bandwidth, parse_time

    def value(flag: str) -> Any:
        given = getattr(args, _dest(flag), None)
        return given if given is not None else _default(flag)

    bandwidth, latency = value("--bandwidth"), value("--latency")
    _flag_quantity(parse_bandwidth, bandwidth, "--bandwidth")
    _flag_quantity(parse_time, latency, "--latency")
    if kind != "two_tier":
        if args.devices is None:
            raise ScenarioError(
                Problem("--devices", "missing: how many devices?", "--devices N, or --cluster FILE")
            )
        if args.devices < 1:
            raise ScenarioError(Problem("--devices", f"must be at least 1, got {args.devices}"))
        return bench.flat_cluster(kind, args.devices, bandwidth, latency)
    counts = {
        f: _flag_count(value(f), f) for f in ("--racks", "--nodes-per-rack", "--gpus-per-node")
    }
    ratio = _flag_ratio(value("--oversubscription"))
    nvlink = value("--nvlink")
    for flag, text in (("--pcie", value("--pcie")), ("--nvlink", nvlink)):
        if not (flag == "--nvlink" and text.lower() == "none"):
            _flag_quantity(parse_bandwidth, text, flag)
    total = counts["--racks"] * counts["--nodes-per-rack"] * counts["--gpus-per-node"]
    if args.devices is not None and args.devices != total:
        raise ScenarioError(
            Problem(
                "--devices",
                f"{args.devices} does not match two_tier's racks x nodes-per-rack x gpus-per-node = {total}",
                "leave --devices out, or change --racks / --nodes-per-rack / --gpus-per-node",
            )
        )
    return bench.two_tier_cluster(
        racks=counts["--racks"],
        nodes_per_rack=counts["--nodes-per-rack"],
        gpus_per_node=counts["--gpus-per-node"],
        nic_bandwidth=bandwidth,
        nic_latency=latency,
        oversubscription=ratio,
        pcie=value("--pcie"),
        nvlink=None if nvlink.lower() == "none" else nvlink,
    )


def _flag_count(text: str | int, flag: str) -> int:
    from .errors import Problem, ScenarioError

    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ScenarioError(Problem(flag, f"expected a whole number >= 1, got {text!r}"))
    return count


def _flag_ratio(text: str | float) -> float:
    from .errors import Problem, ScenarioError

    try:
        ratio = float(text)
    except ValueError:
        ratio = float("nan")
    if not ratio > 0 or ratio == float("inf"):
        raise ScenarioError(
            Problem("--oversubscription", f"expected a number > 0, got {text!r}", "e.g. 1, 2, 4")
        )
    return ratio


def _flag_phrase(cluster: dict[str, Any]) -> str:
    """Topology in words for the header and the plot title."""
    from .units import parse_bandwidth, parse_time

    if cluster["kind"] == "two_tier":
        node = cluster["node"]
        nic = node["nic"]
        shape = f"{cluster['racks']}x{cluster['nodes_per_rack']}x{node['gpus']}"
        link = format_bandwidth(parse_bandwidth(nic["bandwidth"]))
        extra = f", oversubscription {cluster['rack_uplink']['oversubscription']:g}"
        return f"topology two_tier {shape} (NIC {link}, {format_time(parse_time(nic['latency']))}{extra})"
    link = cluster["link"]
    bandwidth = format_bandwidth(parse_bandwidth(link["bandwidth"]))
    return f"topology {cluster['kind']} ({bandwidth}, {format_time(parse_time(link['latency']))} per link)"


def _print_bench_table(rows: list[dict[str, Any]], title: str) -> None:
    """One line per size; per algorithm its time (us), algbw and busbw (GB/s), as nccl-tests."""
    _out(f"# {title}")
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    left = f"{'size(B)':>14} {'size':>10} {'count(f32)':>12}"
    group = f"{'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"
    width = len(group) + 2
    _out(
        ("#" + " " * (len(left) - 1) + "".join(f"  {a:^{width - 2}}" for a in algorithms)).rstrip()
    )
    _out("#" + left[1:] + "".join(f"  {group}" for _ in algorithms))
    by_point = {(r["bytes"], r["algorithm"]): r for r in rows}
    for size in dict.fromkeys(r["bytes"] for r in rows):
        line = f"{size:>14.0f} {format_size(size):>10} {size / 4:>12.0f}"
        for a in algorithms:
            r = by_point[(size, a)]
            line += (
                f"  {r['time_s'] * 1e6:>12.2f} {r['algbw_GBps']:>12.3f} {r['busbw_GBps']:>12.3f}"
            )
        _out(line)
    chosen = [r for r in rows if r["chosen"] != r["algorithm"]]
    if chosen:
        _out("# ran: " + ", ".join(f"{format_size(r['bytes'])} {r['chosen']}" for r in chosen))


def _write_bench_files(
    args: argparse.Namespace, rows: list[dict[str, Any]], title: str, note: Any
) -> None:
    """Write --csv and --plot (each through a temporary file, then renamed)."""
    from .api import write_atomic
    from .collectives import bench

    if args.csv:
        path = write_atomic(Path(args.csv), bench.rows_csv(rows))
        print(f"wrote {path}", file=note, flush=True)
    if args.plot:
        path = bench.save_figure(bench.plot_figure(rows, title), args.plot)
        print(f"wrote {path}", file=note, flush=True)


class CompareCommand(Command):
    name = "compare"
    help = "run scenarios over a grid of values and compare one summary metric"
    description = (
        "Simulate every SCENARIO for every value of the --set key paths (several --set make a "
        "grid), in parallel on local cores, and write DIR/compare.csv, DIR/compare.md and "
        "DIR/compare.png (the metric against the first swept key, one line per scenario). "
        "The metric is a top-level numeric key of summary.json (default iteration_time_s; "
        "scenarios without iterations show makespan_s, and the table says so)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("scenarios", metavar="SCENARIO", nargs="+", help="scenario YAML files")
        parser.add_argument(
            "--set",
            dest="settings",
            action="append",
            default=[],
            metavar="KEY=V1,V2,...",
            help="dotted key path with [i] indices and the values to sweep (YAML scalars), "
            "e.g. cluster.rack_uplink.oversubscription=1,2,4,8; repeat for a grid",
        )
        parser.add_argument(
            "--metric",
            default="iteration_time_s",
            help="summary key to compare (default: iteration_time_s)",
        )
        parser.add_argument(
            "-j",
            "--jobs",
            type=int,
            metavar="N",
            help="simulations run at once (default: number of cores)",
        )
        parser.add_argument("-o", "--output", metavar="DIR", required=True, help="output folder")

    def run(self, args: argparse.Namespace) -> int:
        from . import sweep
        from .errors import Problem, ScenarioError

        if args.jobs is not None and args.jobs < 1:
            raise ScenarioError(Problem("-j", f"expected a whole number >= 1, got {args.jobs}"))
        settings = [sweep.parse_set(text) for text in args.settings]
        jobs = sweep.build_jobs(args.scenarios, settings)
        progress = _CountProgress(sys.stderr.isatty(), "compare: {done} of {total} done")
        try:
            results = sweep.run_jobs(jobs, args.jobs, progress=progress)
        finally:
            progress.close()
        rows = sweep.table_rows(jobs, results, args.metric)
        keys = [s.key for s in settings]
        written = sweep.write_outputs(rows, args.output, keys, args.metric)
        _out(f"{len(jobs)} simulation(s) of {len(args.scenarios)} scenario(s)")
        _out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK


class PlanCommand(Command):
    name = "plan"
    help = "search dp x tp x pp x micro-batch x ZeRO configurations of a training scenario"
    description = (
        "Enumerate the parallel configurations (dp, tp, pp, micro_batch, zero) of the training "
        "SCENARIO on --devices GPUs, check each with the scenario's strategy, simulate them in "
        "parallel on local cores and print them ranked by throughput, with peak memory per "
        "device and whether it fits; then the best configuration that fits. -o DIR writes "
        "DIR/plan.csv, DIR/plan.md and DIR/plan.png. Exit 2 on bad input or when no "
        "configuration is valid, 1 when every simulation failed."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from .plan import DEFAULT_MICRO_BATCHES, DEFAULT_ZERO_STAGES, NETWORK_MODELS

        micro_batches = ",".join(map(str, DEFAULT_MICRO_BATCHES))
        zero = ",".join(map(str, DEFAULT_ZERO_STAGES))
        parser.add_argument("scenario", metavar="SCENARIO", help="training scenario YAML file")
        search = parser.add_argument_group("what to search")
        search.add_argument(
            "--devices",
            type=int,
            metavar="N",
            help="GPUs to plan for; resizes the cluster (default: the scenario's)",
        )
        search.add_argument(
            "--tp",
            metavar="LIST",
            help="tensor-parallel degrees, e.g. 1,2,4 (default: every valid)",
        )
        search.add_argument(
            "--pp", metavar="LIST", help="pipeline stages, e.g. 1,2,4 (default: every valid)"
        )
        search.add_argument(
            "--micro-batch",
            metavar="LIST",
            default=micro_batches,
            help=f"samples per micro-batch (default: {micro_batches})",
        )
        search.add_argument(
            "--zero",
            metavar="LIST",
            default=zero,
            help=f"ZeRO stages 0-3 (fsdp = 3); 2 and 3 only with tp = pp = 1 (default: {zero})",
        )
        run = parser.add_argument_group("how to simulate")
        run.add_argument(
            "--network",
            choices=NETWORK_MODELS,
            default=NETWORK_MODELS[0],
            help="network.model of every candidate (default: analytical, congestion-aware)",
        )
        run.add_argument(
            "--iterations",
            type=int,
            default=1,
            metavar="K",
            help="iterations per candidate (default: 1)",
        )
        run.add_argument(
            "--all-replicas",
            action="store_true",
            help="simulate every data-parallel replica (default: replica 0 stands for all, "
            "data-parallel collectives priced analytically, unless there are stragglers)",
        )
        run.add_argument(
            "-j", "--jobs", type=int, metavar="J", help="simulations at once (default: cores)"
        )
        run.add_argument(
            "--verify",
            type=int,
            metavar="K",
            help="simulate the best K again with the flow-level model, every replica, and "
            "show both iteration times and both rankings side by side",
        )
        out = parser.add_argument_group("output")
        out.add_argument("--top", type=int, metavar="K", help="print only the first K rows")
        out.add_argument(
            "--fit-only", action="store_true", help="leave out configurations that do not fit"
        )
        out.add_argument("-o", "--output", metavar="DIR", help="write plan.csv, plan.md, plan.png")
        out.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="progress bar on stderr (default: when stderr is a terminal)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from . import plan

        for flag, value in (("-j", args.jobs), ("--top", args.top), ("--verify", args.verify)):
            plan.check_count(value, flag)
        options = _plan_options(args)
        doc = plan.load_training_document(args.scenario)
        found = plan.enumerate_candidates(doc, args.scenario, options)
        _print_plan_header(found, options)
        if not found.candidates:
            raise ClustersimError(
                f"{args.scenario}: no valid configuration to simulate (see the reasons above); "
                "try other --devices, --tp, --pp, --micro-batch or --zero values"
            )
        _out(f"simulating {len(found.candidates)} configuration(s)")
        enabled = sys.stderr.isatty() if args.progress is None else args.progress
        progress = _PlanProgress(enabled)
        try:
            outcomes = plan.run_candidates(found.candidates, args.jobs, progress=progress)
        finally:
            progress.close()
        ranked = plan.rank(outcomes)
        rows = plan.shown(ranked, args.fit_only, args.top)
        for line in plan.format_table(rows) if rows else ["(no configuration fits)"]:
            _out(line)
        verdict = plan.verdict(ranked, options, plan.recompute_of(found.doc))
        _out(verdict)
        verified = self._verify(args, ranked, options) if args.verify else []
        if args.output:
            title = f"plan: {found.doc['name']} on {found.space.devices} GPUs"
            network = f"network {options.network}: {plan.NETWORK_NOTES[options.network]}"
            notes = [verdict, "", network]
            if verified:
                notes += ["", "```", *plan.verification_lines(verified, options.network), "```"]
            written = plan.write_outputs(ranked, args.output, title, notes, verified)
            _out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK if any(o.ok for o in ranked) else EXIT_FAILED

    @staticmethod
    def _verify(args: argparse.Namespace, ranked: Any, options: Any) -> list[Any]:
        """Re-simulate the best ``--verify`` configurations flow-level; print both times."""
        from . import plan

        count = min(args.verify, sum(o.ok for o in ranked))
        if not count:
            return []
        _out(f"verifying the best {count} with the flow-level model, every replica")
        enabled = sys.stderr.isatty() if args.progress is None else args.progress
        progress = _PlanProgress(enabled)
        try:
            verified = plan.verify(ranked, count, args.jobs, progress=progress)
        finally:
            progress.close()
        for line in plan.verification_lines(verified, options.network):
            _out(line)
        return verified


def _plan_options(args: argparse.Namespace) -> Any:
    """The :class:`clustersim.plan.PlanOptions` of the flags (errors name the flag)."""
    from . import plan

    return plan.PlanOptions(
        devices=args.devices,
        tp=plan.parse_counts(args.tp, "--tp") if args.tp else None,
        pp=plan.parse_counts(args.pp, "--pp") if args.pp else None,
        micro_batch=plan.parse_counts(args.micro_batch, "--micro-batch"),
        zero=plan.parse_zero_stages(args.zero),
        network=args.network,
        iterations=args.iterations,
        all_replicas=args.all_replicas,
    )


def _print_plan_header(found: Any, options: Any) -> None:
    """What is planned, on what, how it is simulated, and what was left out and why."""
    from . import plan

    space = found.space
    model = (
        f"transformer of {space.blocks} blocks, {space.heads} heads"
        if space.is_transformer
        else f"{space.blocks} layers (not a transformer: tp = 1)"
    )
    node = f", {space.gpus_per_node} per node" if space.gpus_per_node else ""
    _out(
        f"plan {found.doc['name']}: {space.devices} GPUs{node}; model {model}; "
        f"global batch {space.global_batch}"
    )
    _out(
        f"network {options.network}: {plan.NETWORK_NOTES[options.network]}; "
        f"{options.iterations} iteration(s) per configuration"
    )
    if not options.all_replicas and not found.doc.get("stragglers"):
        _out(
            "replicas: data-parallel replica 0 simulated for all (identical replicas); "
            "--all-replicas simulates every one"
        )
    for note in found.notes:
        _out(f"note: {note}")
    if found.skipped:
        _out(f"skipped {found.skipped_count}:")
        reasons = list(found.skipped.items())
        for reason, count in reasons[:_PLAN_REASONS]:
            _out(f"  {count} x {reason}")
        if len(reasons) > _PLAN_REASONS:
            rest = sum(count for _, count in reasons[_PLAN_REASONS:])
            _out(f"  {rest} more, for {len(reasons) - _PLAN_REASONS} other reason(s)")


_PLAN_REASONS = 8
"""Distinct skip reasons printed; the others are counted in one line."""


class _PlanProgress:
    """``planning [=====>    ] 37/120, 1m12s left`` on stderr, updated as runs finish."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.width = 0
        """Characters of the longest line shown (to clear it)."""

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        from .plan import progress_line

        line = "  " + progress_line(done, total, time.monotonic() - self.started)
        self.width = max(self.width, len(line))
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()

    def close(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


class ReportCommand(Command):
    name = "report"
    help = "redraw the Gantt chart and write report.html from a finished run folder"
    description = (
        "Read DIR/summary.json, DIR/timeline.csv and DIR/links.csv of a finished run (nothing "
        "is simulated again), redraw DIR/gantt.png and DIR/gantt.svg and write DIR/report.html: "
        "summary table, per-device breakdown, Gantt chart, activation memory and link "
        "utilisation plots. A missing or unreadable file exits 2 naming it."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_dir", metavar="DIR", help="output folder of `clustersim run`")

    def run(self, args: argparse.Namespace) -> int:
        from .report import write_report

        written = write_report(args.run_dir)
        _out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK


class GoldenCommand(Command):
    name = "golden"
    help = "record scenarios' key timings as golden files, or check runs against them"
    description = (
        "`golden record SCENARIO... --dir DIR` runs each scenario and writes DIR/<path with / "
        "as __>.json: iteration time, throughput, bubble fraction, collective times, peak "
        "activation memory, per-device breakdown and busiest link, with the clustersim version "
        "and the scenario file's SHA-256. `golden check SCENARIO... --dir DIR [--rtol 0.01]` "
        "runs them again and prints metric, golden, now and relative change; exit 1 if any "
        "metric moved beyond its tolerance (per-metric globs in the file's `tolerances`), 2 on "
        "bad input. Without SCENARIO, check takes every golden file's `scenario_file`."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="golden_action", metavar="ACTION")
        sub.required = True
        record = sub.add_parser("record", help="run scenarios and write their golden files")
        check = sub.add_parser("check", help="run scenarios and compare with their golden files")
        record.add_argument("scenarios", metavar="SCENARIO", nargs="+", help="scenario YAML files")
        check.add_argument(
            "scenarios",
            metavar="SCENARIO",
            nargs="*",
            help="scenario YAML files (default: the scenario_file of every golden in DIR)",
        )
        for p in (record, check):
            p.add_argument(
                "--dir",
                default="tests/golden",
                metavar="DIR",
                help="folder of golden files (default: tests/golden)",
            )
            p.add_argument(
                "-j", "--jobs", type=int, metavar="N", help="simulations at once (default: cores)"
            )
        record.add_argument(
            "--rtol", type=float, help="default relative tolerance written into the files (0.01)"
        )
        check.add_argument(
            "--rtol",
            type=float,
            help="relative tolerance of metrics the file names no tolerance for "
            "(default: the file's rtol, 0.01)",
        )
        check.add_argument(
            "-v", "--verbose", action="store_true", help="show every metric, per device too"
        )

    def run(self, args: argparse.Namespace) -> int:
        from . import golden
        from .errors import Problem, ScenarioError

        if args.jobs is not None and args.jobs < 1:
            raise ScenarioError(Problem("-j", f"expected a whole number >= 1, got {args.jobs}"))
        if args.golden_action == "record":
            written = golden.record(args.scenarios, args.dir, args.rtol, args.jobs)
            _out(f"recorded {len(written)} golden file(s): {', '.join(str(p) for p in written)}")
            return EXIT_OK
        scenarios = args.scenarios or _golden_scenarios(args.dir)
        reports = golden.check(scenarios, args.dir, args.rtol, args.jobs)
        for report in reports:
            _print_golden_report(report, args.verbose)
        failed = [r for r in reports if not r.passed]
        _out(
            f"{len(failed)} of {len(reports)} scenario(s) changed beyond tolerance"
            if failed
            else f"all {len(reports)} scenario(s) match their golden timings"
        )
        return EXIT_FAILED if failed else EXIT_OK


def _golden_scenarios(golden_dir: str) -> list[str]:
    """The ``scenario_file`` of every golden file in ``golden_dir``."""
    from . import golden

    files = list(golden.goldens_in(golden_dir))
    if not files:
        raise ClustersimError(f"{golden_dir}: no golden files (*.json) to check")
    names = [golden.load_golden(f).get("scenario_file") for f in files]
    missing = [str(f) for f, n in zip(files, names) if not isinstance(n, str)]
    if missing:
        raise ClustersimError(f"{missing[0]}: no scenario_file; name the scenarios to check")
    return names


def _print_golden_report(report: Any, verbose: bool) -> None:
    """Status line, notes and the metric table (timings and failures; every row if verbose)."""
    from .golden import report_lines

    for line in report_lines(report, all_rows=verbose):
        _out(line)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every registered command."""
    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Discrete-event simulator of distributed deep-learning training clusters.",
        epilog="Bad input exits with code 2 and a message naming the file, the key path and what is allowed.",
    )
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, cls in _COMMANDS.items():
        p = sub.add_parser(name, help=cls.help, description=cls.description or cls.help)
        p.set_defaults(_command=cls)
        cls().add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args._command().run(args)
    except SimulationError as exc:
        print(f"clustersim: simulation error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ClustersimError as exc:
        print(
            f"clustersim: error: {exc}" if "\n" not in str(exc) else f"clustersim: error:\n{exc}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
