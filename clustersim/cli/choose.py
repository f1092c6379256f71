"""``clustersim choose``: one training workload on several candidate clusters, each searched
by plan, compared on cost and time to train; the work is :mod:`clustersim.studies.choose`'s."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ClustersimError, Problem, ScenarioError
from .base import EXIT_FAILED, EXIT_OK, Command, add_candidate_arguments, out
from .overrides import override_settings
from .progress import QUIET_HELP, Progress, add_progress_argument, wanted


class ChooseCommand(Command):
    name = "choose"
    order = 75
    help = "compare candidate clusters for one training workload on cost and time to train"
    description = (
        "Read the candidates file CANDIDATES (a training workload, the tokens to train, and "
        "the clusters to choose between with their GPU-hour prices and optionally GPU power; "
        "docs/choose.md), run plan's search on every cluster (all simulations in parallel on "
        "local cores or a Dask cluster: --scheduler), take each cluster's best configuration "
        "that fits in memory, and print one row per cluster, cheapest first: GPUs, layout, "
        "iteration time, tokens/s, days to train, GPU-hours, cost, energy, and whether it is "
        "Pareto-optimal (no other cluster both as cheap or cheaper and as fast or faster); then "
        "the cheapest, the fastest and what the cheapest saves. The search flags override the "
        "file's search: key by key. -o DIR writes DIR/choose.csv, DIR/choose.md, "
        "DIR/frontier.png, DIR/frontier.svg and DIR/plans/NAME.csv (DIR checked before "
        "simulating, replaced as a unit). Exit 2 on bad input or when no cluster has a valid "
        "configuration, 1 when every simulation failed."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
        parser.add_argument(
            "candidates", metavar="CANDIDATES", help="candidates file (YAML; docs/choose.md)"
        )
        search = parser.add_argument_group(
            "what to search (each overrides the file's search: key; default plan's)"
        )
        search.add_argument("--tp", metavar="LIST", help="tensor-parallel degrees, e.g. 4,8")
        search.add_argument("--pp", metavar="LIST", help="pipeline stages, e.g. 2,4,8")
        search.add_argument("--micro-batch", metavar="LIST", help="samples per micro-batch")
        search.add_argument("--zero", metavar="LIST", help="ZeRO stages 0-3 (fsdp = 3)")
        search.add_argument("--chunks", metavar="LIST", help="model chunks per device")
        search.add_argument(
            "--tokens",
            metavar="COUNT",
            help="tokens to train, e.g. 2T or 5e11 (default: the file's tokens, else the "
            "workload's training.tokens)",
        )
        run = parser.add_argument_group("how to simulate")
        run.add_argument(
            "--set",
            dest="settings",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="change a key of the workload before the clusters go in: a dotted key path "
            "and one YAML scalar, e.g. training.global_batch=2048; cluster keys are refused "
            "(each candidate's cluster replaces the workload's); repeat for several keys",
        )
        add_candidate_arguments(run, jobs=", over every cluster's configurations")
        output = parser.add_argument_group("output")
        output.add_argument(
            "-o",
            "--output",
            metavar="DIR",
            help="write choose.csv, choose.md, frontier.png, frontier.svg and plans/NAME.csv "
            "into DIR, replaced as a whole; refused if it holds files clustersim does not write",
        )
        add_progress_argument(output)

    def run(self, args: argparse.Namespace) -> int:
        from ..outputs.paths import check_output_folder
        from ..scenario.overrides import NETWORK_KEY
        from ..studies import choose, plan
        from ..studies.dask_runner import check_scheduler

        if args.output is not None:
            check_output_folder(args.output, "-o")
        for flag, value in (("-j", args.jobs), ("--iterations", args.iterations)):
            plan.check_count(value, flag)
        check_scheduler(args.scheduler, args.jobs)
        settings = override_settings(args, source=args.candidates)
        network = [s.values[0] for s in settings if s.key == NETWORK_KEY]
        flags = _search_flags(args)
        choices = choose.load_choices(args.candidates, settings)
        if args.tokens is not None:
            choices = _with_tokens(choices, args.tokens)
        options = choose.plan_options(
            choices.spec.search,
            **flags,
            network=network[0] if network else None,
            iterations=args.iterations,
            all_replicas=args.all_replicas,
            max_events=args.max_events,
            max_memory=args.max_memory,
        )
        found = choose.enumerate_clusters(choices, options)
        _print_header(choices, found, options)
        total = sum(len(f.candidates) for f in found)
        if not total:
            raise ClustersimError(
                f"{args.candidates}: no cluster has a valid configuration to simulate (see the "
                "reasons above); try other search values (--tp, --pp, --micro-batch, --zero)"
            )
        out(f"simulating {total} configuration(s) on {len(found)} cluster(s)")
        progress = Progress(wanted(args.quiet, args.progress), "choosing", "configuration")
        try:
            ranked = choose.run_clusters(found, args.jobs, progress, args.scheduler)
        finally:
            progress.close()
        results = choose.results(choices, found, ranked)
        currency = choices.spec.currency
        for line in choose.format_table(results, currency):
            out(line)
        verdict = choose.verdict(results, currency)
        out(verdict)
        if args.output is not None:
            title = _title(choices)
            notes = [verdict, "", *_context(choices, options)]
            written = choose.write_outputs(results, args.output, title, notes, currency, "-o")
            shown = [str(p) for p in written if p.parent.name != "plans"]
            out(f"wrote {', '.join(shown)} and {len(written) - len(shown)} plan table(s)")
        ran = any(o.ok for r in ranked for o in r)
        return EXIT_OK if ran else EXIT_FAILED


def _title(choices: Any) -> str:
    """``choose: NAME: WORKLOAD, 2T tokens``: the title of choose.md and the plot."""
    from ..studies.choose.tables import count_text

    return f"choose: {choices.title}: {choices.workload_name}, {count_text(choices.tokens)} tokens"


def _search_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The search flags given, parsed (errors name the flag); None for those not given."""
    from ..studies import plan

    def counts(text: str | None, flag: str) -> tuple[int, ...] | None:
        return plan.parse_counts(text, flag) if text is not None else None

    return {
        "tp": counts(args.tp, "--tp"),
        "pp": counts(args.pp, "--pp"),
        "micro_batch": counts(args.micro_batch, "--micro-batch"),
        "zero": plan.parse_zero_stages(args.zero) if args.zero is not None else None,
        "chunks": counts(args.chunks, "--chunks"),
    }


