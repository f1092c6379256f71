"""``--set KEY=VALUE`` and ``--network`` of run, plan, golden record and compare: their
flags and the settings they make (:mod:`clustersim.scenario.overrides`)."""

from __future__ import annotations

import argparse

SET_HELP = (
    "set a scenario key without editing the file: a dotted key path with [i] indices (any key the "
    "scenario format allows, created if the file lacks it) and one YAML scalar, e.g. "
    "training.iterations=2 or cluster.link.bandwidth=50GB/s; repeat for several keys"
)
SWEEP_HELP = (
    "dotted key path with [i] indices (any key the scenario format allows, created if the "
    "file lacks it) and the values to sweep (YAML scalars), e.g. "
    "cluster.rack_uplink.oversubscription=1,2,4,8; repeat for a grid"
)


def add_override_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    sweep: bool = False,
    network: bool = True,
) -> None:
    """``--set`` (one value per key, or several to sweep) and the ``--network`` shortcut
    (its choices: the network-model registry's names, the one list of models)."""
    from ..collectives.models import NetworkModel

    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=V1,V2,..." if sweep else "KEY=VALUE",
        help=SWEEP_HELP if sweep else SET_HELP,
    )
    if network:
        parser.add_argument(
            "--network",
            choices=NetworkModel.registry.names(),
            help="network model, short for --set network.model=MODEL",
        )


def override_settings(args: argparse.Namespace, sweep: bool = False, source: str = "") -> list:
    """The :class:`~clustersim.scenario.overrides.Setting` of every ``--set`` and of
    ``--network``, in that order; a key given twice is an error (naming ``source``, the
    scenario file, when given)."""
    from ..errors import ScenarioError
    from ..scenario.overrides import check_unique, network_setting, parse_set

    try:
        settings = [parse_set(text, sweep) for text in args.settings]
        if getattr(args, "network", None) is not None:
            settings.append(network_setting(args.network))
        check_unique(settings)
    except ScenarioError as exc:
        raise exc.with_source(source) if source else exc from None
    return settings
