"""Reference pages of the documentation site, generated from the code.

:mod:`.scenario_keys` turns the scenario schema into the scenario reference,
:mod:`.cli_pages` the argument parser into the command-line reference; :mod:`.site` is the
MkDocs hook that writes both into the site as it is built (``make docs``), so no table is
written by hand.
"""

from __future__ import annotations