def _with_tokens(choices: Any, text: str) -> Any:
    """``choices`` training ``--tokens`` instead (a ScenarioError naming the flag if bad)."""
    from dataclasses import replace

    from ..scenario.fields import parse_large_count
    from ..units import UnitError

    try:
        tokens = parse_large_count(text)
    except UnitError as exc:
        raise ScenarioError(Problem("--tokens", exc.message, exc.allowed)) from None
    return replace(choices, tokens=tokens)


def _context(choices: Any, options: Any) -> list[str]:
    """What was compared and how: the workload and its tokens, the network model."""
    from ..resilience import iterations_for
    from ..studies import plan
    from ..studies.choose.tables import count_text

    iterations = iterations_for(choices.tokens, choices.tokens_per_iteration)
    return [
        f"workload {choices.workload_name} ({choices.workload_source}): "
        f"{count_text(choices.tokens)} tokens, {iterations:,} iterations of "
        f"{choices.tokens_per_iteration:,.0f} tokens",
        f"network {options.network}: {plan.network_note(options.network)}; "
        f"{options.iterations} iteration(s) per configuration",
    ]


def _print_header(choices: Any, found: Any, options: Any) -> None:
    """What is compared, how, and each cluster's configurations (and what was left out)."""
    from ..studies import choose

    out(f"choose {choices.title}: {len(choices.options)} cluster(s)")
    for line in _context(choices, options):
        out(line)
    for option, f in zip(choices.options, found):
        types = choose.types_text(option.gpu_types).replace(";", ", ")
        skipped = f"; skipped {f.skipped_count}" if f.skipped else ""
        out(
            f"  {option.name}: {option.gpus:,} GPUs ({types}); "
            f"{len(f.candidates)} configuration(s){skipped}"
        )
        for note in f.notes:
            out(f"    note: {note}")
        for reason, count in list(f.skipped.items())[:_REASONS]:
            out(f"    {count} x {reason}")


_REASONS = 3
"""Skip reasons printed per cluster."""
