"""``clustersim list``: what is registered, from :data:`clustersim.registry.REGISTRIES`
(strategies, collective algorithms, model presets, fabrics, network models, pipeline
schedules, tensor-parallel modes, compute models, the hardware catalog's GPUs and nodes, and
the commands themselves)."""

from __future__ import annotations

import argparse
import importlib

from ..registry import REGISTRIES
from .base import EXIT_OK, Command, out

REGISTERING_PACKAGES = (
    "clustersim.strategies",
    "clustersim.collectives",
    "clustersim.model",
    "clustersim.topology",
    "clustersim.network.models",
    "clustersim.parallel.schedules",
    "clustersim.parallel.tp_modes",
    "clustersim.compute",
    "clustersim.hardware",
)
"""Packages that create registries when imported (missing ones are skipped)."""


def registries() -> dict[str, object]:
    """Every registry by label, once the packages that create them are imported."""
    for name in REGISTERING_PACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return dict(REGISTRIES)


class ListCommand(Command):
    name = "list"
    order = 40
    help = (
        "list registered plugins (strategies, collective algorithms, model presets, fabrics, "
        "network models, ...), the hardware catalog (gpus, nodes) or commands"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("what", choices=sorted(registries()), help="what to list")

    def run(self, args: argparse.Namespace) -> int:
        for line in REGISTRIES[args.what].lines():
            out(line)
        return EXIT_OK
