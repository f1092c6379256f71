"""``clustersim plan``: search the parallel configurations of a training scenario and
print them ranked; the search, the runs and the files are :mod:`clustersim.studies.plan`'s."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ClustersimError
from .base import EXIT_FAILED, EXIT_OK, Command, add_candidate_arguments, out
from .overrides import add_override_arguments, override_settings
from .progress import QUIET_HELP, Progress, add_progress_argument, wanted


class PlanCommand(Command):
    name = "plan"
    order = 70
    help = "search dp x tp x pp x micro-batch x ZeRO x chunks configurations of a training scenario"
    description = (
        "Enumerate the parallel configurations (dp, tp, pp, micro_batch, zero, chunks) of the "
        "training SCENARIO on --devices GPUs, check each with the scenario's strategy, simulate "
        "them in parallel on local cores (or a Dask cluster: --scheduler) and print them ranked by "
        "throughput (--set KEY=VALUE changes the scenario first, as in clustersim run), with "
        "peak memory per device and whether it fits; then the best configuration that fits. "
        "-o DIR writes DIR/plan.csv, DIR/plan.md, DIR/plan.png and DIR/plan.svg (DIR checked "
        "before simulating, replaced as a unit). Exit 2 on bad input or when no "
        "configuration is valid, 1 when every simulation failed."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
        from ..studies.plan import DEFAULT_MICRO_BATCHES, DEFAULT_ZERO_STAGES, VERIFY_NETWORKS

        micro_batches = ",".join(map(str, DEFAULT_MICRO_BATCHES))
        zero = ",".join(map(str, DEFAULT_ZERO_STAGES))
        parser.add_argument("scenario", metavar="SCENARIO", help="training scenario YAML file")
        search = parser.add_argument_group("what to search")
        search.add_argument(
            "--devices",
            type=int,
            metavar="N",
            help="GPUs to plan for, at least 1; resizes the cluster (default: the scenario's)",
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
        search.add_argument(
            "--chunks",
            metavar="LIST",
            help="model chunks per device: 1 runs the scenario's schedule (1f1b by default), "
            "more the interleaved schedule where pp > 1 (default: 1,2 and the scenario's own)",
        )
        run = parser.add_argument_group("how to simulate")
        add_override_arguments(run, network=False)
        add_candidate_arguments(run)
        run.add_argument(
            "--verify",
            type=int,
            metavar="K",
            help="simulate the best K (at least 1) again, every replica, with the network "
            "model --verify-network says, and show both iteration times and both rankings "
            "side by side",
        )
        run.add_argument(
            "--verify-network",
            choices=VERIFY_NETWORKS,
            default="auto",
            help="network model of --verify's runs: flow (the flow-level model, per send) or "
            "analytical (congestion-aware; one replica of each class of identical ones "
            "played for all from 4,096 GPUs); auto: flow below 4,096 GPUs, analytical from "
            "there, where every replica at flow level is tens of millions of sends "
            "(default: auto)",
        )
        out = parser.add_argument_group("output")
        out.add_argument(
            "--top", type=int, metavar="K", help="print only the first K rows (K at least 1)"
        )
        out.add_argument(
            "--fit-only", action="store_true", help="leave out configurations that do not fit"
        )
        out.add_argument(
            "-o",
            "--output",
            metavar="DIR",
            help="write plan.csv, plan.md, plan.png, plan.svg into DIR, replaced as a whole; "
            "refused if it holds files clustersim does not write",
        )
        add_progress_argument(out)

    def run(self, args: argparse.Namespace) -> int:
        from ..outputs.paths import check_output_folder
        from ..studies import plan
        from ..studies.dask_runner import check_scheduler

        if args.output is not None:
            check_output_folder(args.output, "-o")
        for flag, value in (("-j", args.jobs), ("--top", args.top), ("--verify", args.verify)):
            plan.check_count(value, flag)
        from ..scenario.overrides import NETWORK_KEY, described

        check_scheduler(args.scheduler, args.jobs)
        settings = override_settings(args, source=args.scenario)
        doc = plan.load_training_document(args.scenario, settings)
        network = [s.values[0] for s in settings if s.key == NETWORK_KEY]
        options = _plan_options(args, network[0] if network else plan.DEFAULT_NETWORK)
        source = described(args.scenario, [s.text() for s in settings])
        checking = Progress(wanted(args.quiet, args.progress), "checking", "configuration")
        try:
            found = plan.enumerate_candidates(doc, source, options, checking)
        finally:
            checking.close()
        _print_plan_header(found, options)
        if not found.candidates:
            raise ClustersimError(
                f"{args.scenario}: no valid configuration to simulate (see the reasons above); "
                "try other --devices, --tp, --pp, --micro-batch or --zero values (or a higher "
                "--max-events or --max-memory, if they were over the work or memory limit)"
            )
        out(f"simulating {len(found.candidates)} configuration(s)")
        ranked = plan.rank(_simulate(args, found.candidates))
        rows = plan.shown(ranked, args.fit_only, args.top)
        for line in plan.format_table(rows) if rows else ["(no configuration fits)"]:
            out(line)
        verdict = plan.verdict(ranked, options, plan.recompute_of(found.doc))
        out(verdict)
        gains = self._mixed_gains(args, found, source, options, ranked)
        devices = found.space.devices
        verified = self._verify(args, ranked, options, devices) if args.verify else []
        if args.output is not None:
            title = f"plan: {found.doc['name']} on {found.space.devices} GPUs"
            network = f"network {options.network}: {plan.network_note(options.network)}"
            notes = [verdict, "", *gains, *([""] if gains else []), network]
            if verified:
                notes += ["", "```", *plan.verification_lines(verified, options.network), "```"]
            written = plan.write_outputs(ranked, args.output, title, notes, verified, flag="-o")
            out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK if any(o.ok for o in ranked) else EXIT_FAILED

    @staticmethod
    def _mixed_gains(
        args: argparse.Namespace, found: Any, source: str, options: Any, ranked: Any
    ) -> list[str]:
        """On a mixed cluster: plan the fastest type's nodes alone too, and print what the
        best layout gains over them and over the best naive even split."""
        from ..studies import plan
        from ..studies.plan import mixed

        fast = mixed.fast_only_of(found.doc, source)
        if fast is None:
            return []
        fast_ranked: list[Any] = []
        if fast.doc is not None:
            alone = plan.enumerate_candidates(
                fast.doc, f"{source} ({fast.gpu_type} alone)", options
            )
            out(
                f"planning the {fast.gpu_type} nodes alone: {len(alone.candidates)} configuration(s)"
            )
            fast_ranked = plan.rank(_simulate(args, alone.candidates))
        lines = mixed.gain_lines(ranked, fast, fast_ranked)
        for line in lines:
            out(line)
        return lines

    @staticmethod
    def _verify(args: argparse.Namespace, ranked: Any, options: Any, devices: int) -> list[Any]:
        """Re-simulate the best ``--verify`` configurations every replica (flow-level, or the
        analytical network on ``devices`` GPUs from 4,096 under auto); print both times."""
        from ..studies import plan

        count = min(args.verify, sum(o.ok for o in ranked))
        if not count:
            return []
        network = plan.verify_network(args.verify_network, devices)
        if network == "flow":
            out(f"verifying the best {count} with the flow-level model, every replica")
        else:
            why = (
                f" (auto at {devices:,} GPUs: flow level every replica would be tens of "
                "millions of sends; --verify-network flow forces it)"
                if args.verify_network == "auto"
                else ""
            )
            out(f"verifying the best {count} every replica with the {network} network{why}")
        progress = Progress(wanted(args.quiet, args.progress), "planning", "configuration")
        try:
            verified = plan.verify(ranked, count, args.jobs, progress, args.scheduler, network)
        finally:
            progress.close()
        for line in plan.verification_lines(verified, options.network):
            out(line)
        return verified


def _simulate(args: argparse.Namespace, candidates: Any) -> list[Any]:
    """Each candidate's outcome, simulated as the flags say (-j or --scheduler), with a
    progress bar."""
    from ..studies import plan

    progress = Progress(wanted(args.quiet, args.progress), "planning", "configuration")
    try:
        return plan.run_candidates(candidates, args.jobs, progress, args.scheduler)
    finally:
        progress.close()


def _plan_options(args: argparse.Namespace, network: str) -> Any:
    """The :class:`clustersim.studies.plan.PlanOptions` of the flags (errors name the flag);
    ``network``: the candidates' network model (``--network``, ``--set network.model``)."""
    from ..studies import plan

    return plan.PlanOptions(
        devices=args.devices,
        tp=plan.parse_counts(args.tp, "--tp") if args.tp else None,
        pp=plan.parse_counts(args.pp, "--pp") if args.pp else None,
        micro_batch=plan.parse_counts(args.micro_batch, "--micro-batch"),
        zero=plan.parse_zero_stages(args.zero),
        chunks=plan.parse_counts(args.chunks, "--chunks") if args.chunks else None,
        network=network,
        iterations=args.iterations,
        all_replicas=args.all_replicas,
        max_events=args.max_events,
        max_memory=args.max_memory,
    )


