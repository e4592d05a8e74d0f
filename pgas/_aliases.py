"""Short import paths: ``pgas.explicit``, ``pgas.mpi``, ``pgas.plan``, ... for modules in layers.

The package is laid out in layers (``pgas.grid``, ``pgas.globalview``,
``pgas.loop``, ``pgas.references``, ``pgas.io``, ``pgas.app``, ``pgas.runtime``);
the paths users wrote before the layout (``import pgas.explicit``, ``from
pgas.plan import plan``, ``from pgas import mpi``, ``pgas.checkpoint.save``)
name the same module objects, loaded only when first used. One table,
:data:`MOVED`, says where each lives; code inside pgas uses the full paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["MOVED", "LAYERS", "install", "resolve"]

#: short name -> module it names
MOVED: dict[str, str] = {
    "launcher": "pgas.runtime.launcher", "distributed": "pgas.runtime.distributed",
    "decomposition": "pgas.grid.decomposition", "boundary": "pgas.grid.boundary",
    "mesh": "pgas.grid.mesh", "layout": "pgas.grid.layout", "schedule": "pgas.grid.schedule",
    "view": "pgas.globalview.view", "halo": "pgas.globalview.halo",
    "lower": "pgas.globalview.lower", "array": "pgas.globalview.array",
    "reduce": "pgas.globalview.reduce",
    "frames": "pgas.loop.frames", "plan": "pgas.loop.plan", "report": "pgas.loop.report",
    "explicit": "pgas.references.explicit", "mpi": "pgas.references.mpi",
    "blocks": "pgas.io.blocks", "store": "pgas.io.store", "zarrstore": "pgas.io.zarrstore",
    "ncstore": "pgas.io.ncstore", "snapshots": "pgas.io.snapshots", "output": "pgas.io.output",
    "formats": "pgas.io.formats",
    "plot": "pgas.io.plot", "checkpoint": "pgas.io.checkpoint",
    "problem": "pgas.app.problem", "options": "pgas.app.options",
    "platform": "pgas.app.platform", "results": "pgas.app.results",
    "runner": "pgas.app.runner", "compare": "pgas.app.compare", "cli": "pgas.app.cli",
}  # fmt: skip

#: the layers, bottom first: a module imports only from its own layer and those below
LAYERS: tuple[str, ...] = (
    "runtime", "grid", "globalview", "loop", "solvers", "references", "io", "app",
)  # fmt: skip


def resolve(name: str) -> str | None:
    """The module a short path names (``pgas.mpi.loop`` -> ``pgas.references.mpi.loop``).

    >>> resolve("pgas.mpi.loop"), resolve("pgas.grid.mesh")
    ('pgas.references.mpi.loop', None)
    """
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != "pgas" or parts[1] not in MOVED:
        return None
    return ".".join([MOVED[parts[1]], *parts[2:]])


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a short path as the module it names (the same object, not a copy)."""

    def find_spec(self, name, path=None, target=None):
        target_name = resolve(name)
        if target_name is None or importlib.util.find_spec(target_name) is None:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(resolve(spec.name))
        spec.loader_state = module.__spec__  # importlib sets __spec__ to the alias's next
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # it keeps its own name and spec


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())  # before the path finders: no second copy
