"""``python -m clustersim.cli`` runs the command line, as ``python -m clustersim`` does."""

import sys

from . import main

sys.exit(main())
