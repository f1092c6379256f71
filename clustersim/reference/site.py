"""MkDocs hook: the generated pages and figures, written into the site as it is built.

``mkdocs.yml`` names this file under ``hooks``.  On every build it

* fills the markers of ``docs/scenario.md`` (``<!-- keys: SECTION -->``) with the tables
  :mod:`.scenario_keys` makes from the scenario schema,
* adds ``cli.md``, the command-line reference :mod:`.cli_pages` makes from the parser, and
* runs the commands of every page's run markers (``<!-- clustersim: ... -->``,
  :mod:`.runs`) and puts what they print and draw into the page,

so none of it is written by hand or kept in the repository.  MkDocs is imported only here,
and only when the site is built (``make docs``).
"""

from __future__ import annotations

from typing import Any

CLI_PAGE = "cli.md"
"""Where the command-line reference goes in the site."""
SCENARIO_PAGE = "scenario.md"
"""The hand-written scenario reference whose markers are filled."""

_RUNS: dict[str, list[Any]] = {}
"""Each page's played runs (page path -> runs), from :func:`on_files` to the page."""


def on_files(files: Any, config: Any) -> Any:
    """Add the command-line reference page and every run's images (generated, never on
    disk in docs/)."""
    from mkdocs.structure.files import File

    from clustersim.cli import main
    from clustersim.cli.base import build_parser
    from clustersim.reference.cli_pages import cli_markdown
    from clustersim.reference.runs import image_path, markers, play_page

    files.append(File.generated(config, CLI_PAGE, content=cli_markdown(build_parser())))
    _RUNS.clear()
    for file in list(files.documentation_pages()):
        text = file.content_string
        if not markers(text):
            continue
        runs = play_page(text, file.src_uri, main)
        _RUNS[file.src_uri] = runs
        for k, run in enumerate(runs):
            for name, content in run.files.items():
                if name.endswith((".png", ".svg")):
                    path = image_path(file.src_uri, k, name)
                    files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The scenario page with its key tables; a page with run markers with their runs."""
    from clustersim.reference.runs import rendered

    uri = page.file.src_uri
    if uri in _RUNS:
        markdown = rendered(markdown, uri, _RUNS[uri])
    if uri != SCENARIO_PAGE:
        return markdown
    from clustersim.api import json_schema
    from clustersim.reference.scenario_keys import Schema, fill_markers

    return fill_markers(markdown, Schema(json_schema()))
