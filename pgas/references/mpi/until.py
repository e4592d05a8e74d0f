"""Iterate to convergence on the MPI path: ``run_until``, one ``Allreduce`` per reduction.

The MPI twin of :func:`pgas.run_until` and :func:`pgas.explicit.run_until`:
groups of ``k`` steps exactly as :func:`pgas.mpi.run` (deep halos, the same
bits), and every ``check_every`` steps one exchange of a halo ``halo`` wide
and ``converged(e, reduce)`` on every rank, where ``reduce(values, op)``
reduces ``values`` of the rank's own cells over the cells the kernel writes
(``region`` minus ``Keep`` cells) locally with NumPy, then over all ranks
with one ``Allreduce``. Every rank gets the same reduced value, so every rank
takes the same decision. ``steps_taken`` is a multiple of ``check_every`` or
``max_steps``, as on the other backends; the field is bitwise equal to
theirs, while the reduced values are not (another order of the sum): they
only decide when to stop, unless they are ``reduce(..., reproducible=True)``
(:mod:`pgas.globalview.reprosum`: the same bits as the other backends).

A state dict (conjugate gradients): ``init`` may be a dict of field inits
(functions of the global indices) and 0-d scalars; the kernel reduces inside
the step, ``kernel(e, reduce)`` (``kernel(e, p, reduce)`` with params), ``e``
the dict of each field's block with its halo and each scalar, and returns a
dict of the same keys (each field's new cells, each new scalar). One step per
exchange (``k = 1``: a reduction needs every cell up to date), each field's
halo exchanged once per step (a check right after a step reuses it);
``converged(e, reduce)`` may read a reduced scalar without reducing again. As
:func:`pgas.explicit.run_until`, whose kernels run here unchanged.
:func:`pgas.mpi.run` takes the same state dict for a fixed number of steps (the
same step, the same bits).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.grid import schedule
from pgas.loop.decision import check_decision
from pgas.loop.until import check_args, choose_check_every
from pgas.references.mpi.block import Block, initialize, plan, setup, update_bounds
from pgas.references.mpi.checks import Reducer, all_finite, iterate
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import MessageCounter, exchange, sides_of
from pgas.references.mpi.params import bind, fitted_params
from pgas.references.mpi.result import RunResult
from pgas.references.mpi.state import run_until_state
from pgas.references.mpi.world import abort_on_error, check_world

__all__ = ["run_until"]


def run_until(
    kernel: Callable[..., Any],
    init: Callable[..., Any],
    global_shape: Sequence[int],
    dtype: Any,
    converged: Callable[..., Any],
    max_steps: int,
    halo: int | Sequence[int],
    boundary: object,
    region: tuple[slice, ...] | slice | None = None,
    grid=None,
    dims: Sequence[int] | None = None,
    *,
    check_every: int | str = "auto",
    steps_per_exchange: int | str = "auto",
    params: Any = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    gather: bool = True,
) -> RunResult:
    """Run ``kernel`` on every rank until ``converged`` holds (one ``Allreduce`` per reduction).

    Arguments as :func:`pgas.mpi.run`, with ``converged`` and ``max_steps``
    in place of ``steps``; see the module docstring.

    Args:
        kernel: ``kernel(ext) -> new`` (``kernel(ext, p)`` with ``params``);
            ``kernel(e, reduce) -> dict`` for a state dict (module docstring).
        init: ``init(*global_index_arrays) -> values`` for this rank's cells, or a
            state dict of such inits and 0-d scalars.
        global_shape: cells per axis.
        dtype: the field's dtype.
        converged: ``converged(e, reduce) -> bool`` (``converged(e, p, reduce)``
            with ``params``): ``e`` this rank's block with a halo ``halo`` wide,
            ``reduce(values, op="sum")`` (``"sum"``, ``"max"``, ``"min"``) of
            values of the rank's own cells over all ranks. The same function
            runs on :func:`pgas.explicit.run_until`.
        max_steps: the most steps to run (>= 1).
        halo: ghost width one step reads, one or one per axis.
        boundary: the field's boundary condition(s); read-only fields in
            ``params`` get the same.
        region: global slices of the cells that are updated; ``None`` = all.
        grid: a layout from :func:`~pgas.mpi.cart_grid`.
        dims: ranks per axis when ``grid`` is not given.
        check_every: steps between checks (>= 1, a multiple of an int
            ``steps_per_exchange``) or ``"auto"``, as :func:`pgas.run_until`.
        steps_per_exchange: ``k`` or ``"auto"`` (lowered to divide ``check_every``).
        params: a scalar or NumPy array (passed as it is), or a read-only field
            given by its init function (a callable), or a dict, tuple or list of
            them; a field reaches ``kernel`` and
            ``converged`` as its block with the same halo as ``e`` (exchanged
            once, before the loop).
        callback: ``callback(steps_taken, block)`` on every rank once, at the end,
            with this rank's cells (no halo; do not modify them); a dict of
            them and the scalars for a state dict.
        gather: gather the final field to rank 0 (``RunResult.field``; for a
            state dict a dict of the gathered fields and the scalars).

    Returns:
        A :class:`~pgas.mpi.RunResult` whose ``steps`` are the steps taken, with
        ``converged``, ``finite``, ``check_every`` and ``allreduces`` (this rank's).

    Warns:
        NonConvergenceWarning: ``max_steps`` was reached before ``converged`` held.
        NonFiniteWarning: it stopped at a check where a value ``reduce`` returned
            there (or a float scalar of a state dict) was NaN or infinite, as
            :func:`pgas.run_until` stops (``RunResult.finite`` is ``False``).

    >>> from pgas.grid.boundary import Keep
    >>> r = run_until(lambda e: 0.5 * (e[:-2] + e[2:]), lambda i: 8.0 * (i == 1), (4,),
    ...               "float64", lambda e, reduce: reduce(abs(e[1:-1]), "max") < 1.0, 100, 1,
    ...               Keep(), check_every=2)
    >>> r.steps, r.converged, r.field
    (4, True, array([0. , 0.5, 0. , 0. ]))
    """
    with abort_on_error():
        check_world()
        check_args(max_steps, check_every, steps_per_exchange)
        max_steps = int(max_steps)
        if isinstance(init, dict):
            return run_until_state(kernel, init, global_shape, dtype, converged, max_steps,
                                    halo, boundary, region, grid, dims, check_every,
                                    steps_per_exchange, params, callback, gather)  # fmt: skip
        grid, halo, faces = setup(global_shape, halo, boundary, grid, dims)
        choice = plan(global_shape, halo, grid.dims, steps_per_exchange).choice
        every, _ = choose_check_every(check_every, choice.steps_per_exchange, False)
        how = plan(global_shape, halo, grid.dims, math.gcd(every, choice.steps_per_exchange))
        k = how.steps_per_exchange
        bounds = update_bounds(grid, halo, faces, region)
        block = Block(grid, halo, faces, bounds, k, dtype)
        initialize(block, init, grid)
        fitted = fitted_params(params, grid, block.halo, k, faces, dtype, "pgas.mpi.run_until")
        kern, test = bind(kernel, fitted), bind(converged, fitted)
        counter, reduce = MessageCounter(), Reducer(block)

        def advance(steps: int) -> None:
            for size in schedule.groups(steps, k):
                block.advance(size, kern, counter, whole=fitted is not None)  # params: placed

        width = sides_of(halo)  # (below, above) per axis

        def check() -> tuple[bool, bool]:
            e, _ = block.view(width)
            exchange(e, grid, width, faces, counter)
            before, seen = reduce.calls, len(reduce.seen)
            done = bool(check_decision(test(e, reduce), reduce.calls - before))
            return done, all_finite(reduce.seen[seen:])

        n, done, finite, seconds = iterate(advance, check, every, max_steps, grid.comm)
        if callback is not None:
            callback(n, block.core)
        counts = grid.comm.allgather((counter.messages, counter.bytes))
        return dataclasses.replace(
            RunResult(
                field=gather_to_root(block.core, grid) if gather else None,
                seconds=seconds, wall_seconds=seconds, steps=n,
                messages_per_step=sum(m for m, _ in counts) / n,
                bytes_per_step=sum(b for _, b in counts) / n,
                rank_messages_per_step=tuple(m / n for m, _ in counts),
                rank_bytes_per_step=tuple(b / n for _, b in counts),
                grid=grid.describe(), dims=grid.dims, steps_per_exchange=k, note=how.note,
            ),
            converged=done, check_every=every, allreduces=reduce.calls, finite=finite,
        )  # fmt: skip
