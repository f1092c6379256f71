"""``python -m clustersim`` runs the command line (:func:`clustersim.console.run`)."""

from .console import run

run()
