"""The explicit MPI time loop: NumPy blocks, deep halos, the reference for every backend.

Contract of :func:`run`:

- Update region (the same on every backend): cell ``g`` takes the kernel's
  value only if ``g`` lies in ``region`` and, on a ``Keep()`` face, ``g`` is
  not among the outermost ``halo`` cells of that face.
- Deep halos: every ``k`` steps (``steps_per_exchange``) one exchange of
  ghosts ``k * halo`` wide, then ``k`` sub-steps without messages. Each
  sub-step calls the kernel on the whole extended block (the kernel's slices
  work on any size), writes its result into the cells inside the halo where
  the update mask allows (the mask is a function of the global index only:
  inside the domain, in the update region, modulo ``N`` on a periodic axis),
  then re-fills the ghost cells beyond a non-periodic domain edge from the
  boundary condition. A cell ``s * halo`` from the extended edge is stale
  after ``s`` sub-steps, so after ``k`` sub-steps the block's own cells are
  exact: bitwise equal to ``k = 1`` and to a single-process NumPy loop, for
  any rank count. A group never crosses a snapshot or callback step
  (:mod:`pgas.schedule`); the last group of a segment may be shorter, and
  exchanges a narrower halo.
- Halos per side: ``halo`` may give a ``(below, above)`` pair per axis; the
  kernel then receives ``below`` ghost cells before the block and ``above``
  after it (returning ``e[1:]`` for ``((1, 0),)``), and only those sides are
  exchanged, ``k`` times over (:attr:`pgas.loop.plan.Plan.exchanged`).
- ``k`` comes from :func:`pgas.plan.choose_steps_per_exchange`: an int
  request is lowered, with a note, when ``k * halo`` exceeds the smallest
  block.
- An exception on any rank of a multi-rank run ends the whole job
  (:func:`~pgas.mpi.abort_on_error`); nothing is left hanging in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.grid import schedule
from pgas.references.mpi.block import Block, initialize, plan, setup, update_bounds
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import MessageCounter
from pgas.references.mpi.grid import CartGrid
from pgas.references.mpi.params import bind, fitted_params
from pgas.references.mpi.result import RunResult
from pgas.references.mpi.state import run_state
from pgas.references.mpi.world import MPI, abort_on_error, check_world

__all__ = ["RunResult", "plan", "run"]


def run(
    kernel: Callable[[np.ndarray], Any],
    init: Callable[..., Any],
    global_shape: Sequence[int],
    dtype: Any,
    steps: int,
    halo: int | Sequence[int],
    boundary: object,
    region: tuple[slice, ...] | slice | None = None,
    grid: CartGrid | None = None,
    dims: Sequence[int] | None = None,
    *,
    snapshot_every: int | None = None,
    chunk: int | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    steps_per_exchange: int | str = "auto",
    gather: bool = True,
    cells_per_value: int = 1,
    params: Any = None,
) -> RunResult:
    """Run an explicit stencil time loop over all ranks and gather the result.

    Every ``k`` steps: one halo exchange ``k * halo`` wide, then ``k`` times
    ``new = kernel(ext)`` with the cells of the update region taking ``new``
    (see the module docstring). Collective over ``COMM_WORLD`` (or
    ``grid.comm``); an exception on any rank aborts all of them.

    A state dict (conjugate gradients for a fixed number of iterations): ``init``
    may be a dict of field inits and 0-d scalars, with the kernel of
    :func:`pgas.mpi.run_until`'s state dicts, ``kernel(e, reduce)``
    (``kernel(e, p, reduce)`` with ``params``) returning a dict of the same
    keys; one step per exchange (``k = 1``), the same bits as ``run_until``
    after as many steps. ``field`` is then a dict of the gathered fields and
    the scalars, and ``callback`` runs once, at the end, with a dict of the
    rank's cells and the scalars (no ``snapshot_every``, ``chunk`` or
    ``cells_per_value``).

    Args:
        kernel: ``kernel(ext) -> new``: a block with ghost cells in, the new
            values of the cells inside the halo out (``ext.shape - 2*halo``),
            written with slices so that it works on any block size;
            ``kernel(e, reduce) -> dict`` for a state dict.
        init: ``init(*global_index_arrays) -> values`` for this rank's cells, or a
            state dict of such inits and 0-d scalars.
        global_shape: cells per axis.
        dtype: the field's dtype.
        steps: number of time steps.
        halo: ghost width one step reads, one, one per axis, or a ``(below, above)``
            pair per axis (the kernel then receives ``below`` cells before the block
            and ``above`` after it; only those sides are exchanged).
        boundary: as accepted by :func:`pgas.boundary.normalize_boundary`.
        region: global slices (unit step, negative indices allowed) of the
            cells that are updated; ``None`` = all.
        grid: a layout from :func:`~pgas.mpi.cart_grid`; default built from
            ``dims`` and the periodic axes of ``boundary``.
        dims: ranks per axis when ``grid`` is not given.
        snapshot_every: gather the field to rank 0 at step 0 and after every
            that many steps (must divide ``steps``); see
            :attr:`RunResult.snapshots`.
        chunk: call ``callback`` after every that many steps (a multiple of
            ``snapshot_every`` if both are given); default: ``snapshot_every``,
            else only at the end.
        callback: ``callback(steps_done, block)`` on every rank between
            chunks, with this rank's cells (no halo; do not modify them).
        steps_per_exchange: ``k``, an int >= 1 or ``"auto"``
            (:func:`pgas.plan.choose_steps_per_exchange`).
        gather: gather the final field to rank 0 (``RunResult.field``; the whole
            field on rank 0); ``False``: no process holds more than its block
            (read it in ``callback``, which also runs after the last step).
        cells_per_value: cells ``init`` computes per value (e.g. 64 for bit-packed
            words): it is called on slabs of about 2**16 cells.
        params: the kernel is called ``kernel(ext, params)``: a scalar or NumPy
            array (passed as it is), or a read-only field given by its init
            function (a callable of the global indices, as ``init``; the
            field's boundary conditions are ``boundary``), or a dict, tuple or
            list of them. A field reaches the kernel as its block with the same
            halo as ``ext``, exchanged once before the loop
            (:mod:`pgas.mpi.params`); the kernel then runs on the whole block
            at once, not on slabs of rows.

    Snapshot gathers and callbacks are not counted in ``seconds``.

    Returns:
        A :class:`RunResult`; its ``field`` (and ``snapshots``) are set on rank 0 only.

    Raises:
        PgasError: a bad ``steps``, schedule or ``params``; for a state dict, a bad
            init, a kernel that returns other keys or shapes, ``steps_per_exchange``
            other than 1, or ``snapshot_every``, ``chunk`` or ``cells_per_value``.

    >>> from pgas.grid.boundary import Keep, Periodic
    >>> heat = lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])
    >>> r = run(heat, lambda x: (x == 5) * 1.0, (11,), "float64", 2, 1, Keep(),
    ...         steps_per_exchange=2)
    >>> r.field[3:8], r.steps_per_exchange
    (array([0.0625, 0.25  , 0.375 , 0.25  , 0.0625]), 2)
    >>> def halve(e, reduce):                 # a state dict: a field and a reduced scalar
    ...     u = 0.5 * e["u"][1:-1]
    ...     return {"u": u, "total": reduce(u, reproducible=True)}
    >>> r = run(halve, {"u": lambda i: 8.0 + 0.0 * i, "total": 32.0}, (4,), "float64", 3, 1,
    ...         Periodic())
    >>> r.field["u"], float(r.field["total"]), r.allreduces
    (array([1., 1., 1., 1.]), 4.0, 6)
    """
    with abort_on_error():
        check_world()
        if isinstance(init, dict):
            return run_state(kernel, init, global_shape, dtype, steps, halo, boundary, region,
                              grid, dims, snapshot_every, chunk, cells_per_value,
                              steps_per_exchange, params, callback, gather)  # fmt: skip
        grid, halo, faces = setup(global_shape, halo, boundary, grid, dims)
        steps = schedule.check_steps(steps)
        every, chunk = schedule.check_schedule(steps, snapshot_every, chunk)
        choice = plan(global_shape, halo, grid.dims, steps_per_exchange).choice
        bounds = update_bounds(grid, halo, faces, region)
        block = Block(grid, halo, faces, bounds, choice.steps_per_exchange, dtype)
        initialize(block, init, grid, cells_per_value)
        fitted = fitted_params(params, grid, block.halo, block.k, faces, dtype, "pgas.mpi.run")
        counter = MessageCounter()
        snaps = [gather_to_root(block.core, grid)] if every else []
        seconds, wall = _loop(block, bind(kernel, fitted), steps, every, chunk, callback, counter,
                              snaps, whole=fitted is not None)  # fmt: skip
        counts = grid.comm.allgather((counter.messages, counter.bytes))
        per = max(steps, 1)
        return RunResult(
            field=gather_to_root(block.core, grid) if gather else None,
            seconds=seconds,
            wall_seconds=wall,
            steps=steps,
            messages_per_step=sum(m for m, _ in counts) / per,
            bytes_per_step=sum(b for _, b in counts) / per,
            rank_messages_per_step=tuple(m / per for m, _ in counts),
            rank_bytes_per_step=tuple(b / per for _, b in counts),
            grid=grid.describe(),
            dims=grid.dims,
            snapshots=np.stack(snaps) if every and grid.rank == 0 else None,
            snapshot_steps=tuple(range(0, steps + 1, every)) if every else (),
            steps_per_exchange=choice.steps_per_exchange,
            note=choice.note,
        )


def _loop(block, kernel, steps, every, chunk, callback, counter, snaps,
          whole: bool = False) -> tuple[float, float]:  # fmt: skip
    """The timed loop: groups of ``k`` steps between snapshot/callback steps; the seconds
    without and with the gathers and callbacks (max over ranks). ``whole``: the kernel on
    the whole extended block (it reads params placed by its shape)."""
    comm = block.grid.comm
    outside = 0.0  # seconds spent in gathers and callbacks
    comm.Barrier()
    start = MPI.Wtime()
    done = 0
    for stop in schedule.segments(steps, every, chunk):
        for size in schedule.groups(stop - done, block.k):
            block.advance(size, kernel, counter, whole)
        done = stop
        t0 = MPI.Wtime()
        if every and done % every == 0:
            snaps.append(gather_to_root(block.core, block.grid))
        if callback is not None and chunk and done % chunk == 0:
            callback(done, block.core)
        outside += MPI.Wtime() - t0
    if callback is not None and (not chunk or steps % chunk):
        t0 = MPI.Wtime()
        callback(steps, block.core)
        outside += MPI.Wtime() - t0
    comm.Barrier()
    wall = MPI.Wtime() - start
    rows = comm.allgather((wall - outside, wall))
    return float(max(r[0] for r in rows)), float(max(r[1] for r in rows))
