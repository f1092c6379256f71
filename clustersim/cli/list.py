"""``clustersim list``: what is registered (strategies, collective algorithms, model
presets) and the commands themselves (from :attr:`Command.registry`)."""

from __future__ import annotations

import argparse

from .base import EXIT_OK, Command, out


class ListCommand(Command):
    name = "list"
    order = 40
    help = "list registered plugins (strategies, collective algorithms, model presets) or commands"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "what",
            choices=["strategies", "algorithms", "models", "commands"],
            help="what to list",
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.what == "algorithms":
            from ..collectives import registered_algorithms

            for name, cls in registered_algorithms().items():
                ops = ", ".join(sorted(cls.ops))
                out(f"{name:<20} {cls.description or cls.__doc__.splitlines()[0]} [{ops}]")
            return EXIT_OK
        if args.what == "models":
            from ..models import registered_presets

            for name, found in registered_presets().items():
                model = found.build()
                out(
                    f"{name:<16} {model.params / 1e6:>9.1f} M params  "
                    f"{model.forward_flops / 1e9:>9.2f} GFLOPs/sample forward  {found.description}"
                )
            return EXIT_OK
        if args.what == "commands":
            for line in Command.registry.lines():
                out(line)
            return EXIT_OK
        from ..strategies import registered_strategies

        for name, cls in registered_strategies().items():
            out(f"{name:<12} {cls.description}")
        return EXIT_OK
