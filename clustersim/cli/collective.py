"""``clustersim collective``: time one collective over a range of sizes, nccl-tests style.

The cluster comes from ``--cluster FILE`` or from the topology flags, built by
:func:`clustersim.scenario.shorthand.flat_cluster` or
:func:`~clustersim.scenario.shorthand.two_tier_cluster` (whose defaults the flags
show and use); the sweep itself is :func:`clustersim.studies.collective_sweep.sweep`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..collectives.models import NetworkModel
from ..errors import Problem, ScenarioError
from ..scenario import shorthand
from ..scenario.node import MAX_RATIO, MIN_RATIO
from ..studies import collective_sweep
from ..units import (
    UnitError,
    format_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_time,
    require_positive,
)
from .base import EXIT_OK, Command, add_limit_arguments, out
from .progress import QUIET_NOTICE_HELP, WorkProgress, notice, wanted

_DEFAULT_TOPOLOGY = "switch"
_TWO_TIER_FLAGS = {
    "--racks": ("racks", "N", "racks, at least 1"),
    "--nodes-per-rack": ("nodes_per_rack", "N", "nodes in each rack, at least 1"),
    "--gpus-per-node": ("gpus_per_node", "N", "GPUs in each node, at least 1"),
    "--nics": ("nics", "N", "NICs in each node, 1 .. GPUs per node (8: one per GPU, DGX)"),
    "--oversubscription": (
        "oversubscription",
        "RATIO",
        "rack uplink oversubscription ratio, 1e-06 .. 1e+06",
    ),
    "--pcie": ("pcie", "BANDWIDTH", "each device's PCIe link, above 0"),
    "--nvlink": ("nvlink", "BANDWIDTH", "NVSwitch bandwidth per GPU, above 0, or none"),
}
"""Flags only two_tier takes: flag -> (keyword of ``two_tier_cluster``, metavar, help)."""
_KEYWORDS = {
    "--bandwidth": "nic_bandwidth",
    "--latency": "nic_latency",
    **{flag: keyword for flag, (keyword, _, _) in _TWO_TIER_FLAGS.items()},
}
"""Topology flag -> keyword of ``two_tier_cluster`` (whose default the flag takes)."""


class CollectiveCommand(Command):
    name = "collective"
    order = 50
    help = "time a collective over a range of sizes, nccl-tests style"
    description = (
        "Simulate one collective operation for every size and algorithm and print, per size, "
        "the time (us), algorithm bandwidth and bus bandwidth (GB/s = 1e9 bytes/s, nccl-tests "
        "definitions) of each algorithm. The cluster comes from --cluster FILE (a scenario or "
        "its cluster section) or from --devices/--topology/--bandwidth/--latency. Every point's "
        "work (events) and peak memory (its schedule built whole) are estimated before the "
        "first runs; a point over either limit, or all points together over the event limit, "
        "is refused (exit 2). A sweep estimated longer than about 10 s says so on stderr "
        "before it starts (how long, its events, and the flags that shorten it: a larger "
        "--chunk, fewer --iterations, sizes or algorithms, --model analytical), and on a "
        "terminal shows a bar of its events, moving within a point too."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_NOTICE_HELP)
        what = parser.add_argument_group("what to time")
        what.add_argument(
            "--op", required=True, help="operation: allreduce, allgather, reducescatter, ..."
        )
        what.add_argument(
            "--algorithm",
            default="auto",
            metavar="NAME|auto|all",
            help="algorithm, auto (NCCL's choice by its tuner's model), or all applicable ones "
            "(default: auto)",
        )
        what.add_argument(
            "--bytes",
            default="1MB:1GB:x4",
            metavar="SIZE|MIN:MAX:xF|MIN:MAX:+STEP",
            help="size, 0 or more (nccl-tests meaning), or range multiplied by F > 1 or "
            "stepped by STEP > 0, at most 1000 sizes (default: 1MB:1GB:x4)",
        )
        what.add_argument(
            "--group", metavar="GLOB", help="devices in the group (default: every GPU)"
        )
        what.add_argument(
            "--root",
            type=int,
            default=0,
            help="root rank, 0 .. ranks - 1, of rooted operations and the root algorithm (0)",
        )
        what.add_argument(
            "--chunk", metavar="SIZE", help="pipelining chunk, above 0 (algorithm default)"
        )
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
            choices=NetworkModel.registry.names(),
            default="flow",
            help="flow-level max-min, or congestion-aware analytical: the alpha-beta "
            "formula with link sharing (default: flow)",
        )
        what.add_argument(
            "--channels",
            default="auto",
            metavar="N|auto",
            help="run each collective as N equal slices at once, NCCL's channels, 1 .. 64, or "
            "auto: the count NCCL's topology search gives (default: auto)",
        )
        what.add_argument(
            "--protocol",
            default="auto",
            metavar="NAME",
            help="NCCL protocol priced: auto (the fastest by NCCL's tuner model), LL, LL128, "
            "Simple -- links at the bandwidth NCCL reaches on them -- or none: line rates, no "
            "protocol (default: auto)",
        )
        what.add_argument(
            "--iterations",
            type=int,
            default=1,
            help="back-to-back runs per point, at least 1; time is their mean (default: 1)",
        )
        add_limit_arguments(what)
        self._add_cluster_arguments(parser)
        output = parser.add_argument_group("output")
        output.add_argument("--json", action="store_true", help="print the rows as JSON")
        output.add_argument(
            "--csv", metavar="FILE", help="also write the rows as CSV (checked before simulating)"
        )
        output.add_argument(
            "--plot",
            metavar="FILE.png",
            help="also plot busbw against size to FILE.png and FILE.svg (checked before "
            "simulating)",
        )

    @staticmethod
    def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
        where = parser.add_argument_group("cluster")
        where.add_argument("--cluster", metavar="FILE", help="scenario or cluster-section YAML")
        where.add_argument(
            "--devices", type=int, metavar="N", help="devices of a flat topology, at least 2"
        )
        where.add_argument(
            "--topology",
            choices=list(shorthand.TOPOLOGIES),
            help=f"cluster shape (default: {_DEFAULT_TOPOLOGY})",
        )
        where.add_argument(
            "--bandwidth",
            help="each link (two_tier: each NIC), each direction, above 0 "
            f"(default: {_shown('--bandwidth')})",
        )
        where.add_argument(
            "--latency",
            metavar="TIME",
            help=f"each link (two_tier: each NIC), 0 or more (default: {_shown('--latency')})",
        )
        for flag, (_, metavar, text) in _TWO_TIER_FLAGS.items():
            where.add_argument(
                flag, metavar=metavar, help=f"two_tier: {text} (default: {_shown(flag)})"
            )

    def run(self, args: argparse.Namespace) -> int:
        from ..collectives import canonical_op
        from ..units import parse_size

        _check_bench_files(args)
        op = canonical_op(args.op, "--op")
        sizes = collective_sweep.parse_sizes(args.bytes)
        chunk = _flag_quantity(parse_size, args.chunk, "--chunk") if args.chunk else None
        scenario, where = _bench_scenario(args)
        progress = WorkProgress(wanted(args.quiet), "collective")
        try:
            rows = collective_sweep.sweep(
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
                work_progress=progress,
                announce=lambda text: notice(text, args.quiet),
                channels=_flag_channels(args.channels),
                protocol=args.protocol,
                group_flag="--group"
                if args.group
                else "--cluster"
                if args.cluster
                else "--devices",
                max_events=args.max_events,
                max_memory=args.max_memory,
            )
        finally:
            progress.close()
        devices = rows[0]["devices"] if rows else 0
        title = f"{op} on {devices} device{'' if devices == 1 else 's'}, {where}"
        if args.json:
            out(json.dumps(rows, indent=2))
        else:
            _print_bench_table(rows, f"{title}; model {args.model}, {args.iterations} iteration(s)")
            _print_pricing(args, rows, collective_sweep.link_figures(scenario, args.protocol))
        _write_bench_files(args, rows, title, note=sys.stderr if args.json else sys.stdout)
        return EXIT_OK


def _flag_channels(text: str | int) -> int | str:
    """``--channels``: ``auto``, or a whole number (its range checked by the sweep)."""
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise ScenarioError(
            Problem("--channels", f"expected auto or a whole number, got {text!r}", "auto, 1 .. 64")
        ) from None


def _default(flag: str) -> Any:
    """The value a topology flag takes when not given: ``two_tier_cluster``'s default."""
    return shorthand.TWO_TIER_DEFAULTS[_KEYWORDS[flag]]


