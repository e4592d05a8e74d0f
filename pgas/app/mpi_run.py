"""A run on the ``mpi`` backend: NumPy blocks in the ranks of ``mpiexec``, one Result.

Contract of :func:`run` (what :func:`pgas.app.runner.run` does on ``mpi``):
rank 0 decides where the run writes (:func:`pgas.app.preflight.decide`); every
rank builds its own block of the initial condition, a slab of about 2**16 cells
at a time (:func:`pgas.mpi.fill_local`), and :func:`pgas.mpi.run` runs the
kernel on it (the backend's one plan), handing each chunk's block to the
snapshot stream (:mod:`pgas.app.streaming`) and the progress bar. The checksum
and diagnostics come from each rank's final block (:mod:`pgas.app.final`); with
``gather`` rank 0 also holds the whole decoded field. The timing is
:func:`pgas.mpi.run`'s: the wall time, and the compute time apart from the
output waits. Checkpoints are not offered on this backend.
"""

from __future__ import annotations

import numpy as np

from pgas.app.backends import Backend
from pgas.app.final import decode_field, final_values
from pgas.app.options import RunOptions
from pgas.app.preflight import decide
from pgas.app.problem import Problem
from pgas.app.progress import Progress, chunk_length
from pgas.app.results import Result
from pgas.app.streaming import closed_after, open_stream, run_attrs, snapshot_every
from pgas.errors import PgasError

__all__ = ["run"]


def run(problem: Problem, opts: RunOptions, backend: Backend, progress: Progress,
        output, gather: bool) -> Result:  # fmt: skip
    """Run ``problem`` on the ``mpi`` ``backend`` in this rank; see the module docstring and
    :func:`pgas.app.runner.run` (which makes ``progress``).

    In a plain ``python`` process, a world of one rank:

    >>> from pgas.app.backends import get
    >>> from pgas.app.problem import demo
    >>> from pgas.grid.boundary import Keep
    >>> import dataclasses
    >>> p = dataclasses.replace(demo(), boundary=Keep())
    >>> r = run(p, RunOptions(backend="mpi", steps=2), get("mpi"), Progress(2, True, 0, "demo"),
    ...         None, False)
    >>> r.backend, r.processes, r.steps
    ('mpi', 1, 2)
    """
    from pgas.grid.decomposition import dims_create
    from pgas.references import mpi
    from pgas.runtime.capacity import check_host_fits
    from pgas.runtime.group import Group

    world = mpi.MPI.COMM_WORLD
    decide(opts, None, Group(world))  # before anything is created
    dims = dims_create(world.size, len(problem.shape))
    plan = backend.plan(problem, None, opts.steps_per_exchange)
    grid = mpi.cart_grid(problem.shape, dims)  # the blocks mpi.run builds (same dims, order)
    # before anything is allocated: the block and the loop's second buffer
    check_host_fits(grid.local_shape, problem.dtype, buffers=2, shape=problem.shape)
    mesh = dict(zip(problem.mesh_axes, dims, strict=True))
    attrs = run_attrs(problem, opts, backend, "cpu", "numpy (mpi4py)", world.size, world.size,
                      mesh, plan, 0)  # fmt: skip
    stream = open_stream(problem, opts, output, attrs, grid.axes, world, world.size, 0)
    every, region = snapshot_every(opts), grid.block()
    slab = max(1, (1 << 16) // problem.cells_per_value)  # cells per call of init: about 2**16

    last = []  # this rank's final block (a view of the loop's buffer: no copy)

    def between(done: int, block: np.ndarray) -> None:
        last[:] = [block]
        if every and done % every == 0:
            if block.shape != grid.local_shape:
                raise PgasError(f"mpi.run's block {block.shape} is not {grid.local_shape}")
            stream.write(done, block, region)
        progress(done)

    chunk = every or chunk_length(opts.steps, None, progress.on)
    with closed_after(stream):
        if stream:
            block = np.empty(grid.local_shape, problem.dtype)
            stream.write(0, mpi.fill_local(block, problem.init, grid, slab), region)
            del block
        r = backend.run(problem, None, opts.steps, plan, chunk=chunk, callback=between,
                        gather=gather)  # fmt: skip
    comm = {"messages_per_step": r.messages_per_step, "bytes_per_step": r.bytes_per_step,
            "rank_bytes_per_step": list(r.rank_bytes_per_step), "grid": r.grid}  # fmt: skip
    if not last:  # no step ran: the state is the initial condition
        last.append(mpi.fill_local(np.empty(grid.local_shape, problem.dtype), problem.init, grid,
                                   slab))  # fmt: skip
    final = final_values(problem, output, [(region, last[0])], world, world.size)
    field = decode_field(problem, r.field)  # rank 0, only when asked (gather)
    return Result(
        backend.name, world.size, world.size, dict(zip(problem.mesh_axes, r.dims, strict=True)),
        problem.cell_shape or problem.shape, opts.steps, r.wall_seconds,
        final.checksum,
        messages_per_step=float(r.messages_per_step), bytes_per_step=float(r.bytes_per_step),
        steps_per_exchange=r.steps_per_exchange, steps_per_exchange_note=r.note,
        platform="cpu", device_kind="numpy (mpi4py)", comm=comm, rank=world.rank, field=field,
        store=stream.path if stream else None, diagnostics=final.diagnostics,
        compute_seconds=r.seconds, output_wait_seconds=max(r.wall_seconds - r.seconds, 0.0),
    )  # fmt: skip
