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
only decide when to stop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.errors import PgasError
from pgas.grid import schedule
from pgas.loop.until import check_args, check_decision, choose_check_every, warn_not_converged
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import MessageCounter, exchange, sides_of
from pgas.references.mpi.loop import RunResult, _Block, _initialize, _setup, _update_bounds, plan
from pgas.references.mpi.params import bind, fitted_params
from pgas.references.mpi.world import MPI, abort_on_error, check_world

__all__ = ["run_until"]

_OPS = {"sum": (np.sum, MPI.SUM, 0), "max": (np.max, MPI.MAX, -np.inf),
        "min": (np.min, MPI.MIN, np.inf)}  # fmt: skip


class _Reducer:
    """``reduce(values, op)`` over the cells the kernel writes, on all ranks; counts its calls."""

    def __init__(self, block: _Block) -> None:
        core = [m[lo : lo + n] for m, (lo, _), n in zip(block.masks, block.rim,
                                                      block.grid.local_shape)]  # fmt: skip
        mask = core[0]
        for m in core[1:]:
            mask = mask[..., None] & m
        self.mask = None if mask.all() else mask
        self.comm, self.calls = block.grid.comm, 0

    def __call__(self, values, op: str = "sum"):
        if op not in _OPS:
            raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_OPS)}")
        local, mpi_op, fill = _OPS[op]
        values = np.asarray(values)
        if self.mask is not None:
            if not np.issubdtype(values.dtype, np.floating) and op != "sum":
                info = np.iinfo(values.dtype)
                fill = info.min if op == "max" else info.max
            values = np.where(self.mask, values, np.asarray(fill).astype(values.dtype))
        self.calls += 1
        return self.comm.allreduce(local(values), op=mpi_op)


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
        kernel: ``kernel(ext) -> new`` (``kernel(ext, p)`` with ``params``).
        init: ``init(*global_index_arrays) -> values`` for this rank's cells.
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
            with this rank's cells (no halo; do not modify them).
        gather: gather the final field to rank 0 (``RunResult.field``).

    Returns:
        A :class:`~pgas.mpi.RunResult` whose ``steps`` are the steps taken, with
        ``converged``, ``check_every`` and ``allreduces`` (this rank's).

    Warns:
        NonConvergenceWarning: ``max_steps`` was reached before ``converged`` held.

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
        grid, halo, faces = _setup(global_shape, halo, boundary, grid, dims)
        choice = plan(global_shape, halo, grid.dims, steps_per_exchange).choice
        every, _ = choose_check_every(check_every, choice.steps_per_exchange, False)
        how = plan(global_shape, halo, grid.dims, math.gcd(every, choice.steps_per_exchange))
        k = how.steps_per_exchange
        bounds = _update_bounds(grid, halo, faces, region)
        block = _Block(grid, halo, faces, bounds, k, dtype)
        _initialize(block, init, grid)
        fitted = fitted_params(params, grid, block.halo, k, faces, dtype, "pgas.mpi.run_until")
        kern, test = bind(kernel, fitted), bind(converged, fitted)
        counter, reduce = MessageCounter(), _Reducer(block)

        def advance(steps: int) -> None:
            for size in schedule.groups(steps, k):
                block.advance(size, kern, counter, whole=fitted is not None)  # params: placed

        width = sides_of(halo)  # (below, above) per axis

        def check() -> bool:
            e, _ = block.view(width)
            exchange(e, grid, width, faces, counter)
            before = reduce.calls
            return bool(check_decision(test(e, reduce), reduce.calls - before))

        grid.comm.Barrier()
        start = MPI.Wtime()
        n, done = 0, False
        while not done and n + every <= max_steps:
            advance(every)
            n, done = n + every, check()
        if not done and max_steps % every:
            advance(max_steps % every)
            n, done = n + max_steps % every, check()
        grid.comm.Barrier()
        seconds = max(grid.comm.allgather(MPI.Wtime() - start))
        if not done:
            warn_not_converged(max_steps, every)
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
            converged=done, check_every=every, allreduces=reduce.calls,
        )  # fmt: skip
