"""``clustersim list``: what is registered, from :func:`clustersim.registry.all_registries`
(strategies, collective algorithms, model presets, fabrics, network models, pipeline
schedules, tensor-parallel modes, compute models, the hardware catalog's GPUs and nodes, and
the commands themselves)."""

from __future__ import annotations

import argparse

from ..registry import REGISTRIES, all_registries
from .base import EXIT_OK, Command, out


class ListCommand(Command):
    name = "list"
    order = 40
    help = (
        "list registered plugins (strategies, collective algorithms, model presets, fabrics, "
        "network models, ...), the hardware catalog (gpus, nodes) or commands"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("what", choices=sorted(all_registries()), help="what to list")

    def run(self, args: argparse.Namespace) -> int:
        for line in REGISTRIES[args.what].lines():
            out(line)
        return EXIT_OK
