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
"""

from pgas.array import GlobalArray, from_function, from_numpy, full, zeros
from pgas.boundary import Dirichlet, Keep, Neumann, Periodic
from pgas.decomposition import BlockAxis, dims_create
from pgas.errors import (
    DeviceCountError,
    DTypeMismatchError,
    HaloError,
    IndexingError,
    LayoutError,
    MeshError,
    PgasError,
    ShapeMismatchError,
)
from pgas.layout import Layout
from pgas.loop import run
from pgas.mesh import make_mesh, use_cpu_devices
from pgas.reduce import max, mean, min, sum
from pgas.report import Collective, CommReport, comm_report
from pgas.view import View, apply, shift, where

__version__ = "0.3.0"

__all__ = [
    "GlobalArray", "View", "Layout", "BlockAxis",
    "make_mesh", "use_cpu_devices", "dims_create",
    "from_numpy", "from_function", "zeros", "full",
    "Periodic", "Dirichlet", "Neumann", "Keep",
    "shift", "where", "apply",
    "sum", "min", "max", "mean",
    "run", "comm_report", "CommReport", "Collective",
    "PgasError", "MeshError", "LayoutError", "HaloError", "IndexingError",
    "ShapeMismatchError", "DTypeMismatchError", "DeviceCountError",
    "__version__",
]  # fmt: skip
