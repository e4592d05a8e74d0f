"""Sphinx configuration: the API reference, built from pgas's docstrings (``make docs``)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "pgas"
author = "the pgas developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
suppress_warnings = ["ref.python"]  # a name exported at two paths (pgas.run, pgas.loop.run)
