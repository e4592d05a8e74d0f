"""pgas's version (one place: the package face, results and checkpoints read it)."""

__version__ = "0.3.0"
