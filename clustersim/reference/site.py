"""MkDocs hook: the generated reference pages, written into the site as it is built.

``mkdocs.yml`` names this file under ``hooks``.  On every build it

* fills the markers of ``docs/scenario.md`` (``<!-- keys: SECTION -->``) with the tables
  :mod:`.scenario_keys` makes from the scenario schema, and
* adds ``cli.md``, the command-line reference :mod:`.cli_pages` makes from the parser,

so neither is written by hand nor kept in the repository.  MkDocs is imported only here,
and only when the site is built (``make docs``).
"""

from __future__ import annotations

from typing import Any

CLI_PAGE = "cli.md"
"""Where the command-line reference goes in the site."""
SCENARIO_PAGE = "scenario.md"
"""The hand-written scenario reference whose markers are filled."""


def on_files(files: Any, config: Any) -> Any:
    """Add the command-line reference page (generated, never on disk)."""
    from mkdocs.structure.files import File

    from clustersim.cli.base import build_parser
    from clustersim.reference.cli_pages import cli_markdown

    files.append(File.generated(config, CLI_PAGE, content=cli_markdown(build_parser())))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The scenario page with its key tables filled in from the schema."""
    if page.file.src_uri != SCENARIO_PAGE:
        return markdown
    from clustersim.api import json_schema
    from clustersim.reference.scenario_keys import Schema, fill_markers

    return fill_markers(markdown, Schema(json_schema()))
