"""Everything clustersim writes to disk, and reads back from a finished run folder.

Modules, lowest first (each imports only those before it, and nothing above
the package: not :mod:`clustersim.api`, the CLI or the studies):

* :mod:`.atomic` -- files written through a temporary name, then moved into place;
  figures saved with fixed metadata;
* :mod:`.figures` -- titles wrapped to fit the canvas, each chart as PNG and SVG;
* :mod:`.tables` -- CSV and Markdown tables, and reading CSV files back;
* :mod:`.timeline` -- ``timeline.csv``; :mod:`.links` -- ``links.csv``;
* :mod:`.trace` -- ``trace.json`` (Chrome / Perfetto trace events);
* :mod:`.gantt` -- the Gantt chart (``gantt.png``, ``gantt.svg``);
* :mod:`.plots` -- activation memory and link utilisation plots;
* :mod:`.run_folder` -- the file set of a run folder: writing it, reading it back;
* :mod:`.html` -- ``report.html``, rendered from ``templates/report.html.j2``.

This ``__init__`` imports nothing, so writing a run's text files never loads
matplotlib, pandas or Jinja2.
"""
