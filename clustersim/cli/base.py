"""What every command shares: the :class:`Command` base and its registry, the exit
codes, printing, a progress count on stderr and the parser built from the registry.

Command modules import this one and never each other.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, ClassVar

from ..registry import Registered, Registry
from ..version import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def _command_line(name: str, command: type[Command]) -> str:
    """The line of ``clustersim list commands``."""
    return f"{name:<12} {command.help}"


class Command(Registered):
    """A subcommand: ``name``, one-line ``help``, its arguments and ``run``.

    A subclass that defines ``name`` registers itself in :attr:`registry`.
    """

    registry: ClassVar[Registry[type[Command]]] = Registry(
        "commands", "command", sort=True, describe=_command_line
    )
    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str] = ""
    order: ClassVar[int] = 100
    """Place in ``clustersim --help``, lowest first (commands of equal order go by name)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments to ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit code."""
        raise NotImplementedError


def event_count(text: str) -> int:
    """``--max-events`` as a number: a whole number >= 1, written ``200000000``,
    ``200_000_000`` or ``2e8``."""
    try:
        value = float(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = float("nan")
    if not (value >= 1 and value.is_integer() and value < 1e18):
        raise argparse.ArgumentTypeError(
            f"expected a whole number of events >= 1 (e.g. 200000000 or 2e8), got {text!r}"
        )
    return int(value)


def memory_size(text: str) -> float:
    """``--max-memory`` as bytes: a size above 0 with a unit (``8GB``, ``512MiB``) or a
    plain number of bytes."""
    from ..units import UnitError, parse_size

    try:
        value = float(text.replace("_", ""))  # plain bytes: 8e9, 8_000_000_000
    except ValueError:
        try:
            value = parse_size(text)
        except UnitError:
            value = float("nan")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(
            f"expected a size of memory above 0 (e.g. 8GB, 512MiB or 8e9), got {text!r}"
        )
    return value


def add_limit_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The ``--max-events N`` and ``--max-memory SIZE`` flags of the commands that simulate."""
    from ..budget import DEFAULT_MAX_EVENTS, DEFAULT_MEMORY_FRACTION

    parser.add_argument(
        "--max-events",
        type=event_count,
        metavar="N",
        help="work limit of each simulation in events (transfers + timeline records): a run "
        "estimated above it is refused (exit 2) before it starts; overrides the scenario's "
        f"engine.max_events (default {DEFAULT_MAX_EVENTS:,})",
    )
    parser.add_argument(
        "--max-memory",
        type=memory_size,
        metavar="SIZE",
        help="memory limit of each simulation (the simulator process's peak, e.g. 8GB): a run "
        "estimated above it is refused (exit 2) before it starts; overrides the scenario's "
        f"engine.max_memory (default {DEFAULT_MEMORY_FRACTION:.0%}% of this machine's memory)",
    )


def add_candidate_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, jobs: str = ""
) -> None:
    """How plan's candidates are simulated (``plan``, ``choose``): ``--network``,
    ``--iterations K``, ``--all-replicas``, ``-j J`` (``jobs``: what the simulations run at
    once span, for its help), ``--scheduler`` and the work and memory limits."""
    from ..collectives.models import NetworkModel

    parser.add_argument(
        "--network",
        choices=NetworkModel.registry.names(),
        help="network.model of every candidate, short for --set network.model=MODEL "
        "(default: analytical, congestion-aware)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=1,
        metavar="K",
        help="iterations per candidate, at least 1 (default: 1)",
    )
    parser.add_argument(
        "--all-replicas",
        action="store_true",
        help="simulate every data-parallel replica (default: replica 0 stands for all, "
        "data-parallel collectives priced analytically, unless there are stragglers or the "
        "cluster is mixed)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="J",
        help=f"simulations at once{jobs}, at least 1 (default: cores)",
    )
    add_scheduler_argument(parser)
    add_limit_arguments(parser)


def add_scheduler_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The ``--scheduler ADDRESS`` flag of the commands that run many simulations."""
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the simulations on a Dask cluster instead of local processes (not with -j): "
        "local:N starts N worker processes here; tcp://HOST:PORT or HOST:PORT connects to a "
        "running `dask scheduler`, whose workers need this clustersim version installed "
        "(scenarios are sent as data: no shared files); exit 2 if it cannot be reached "
        "within 10 s",
    )


def nic_transport_phrase(scenario: Any) -> str:
    """The cluster's NIC transport in words when it is not RDMA (empty otherwise, and for
    clusters without nodes)."""
    nic = getattr(getattr(getattr(scenario, "cluster", None), "node", None), "nic", None)
    phrase = getattr(nic, "transport_phrase", None)
    return phrase() if phrase is not None else ""


def gpu_types_phrase(topology: Any) -> str:
    """The GPUs of a mixed cluster by type in words (``mixed: 32 x a100-sxm4-80gb + 16 x
    h100-sxm5-80gb GPUs``); empty when they are of one type."""
    types = topology.describe().get("gpu_types")
    from ..topology.graph import gpu_mix

    return f"mixed: {gpu_mix(types)} GPUs" if types else ""


def out(text: str = "") -> None:
    """Print a line of the command's output on stdout, at once."""
    print(text, flush=True)


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
    commands = sorted(Command.registry.entries().items(), key=lambda item: item[1].order)
    for name, cls in commands:
        p = sub.add_parser(name, help=cls.help, description=cls.description or cls.help)
        p.set_defaults(_command=cls)
        cls().add_arguments(p)
    return parser
