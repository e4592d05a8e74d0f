"""A run's state: the problem's mesh, its initial field and ``params``, and whether they fit.

Contract: :func:`mesh_for` lays the problem's mesh axes over the devices of a
run (this process's ``devices``, or every process's in a multi-process run);
:func:`check_memory` refuses, before anything is allocated, a problem whose run
cannot fit its devices' memory (the state, the loop's second buffer and the
``params`` field); :func:`build` makes a fresh initial field block by block
(runs donate their buffers, so each run builds its own) and returns once the
devices hold it; :func:`build_params` makes the read-only ``params`` field,
laid out as the state. The runner (:mod:`pgas.app.runner`) and the iterative
runs (:mod:`pgas.app.iterate`) both start here.
"""

from __future__ import annotations

import numpy as np

from pgas.app.problem import Problem

__all__ = ["mesh_for", "build", "build_params", "check_memory"]


def mesh_for(problem: Problem, devices: int | None, multiprocess: bool = False):
    """The problem's mesh over ``devices`` local devices (all processes' when multiprocess).

    >>> from pgas.app.problem import demo
    >>> dict(mesh_for(demo(), 2).shape)
    {'x': 2}
    """
    from pgas.grid.mesh import make_mesh

    return make_mesh(problem.mesh_axes, devices=None if multiprocess else devices)


def build(problem: Problem, mesh):
    """The problem's initial field on ``mesh`` (a fresh one per call: runs donate buffers).

    >>> from pgas.app.problem import demo
    >>> build(demo(), mesh_for(demo(), 1)).shape
    (8,)
    """
    import jax

    from pgas.globalview.array import from_function

    u = from_function(problem.init, problem.shape, mesh, dtype=problem.dtype,
                      boundary=problem.boundary, halo=problem.halo or None,
                      cells_per_value=problem.cells_per_value)  # fmt: skip
    # the host values go to the devices asynchronously: until they have, a process holds
    # the state twice, so wait here rather than allocate the run's buffers on top of that
    return jax.block_until_ready(u)


def check_memory(problem: Problem, mesh) -> None:
    """Refuse a problem whose run cannot fit its devices' memory, before anything is allocated:
    a run holds the state, the loop's second buffer and the ``params`` field, if any.

    Raises:
        FieldTooLargeError: naming the size and the fix (:mod:`pgas.runtime.capacity`).

    >>> from pgas.app.problem import demo
    >>> check_memory(demo(), mesh_for(demo(), 1))
    """
    from pgas.globalview.array import fits
    from pgas.grid.layout import make_layout

    layout = make_layout(problem.shape, mesh, None, problem.boundary, problem.halo or None)
    fits(layout, np.dtype(problem.dtype), buffers=2 + (problem.params is not None),
         what=f"the {problem.name} field")  # fmt: skip


def build_params(problem: Problem, mesh):
    """The read-only field of ``problem.params`` on ``mesh`` (laid out as the state), or None.

    >>> from pgas.app.problem import demo
    >>> build_params(demo(), mesh_for(demo(), 1)) is None
    True
    """
    if problem.params is None:
        return None
    from pgas.globalview.array import from_function

    return from_function(problem.params, problem.shape, mesh, dtype=problem.dtype,
                         boundary=problem.boundary, halo=problem.halo or None)  # fmt: skip
