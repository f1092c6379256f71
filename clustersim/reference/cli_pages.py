"""The command-line reference, generated from the argument parser ``clustersim`` runs.

Each registered command (:class:`clustersim.cli.base.Command`) becomes a section: its
description, its usage line and a table of its arguments (flags, metavariable, default,
help), read from the :mod:`argparse` parser itself, so the page cannot drift from
``clustersim COMMAND --help``.
"""

from __future__ import annotations

import argparse


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _flags(action: argparse.Action) -> str:
    if action.option_strings:
        return ", ".join(f"`{flag}`" for flag in action.option_strings)
    return f"`{action.metavar or action.dest}`"


def _default(action: argparse.Action) -> str:
    if not action.option_strings or action.default in (None, argparse.SUPPRESS, False):
        return ""  # positionals, and flags off by default (store_true)
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    if action.choices is not None and not isinstance(action.choices, dict):
        text += " (one of: " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return " ".join(text.split()).replace("|", "\\|")


def command_markdown(name: str, parser: argparse.ArgumentParser, level: int = 2) -> str:
    """One command's section: heading, description, usage and arguments; then its own
    commands' sections (``golden record``), a level deeper."""
    lines = [f"{'#' * level} `clustersim {name}`", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    lines += ["```text", _usage(parser), "```", ""]
    actions = [a for a in parser._actions if a.help != argparse.SUPPRESS]  # noqa: SLF001
    actions = [
        a
        for a in actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))  # noqa: SLF001
    ]
    if actions:
        lines += ["| argument | default | what it does |", "|---|---|---|"]
        lines += [f"| {_flags(a)} | {_default(a)} | {_help(a)} |" for a in actions]
        lines.append("")
    for sub, subparser in subcommands(parser).items():
        lines.append(command_markdown(f"{name} {sub}", subparser, level + 1))
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's commands, in the order ``clustersim --help`` lists them."""
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """The whole CLI reference page."""
    head = [
        "# Command-line reference",
        "",
        "Generated from the argument parser when the site is built: every command and flag "
        "`clustersim --help` knows. Bad input exits with code 2 and a message naming the "
        "file, the key path and what is allowed.",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
    ]
    body = [command_markdown(name, p) for name, p in subcommands(parser).items()]
    return "\n".join(head) + "\n" + "\n".join(body)
