"""``clustersim schema``: print the JSON Schema of scenario files."""

from __future__ import annotations

import argparse
import json

from .base import EXIT_OK, Command, out


class SchemaCommand(Command):
    name = "schema"
    order = 30
    help = "print the JSON Schema of the scenario format"
    description = (
        "Print the JSON Schema of scenario files, for editors that check and complete YAML."
    )

    def run(self, args: argparse.Namespace) -> int:
        from ..api import json_schema

        out(json.dumps(json_schema(), indent=2))
        return EXIT_OK
