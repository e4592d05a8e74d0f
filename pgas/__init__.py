"""pgas: global-view stencil programs on sharded JAX arrays, with the communication shown.

Write the global program once (``u[1:-1] = 0.5*u[1:-1] + 0.25*(u[:-2] + u[2:])``
on a :class:`GlobalArray` over a device mesh); pgas lowers slices to halo
exchanges that JAX's Shardy partitioner turns into halo-sized
collective-permutes, runs whole time loops as one XLA program, and reports what
the compiler sent (:func:`comm_report`).

>>> import numpy as np, pgas
>>> mesh = pgas.make_mesh(("x",), devices=1)
>>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0], np.float32), mesh, boundary=pgas.Keep())
>>> def step(u):
...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
...     return u
>>> pgas.run(step, u, steps=1).to_numpy()
array([0., 2., 0.], dtype=float32)


The package is laid out in layers, each importing only the layers below it
(a test reads the imports): ``pgas.runtime`` (processes and devices),
``pgas.grid`` (meshes, decompositions, boundaries: descriptions, no arrays),
``pgas.globalview`` (the global array and its lowering to halo exchanges),
``pgas.loop`` (compiled time loops, plans, communication reports),
``pgas.references`` (the explicit ``shard_map`` and MPI paths), ``pgas.io``
(stores, snapshots, checkpoints, pictures) and ``pgas.app`` (problems,
backends, the runner and the command line). The short paths users write
(``pgas.explicit``, ``pgas.mpi``, ``pgas.plan``, ``pgas.checkpoint``,
``pgas.plot``, ...) name the same modules and load on first use.
"""

import importlib as _importlib

from pgas import _aliases
from pgas._version import __version__
from pgas.errors import (
    ConversionError,
    DeviceCountError,
    DTypeMismatchError,
    HaloError,
    IndexingError,
    LayoutError,
    MeshError,
    PgasError,
    ShapeMismatchError,
)
from pgas.globalview.array import GlobalArray, from_function, from_numpy, full, zeros
from pgas.globalview.reduce import all, any, max, mean, min, sum
from pgas.globalview.view import View, apply, shift, where
from pgas.grid.boundary import Dirichlet, Keep, Neumann, Periodic
from pgas.grid.decomposition import BlockAxis, dims_create
from pgas.grid.layout import Layout
from pgas.grid.mesh import make_mesh
from pgas.loop.report import Collective, CommReport, comm_report
from pgas.loop.timeloop import run
from pgas.loop.until import NonConvergenceWarning, NonFiniteWarning, Until, run_until
from pgas.runtime.devices import use_cpu_devices

__all__ = [
    "GlobalArray", "View", "Layout", "BlockAxis",
    "make_mesh", "use_cpu_devices", "dims_create",
    "from_numpy", "from_function", "zeros", "full",
    "Periodic", "Dirichlet", "Neumann", "Keep",
    "shift", "where", "apply",
    "sum", "min", "max", "mean", "any", "all",
    "run", "run_until", "Until", "NonConvergenceWarning", "NonFiniteWarning",
    "comm_report", "CommReport", "Collective",
    "PgasError", "MeshError", "LayoutError", "HaloError", "IndexingError",
    "ShapeMismatchError", "DTypeMismatchError", "DeviceCountError", "ConversionError",
    "__version__",
]  # fmt: skip

_aliases.install()


def __getattr__(name: str):
    """``pgas.mpi``, ``pgas.grid``, ...: a layer or a short path, imported on first use."""
    if name in _aliases.LAYERS:
        return _importlib.import_module(f"pgas.{name}")
    if name in _aliases.MOVED:
        return _importlib.import_module(_aliases.MOVED[name])
    raise AttributeError(f"module 'pgas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_aliases.LAYERS, *_aliases.MOVED})
