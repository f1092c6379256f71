"""The output-mode flags of the commands that write a run folder (``clustersim run``)."""

from __future__ import annotations

import argparse

from ..outputs.modes import (
    FOLD_AT,
    LINK_CHOICES,
    ROW_CHOICES,
    SUMMARY_CHOICES,
    TIMELINE_FORMATS,
    OutputModes,
)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--trace``, ``--timeline``, ``--timeline-rows``, ``--summary-devices``, ``--links``."""
    group = parser.add_argument_group(
        "output options",
        f"what the run folder holds; 'auto' folds on a cluster of {FOLD_AT:,} devices or "
        "more (the count `clustersim run` prints on its cluster line) and keeps everything "
        "below; summary.json's 'folded' block and trace.json's 'otherData' say what was folded",
    )
    group.add_argument(
        "--trace",
        choices=ROW_CHOICES,
        default="auto",
        help="trace.json's records: all of them, or one replica's (replica 0, the simulated "
        "one in one-replica mode; for a workload without replicas, one device of each set "
        "whose records are identical, as the Gantt chart folds), its threads named "
        "'DEVICE x N' (default: auto)",
    )
    group.add_argument(
        "--timeline",
        choices=TIMELINE_FORMATS,
        default="csv",
        help="the timeline's format: DIR/timeline.csv, or DIR/timeline.parquet (the same "
        "columns, zstd-compressed; pandas.read_parquet gives the DataFrame pandas.read_csv "
        "gives for the CSV) (default: csv)",
    )
    group.add_argument(
        "--timeline-rows",
        choices=ROW_CHOICES,
        default="auto",
        help="the timeline's records: all of them, or one replica's, as --trace "
        "(default: auto; every record of a large run: --timeline parquet --timeline-rows all)",
    )
    group.add_argument(
        "--summary-devices",
        choices=SUMMARY_CHOICES,
        default="auto",
        help="summary.json's per-device entries (devices, per_iteration, memory.per_device, "
        "per_device_bubble, ...): every device, or their 10 highest and 10 lowest devices "
        "by the quantity each is about (idle_s, peak_bytes, ...), every device then in "
        "DIR/devices.csv (default: auto)",
    )
    group.add_argument(
        "--links",
        choices=LINK_CHOICES,
        default="auto",
        help="links.csv: a row per link that carried traffic, or links whose rows are equal "
        "but for the name once, as the first of them, with a last column 'links' counting "
        "them (default: auto)",
    )


def output_modes(args: argparse.Namespace) -> OutputModes:
    """The :class:`~clustersim.outputs.modes.OutputModes` the flags ask for."""
    return OutputModes(
        trace=args.trace,
        timeline=args.timeline,
        timeline_rows=args.timeline_rows,
        summary_devices=args.summary_devices,
        links=args.links,
    )
