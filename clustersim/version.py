"""The version of clustersim, in a module of its own so any module can import it without
importing the package's public API (``clustersim/__init__.py`` imports :mod:`clustersim.api`)."""

__version__ = "0.1.0"