def _print_plan_header(found: Any, options: Any) -> None:
    """What is planned, on what, how it is simulated, and what was left out and why."""
    from ..studies import plan

    space = found.space
    model = (
        f"transformer of {space.blocks} blocks, {space.heads} heads"
        if space.is_transformer
        else f"{space.blocks} layers (not a transformer: tp = 1)"
    )
    node = f", {space.gpus_per_node} per node" if space.gpus_per_node else ""
    out(
        f"plan {found.doc['name']}: {space.devices} GPUs{node}; model {model}; "
        f"global batch {space.global_batch}"
    )
    out(
        f"network {options.network}: {plan.network_note(options.network)}; "
        f"{options.iterations} iteration(s) per configuration"
    )
    if found.gpu_types:
        from ..topology.graph import gpu_mix

        out(
            f"mixed cluster: {gpu_mix(found.gpu_types)} GPUs; every configuration tried with "
            "the types placed evenly, by replica and by stage; one replica of each class of "
            "alike replicas simulated"
        )
    elif not options.all_replicas and not found.doc.get("stragglers"):
        out(
            "replicas: data-parallel replica 0 simulated for all (identical replicas); "
            "--all-replicas simulates every one"
        )
    for note in found.notes:
        out(f"note: {note}")
    if found.skipped:
        out(f"skipped {found.skipped_count}:")
        reasons = list(found.skipped.items())
        for reason, count in reasons[:_PLAN_REASONS]:
            out(f"  {count} x {reason}")
        if len(reasons) > _PLAN_REASONS:
            rest = sum(count for _, count in reasons[_PLAN_REASONS:])
            out(f"  {rest} more, for {len(reasons) - _PLAN_REASONS} other reason(s)")


_PLAN_REASONS = 8
"""Distinct skip reasons printed; the others are counted in one line."""