def _shown(flag: str) -> str:
    """The default of a topology flag as its help shows it (``1``, not ``1.0``)."""
    value = _default(flag)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flag_quantity(
    parse: Callable[[Any], float], value: Any, flag: str, positive: str = ""
) -> float:
    """``value`` read by the units parser ``parse``; a ScenarioError naming ``flag`` if bad.

    ``positive``: the quantity's key (``bandwidth``) when zero is refused too, as in a
    scenario."""
    try:
        result = parse(value)
        return require_positive(result, value, positive) if positive else result
    except UnitError as exc:
        raise ScenarioError(Problem(flag, exc.message, exc.allowed)) from None


def _bench_scenario(args: argparse.Namespace) -> tuple[Any, str]:
    """The scenario to benchmark on and a phrase naming its cluster, from --cluster or the flags."""
    flat_flags = {"--devices": args.devices, "--topology": args.topology}
    flat_flags.update({"--bandwidth": args.bandwidth, "--latency": args.latency})
    tier_flags = {flag: getattr(args, _dest(flag)) for flag in _TWO_TIER_FLAGS}
    if args.cluster:
        given = [f for f, v in {**flat_flags, **tier_flags}.items() if v is not None]
        if given:
            raise ScenarioError(Problem("--cluster", f"cannot be combined with {', '.join(given)}"))
        scenario = shorthand.load_cluster(args.cluster)
        return scenario, f"{Path(args.cluster).name} ({scenario.cluster.kind})"
    kind = args.topology or _DEFAULT_TOPOLOGY
    if kind != "two_tier":
        given = [f for f, v in tier_flags.items() if v is not None]
        if given:
            raise ScenarioError(
                Problem(given[0], f"only applies to --topology two_tier, not {kind}")
            )
    cluster = _flag_cluster(args, kind)
    return shorthand.scenario_of(cluster, "collective", "command line"), _flag_phrase(cluster)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _flag_cluster(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The ``cluster:`` section the topology flags describe (units checked, errors name flags)."""

    def value(flag: str) -> Any:
        given = getattr(args, _dest(flag), None)
        return given if given is not None else _default(flag)

    bandwidth, latency = value("--bandwidth"), value("--latency")
    _flag_quantity(parse_bandwidth, bandwidth, "--bandwidth", "bandwidth")
    _flag_quantity(parse_time, latency, "--latency")
    if kind != "two_tier":
        if args.devices is None:
            raise ScenarioError(
                Problem("--devices", "missing: how many devices?", "--devices N, or --cluster FILE")
            )
        if args.devices < 1:
            raise ScenarioError(Problem("--devices", f"must be at least 1, got {args.devices}"))
        return shorthand.flat_cluster(kind, args.devices, bandwidth, latency)
    counts = {
        f: _flag_count(value(f), f)
        for f in ("--racks", "--nodes-per-rack", "--gpus-per-node", "--nics")
    }
    ratio = _flag_ratio(value("--oversubscription"))
    nvlink = value("--nvlink")
    for flag, text in (("--pcie", value("--pcie")), ("--nvlink", nvlink)):
        if not (flag == "--nvlink" and text.lower() == "none"):
            _flag_quantity(parse_bandwidth, text, flag, "bandwidth")
    total = counts["--racks"] * counts["--nodes-per-rack"] * counts["--gpus-per-node"]
    if args.devices is not None and args.devices != total:
        raise ScenarioError(
            Problem(
                "--devices",
                f"{args.devices} does not match two_tier's racks x nodes-per-rack x gpus-per-node = {total}",
                "leave --devices out, or change --racks / --nodes-per-rack / --gpus-per-node",
            )
        )
    return shorthand.two_tier_cluster(
        racks=counts["--racks"],
        nodes_per_rack=counts["--nodes-per-rack"],
        gpus_per_node=counts["--gpus-per-node"],
        nics=counts["--nics"],
        nic_bandwidth=bandwidth,
        nic_latency=latency,
        oversubscription=ratio,
        pcie=value("--pcie"),
        nvlink=None if nvlink.lower() == "none" else nvlink,
    )


def _flag_count(text: str | int, flag: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ScenarioError(Problem(flag, f"expected a whole number >= 1, got {text!r}"))
    return count


def _flag_ratio(text: str | float) -> float:
    try:
        ratio = float(text)
    except ValueError:
        ratio = float("nan")
    if not MIN_RATIO <= ratio <= MAX_RATIO:
        raise ScenarioError(
            Problem(
                "--oversubscription",
                f"expected a number from {MIN_RATIO:g} to {MAX_RATIO:g}, got {text!r}",
                "e.g. 1, 2, 4",
            )
        )
    return ratio


def _flag_phrase(cluster: dict[str, Any]) -> str:
    """Topology in words for the header and the plot title."""
    if cluster["kind"] == "two_tier":
        node = cluster["node"]
        nic = node["nic"]
        shape = f"{cluster['racks']}x{cluster['nodes_per_rack']}x{node['gpus']}"
        link = format_bandwidth(parse_bandwidth(nic["bandwidth"]))
        if node.get("nics", 1) > 1:
            link = f"{node['nics']} x {link}"
        extra = f", oversubscription {cluster['rack_uplink']['oversubscription']:g}"
        return f"topology two_tier {shape} (NIC {link}, {format_time(parse_time(nic['latency']))}{extra})"
    link = cluster["link"]
    bandwidth = format_bandwidth(parse_bandwidth(link["bandwidth"]))
    return f"topology {cluster['kind']} ({bandwidth}, {format_time(parse_time(link['latency']))} per link)"


def _print_bench_table(rows: list[dict[str, Any]], title: str) -> None:
    """One line per size; per algorithm its time (us), algbw and busbw (GB/s), as nccl-tests."""
    out(f"# {title}")
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    left = f"{'size(B)':>14} {'size':>10} {'count(f32)':>12}"
    group = f"{'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"
    width = len(group) + 2
    out(("#" + " " * (len(left) - 1) + "".join(f"  {a:^{width - 2}}" for a in algorithms)).rstrip())
    out("#" + left[1:] + "".join(f"  {group}" for _ in algorithms))
    by_point = {(r["bytes"], r["algorithm"]): r for r in rows}
    for size in dict.fromkeys(r["bytes"] for r in rows):
        line = f"{size:>14.0f} {format_size(size):>10} {size / 4:>12.0f}"
        for a in algorithms:
            r = by_point[(size, a)]
            line += (
                f"  {r['time_s'] * 1e6:>12.2f} {r['algbw_GBps']:>12.3f} {r['busbw_GBps']:>12.3f}"
            )
        out(line)
    chosen = [r for r in rows if r["chosen"] != r["algorithm"] or r["channels"] > 1]
    if chosen:
        out("# ran: " + ", ".join(f"{format_size(r['bytes'])} {_ran(r)}" for r in chosen))


def _print_pricing(args: argparse.Namespace, rows: list[dict[str, Any]], links: dict) -> None:
    """One line saying how the points were priced: protocol, channels, link bandwidths."""
    channels = sorted({r["channels"] for r in rows})
    count = "/".join(str(c) for c in channels)
    text = f"# protocol {args.protocol}, channels {args.channels}"
    if args.channels == "auto" and count:
        text += f" ({count})"
    if links:
        figures = ", ".join(f"{kind} {bw:g}" for kind, bw in links.items())
        text += f"; links at NCCL's bandwidth (GB/s): {figures}"
    elif (args.protocol or "none") != "none":
        text += "; links at their line rate (no NCCL figures for this cluster kind)"
    else:
        text += "; links at their line rate"
    out(text)


def _ran(row: dict[str, Any]) -> str:
    """What ran at one point: ``ring/Simple`` and, with several channels, ``x16``."""
    channels = row["channels"]
    return row["chosen"] + (f" x{channels}" if channels > 1 else "")


def _check_bench_files(args: argparse.Namespace) -> None:
    """--csv and --plot name files that can be written (checked before simulating)."""
    from ..outputs.figures import svg_beside
    from ..outputs.paths import check_output_file

    plots = svg_beside(args.plot) if args.plot is not None else ()
    for flag, path in (("--csv", args.csv), *(("--plot", p) for p in plots)):
        if path is not None:
            check_output_file(path, flag)


def _write_bench_files(
    args: argparse.Namespace, rows: list[dict[str, Any]], title: str, note: Any
) -> None:
    """Write --csv and --plot (folders made; each through a temporary file, then renamed)."""
    from ..errors import WriteError
    from ..outputs.atomic import write_atomic

    for path in (args.csv, args.plot):
        if path is not None:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WriteError(path, exc) from exc
    if args.csv is not None:
        path = write_atomic(Path(args.csv), collective_sweep.rows_csv(rows))
        print(f"wrote {path}", file=note, flush=True)
    if args.plot is not None:
        paths = collective_sweep.save_figure(collective_sweep.plot_figure(rows, title), args.plot)
        print(f"wrote {', '.join(str(p) for p in paths)}", file=note, flush=True)
