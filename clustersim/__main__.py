"""``python -m clustersim`` runs the command line (:func:`clustersim.console.main`)."""

import sys

from .console import main

sys.exit(main())
