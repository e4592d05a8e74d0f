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

from pgas.errors import PgasError
from pgas.globalview import reprosum
from pgas.globalview.reduce import reproducible_kind
from pgas.grid import schedule
from pgas.loop.decision import check_decision
from pgas.loop.until import (
    check_args,
    check_state_steps,
    choose_check_every,
    warn_non_finite,
    warn_not_converged,
)
from pgas.references.mpi.collectives import extreme
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import MessageCounter, exchange, sides_of
from pgas.references.mpi.loop import RunResult, _Block, _initialize, _setup, _update_bounds, plan
from pgas.references.mpi.params import bind, fitted_params
from pgas.references.mpi.world import MPI, abort_on_error, check_world

__all__ = ["run_until"]

_OPS = {"sum": (np.sum, MPI.SUM, 0), "max": (np.max, MPI.MAX, -np.inf),
        "min": (np.min, MPI.MIN, np.inf)}  # fmt: skip


class _Reducer:
    """``reduce(values, op, reproducible=False)`` over the cells the kernel writes, on all
    ranks; counts its calls and keeps what it returned (``seen``: a check reads them,
    :func:`_finite`). A float sum with ``reproducible=True`` is
    :mod:`pgas.globalview.reprosum` on NumPy: a max ``Allreduce``, then one of the lanes. A
    NaN gives NaN, as in NumPy (:func:`pgas.mpi.collectives.extreme`)."""

    def __init__(self, block: _Block) -> None:
        core = [m[lo : lo + n] for m, (lo, _), n in zip(block.masks, block.rim,
                                                      block.grid.local_shape)]  # fmt: skip
        mask = core[0]
        for m in core[1:]:
            mask = mask[..., None] & m
        self.mask = None if mask.all() else mask
        self.comm, self.calls, self.seen = block.grid.comm, 0, []
        self.size = math.prod(block.grid.global_shape)

    def __call__(self, values, op: str = "sum", reproducible: bool = False):
        out = self._reduced(values, op, reproducible)
        self.seen.append(out)
        return out

    def _reduced(self, values, op: str, reproducible: bool):
        if op not in _OPS:
            raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_OPS)}")
        local, mpi_op, fill = _OPS[op]
        values = np.asarray(values)
        if reproducible_kind(values.dtype, reproducible, op):
            self.calls += 2  # two Allreduce calls: the max, then the lanes
            if self.mask is not None:
                values = np.where(self.mask, values, np.zeros((), values.dtype))
            amax = self.comm.allreduce(reprosum.local_max(values, np), op=MPI.MAX)
            amax = np.asarray(amax, values.dtype)
            with np.errstate(invalid="ignore"):  # inf - inf in the non-finite lane: nan
                part = reprosum.lanes(values, amax, self.size, np)
            summed = np.empty_like(part)
            self.comm.Allreduce(part, summed, op=MPI.SUM)
            return reprosum.combine(summed, amax, self.size, np)[()]
        if self.mask is not None:
            if not np.issubdtype(values.dtype, np.floating) and op != "sum":
                info = np.iinfo(values.dtype)
                fill = info.min if op == "max" else info.max
            values = np.where(self.mask, values, np.asarray(fill).astype(values.dtype))
        self.calls += 1
        if op != "sum":
            return extreme(local(values), op, self.comm)
        return self.comm.allreduce(local(values), op=mpi_op)


def _finite(values, scalars=()) -> bool:
    """Whether every float among ``values`` (what a check reduced) and ``scalars`` (a state
    dict's) is finite, as :func:`pgas.loop.decision.all_finite` decides on the other backends."""
    return all(bool(np.isfinite(x)) for x in [*values, *scalars]
               if np.ndim(x) == 0 and np.issubdtype(np.asarray(x).dtype, np.inexact))  # fmt: skip


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
            return _run_until_state(kernel, init, global_shape, dtype, converged, max_steps,
                                    halo, boundary, region, grid, dims, check_every,
                                    steps_per_exchange, params, callback, gather)  # fmt: skip
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

        def check() -> tuple[bool, bool]:
            e, _ = block.view(width)
            exchange(e, grid, width, faces, counter)
            before, seen = reduce.calls, len(reduce.seen)
            done = bool(check_decision(test(e, reduce), reduce.calls - before))
            return done, _finite(reduce.seen[seen:])

        n, done, finite, seconds = _iterate(advance, check, every, max_steps, grid.comm)
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


# ---- multi-field states: dicts of fields and scalars, reductions inside the step ------------
class _State:
    """The rank's blocks of a state dict (one :class:`_Block` per field, ``k = 1``), its
    scalars, and the kernel's ``reduce`` and params; each field's halo is exchanged when
    read after a write, not again. :func:`pgas.mpi.run` on a state dict is
    ``advance(steps)``, :func:`run_until` ``advance`` and ``check`` in turn."""

    def __init__(self, kernel: Callable, init: dict, grid, halo, faces, bounds, dtype, params,
                 who: str) -> None:  # fmt: skip
        self.keys, self.blocks, self.scalars, self.fresh = tuple(init), {}, {}, {}
        for key, value in init.items():
            if callable(value):
                block = _Block(grid, halo, faces, bounds, 1, dtype)
                _initialize(block, value, grid)
                self.blocks[key], self.fresh[key] = block, False
            elif isinstance(value, (int, float, np.ndarray, np.generic)) and np.ndim(value) == 0:
                self.scalars[key] = np.asarray(value, dtype)[()]
            else:
                raise PgasError(
                    f"init[{key!r}] is a {type(value).__name__}; the init of a state dict "
                    f"holds fields given by their init (a function of the global indices) and "
                    f"0-d scalars"
                )  # fmt: skip
        if not self.blocks:
            raise PgasError(f"the state {sorted(init)} holds no field (an init function)")
        self.first = self.blocks[next(k for k in self.keys if k in self.blocks)]
        self.grid, self.faces, self.width = grid, faces, sides_of(halo)
        self.kernel, self.counter, self.reduce = kernel, MessageCounter(), _Reducer(self.first)
        fitted = fitted_params(params, grid, self.first.halo, 1, faces, dtype, who)
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(grid.local_shape, self.width))
        self.more = () if fitted is None else (fitted(shape),)  # the params, placed

    def seen(self) -> tuple[dict, dict]:
        """The kernel's view (each field's block with its halo, the scalars), and the masks."""
        e, masks = {}, {}
        for key in self.keys:
            if key in self.scalars:
                e[key] = self.scalars[key]
                continue
            e[key], masks[key] = self.blocks[key].view(self.width)
            if not self.fresh[key]:
                exchange(e[key], self.grid, self.width, self.faces, self.counter)
                self.fresh[key] = True
        return e, masks

    def step(self) -> None:
        """One step: the kernel on every field's block, then every field and scalar written."""
        e, masks = self.seen()
        new = self.kernel(e, *self.more, self.reduce)
        want = self.first.grid.local_shape
        if not isinstance(new, dict) or set(new) != set(self.keys):
            got = sorted(new) if isinstance(new, dict) else type(new).__name__
            raise PgasError(
                f"kernel returned {got}; a kernel of a state dict returns a dict with the "
                f"state's keys {list(self.keys)}: the new cells of each field (e['u'][1:-1] "
                f"for halo 1) and each new scalar"
            )
        new = {k: np.array(v) for k, v in new.items()}  # copies: no view of a block written
        for key in self.keys:
            shape = new[key].shape
            if key in self.scalars and shape != ():
                raise PgasError(
                    f"kernel returned shape {shape} for the scalar {key!r}; return a 0-d "
                    f"value (a reduction such as reduce(r * r), or arithmetic on scalars)"
                )
            if key in self.blocks and shape != want:
                raise PgasError(
                    f"kernel returned shape {shape} for the field {key!r} on rank "
                    f"{self.grid.rank}, whose block has {want} cells; return new values for "
                    f"every cell of the block (e[{key!r}][1:-1] for halo 1)"
                )
        for key in self.keys:
            if key in self.scalars:
                self.scalars[key] = np.asarray(new[key], self.scalars[key].dtype)[()]
            else:
                self.blocks[key]._put(e[key], masks[key], 0, want[0], new[key])
                self.fresh[key] = False

    def advance(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def check(self, converged: Callable) -> tuple[bool, bool]:
        """``converged(e, reduce)`` on the view (a step's halos reused), on every rank:
        whether it held, and whether what it reduced and the scalars are finite."""
        e, _ = self.seen()
        before, seen = self.reduce.calls, len(self.reduce.seen)
        out = converged(e, *self.more, self.reduce)
        done = bool(check_decision(out, self.reduce.calls - before, bool(self.scalars)))
        return done, _finite(self.reduce.seen[seen:], self.scalars.values())

    def result(self, steps: int, seconds: float, note: str, callback, gather: bool) -> RunResult:
        """The :class:`RunResult` after ``steps`` steps: ``field`` a dict of each gathered
        field and each scalar on rank 0 (``callback(steps, cores)`` first, on every rank)."""
        cores = {k: self.blocks[k].core if k in self.blocks else self.scalars[k]
                 for k in self.keys}  # fmt: skip
        if callback is not None:
            callback(steps, cores)
        grid, field = self.grid, None
        if gather:
            got = {k: gather_to_root(v, grid) if k in self.blocks else v
                   for k, v in cores.items()}  # fmt: skip
            field = got if grid.rank == 0 else None
        counts = grid.comm.allgather((self.counter.messages, self.counter.bytes))
        per = max(steps, 1)
        return RunResult(
            field=field, seconds=seconds, wall_seconds=seconds, steps=steps,
            messages_per_step=sum(m for m, _ in counts) / per,
            bytes_per_step=sum(b for _, b in counts) / per,
            rank_messages_per_step=tuple(m / per for m, _ in counts),
            rank_bytes_per_step=tuple(b / per for _, b in counts),
            grid=grid.describe(), dims=grid.dims, steps_per_exchange=1, note=note,
            allreduces=self.reduce.calls,
        )  # fmt: skip


def _begin_state(kernel, init: dict, global_shape, dtype, halo, boundary, region, grid, dims,
                 steps_per_exchange, params, who: str) -> tuple[_State, str]:  # fmt: skip
    """A state dict's :class:`_State` on this rank, checked, and the plan's note."""
    check_state_steps(steps_per_exchange)
    grid, halo, faces = _setup(global_shape, halo, boundary, grid, dims)
    note = plan(global_shape, halo, grid.dims, 1).note
    bounds = _update_bounds(grid, halo, faces, region)
    return _State(kernel, init, grid, halo, faces, bounds, dtype, params, who), note


def _run_state(kernel, init: dict, global_shape, dtype, steps, halo, boundary, region, grid,
               dims, snapshot_every, chunk, cells_per_value, steps_per_exchange, params,
               callback, gather) -> RunResult:  # fmt: skip
    """:func:`pgas.mpi.run` on a state dict of fields and scalars: ``steps`` steps, one per
    exchange, the same bits as :func:`run_until` after as many."""
    steps = schedule.check_steps(steps)
    given = [f"{name} = {value!r}" for name, value, unset in
             (("snapshot_every", snapshot_every, None), ("chunk", chunk, None),
              ("cells_per_value", cells_per_value, 1)) if value != unset]  # fmt: skip
    if given:
        raise PgasError(
            f"{', '.join(given)} with a state dict: snapshots, chunks and packed cells are for a "
            f"single field; a state dict's callback runs once, at the end (drop them)"
        )
    state, note = _begin_state(kernel, init, global_shape, dtype, halo, boundary, region, grid,
                               dims, steps_per_exchange, params, "pgas.mpi.run")  # fmt: skip
    _, seconds = _timed(lambda: state.advance(steps), state.grid.comm)
    return state.result(steps, seconds, note, callback, gather)


def _run_until_state(kernel, init: dict, global_shape, dtype, converged, max_steps: int, halo,
                     boundary, region, grid, dims, check_every, steps_per_exchange, params,
                     callback, gather) -> RunResult:  # fmt: skip
    """:func:`run_until` on a state dict of fields and scalars (one step per exchange)."""
    state, note = _begin_state(kernel, init, global_shape, dtype, halo, boundary, region, grid,
                               dims, steps_per_exchange, params, "pgas.mpi.run_until")  # fmt: skip
    every, _ = choose_check_every(check_every, 1, True)
    n, done, finite, seconds = _iterate(state.advance, lambda: state.check(converged), every,
                                        max_steps, state.grid.comm)  # fmt: skip
    result = state.result(n, seconds, note, callback, gather)
    return dataclasses.replace(result, converged=done, check_every=every, finite=finite)


def _timed(work: Callable[[], Any], comm) -> tuple[Any, float]:
    """``work()`` between barriers: its result and the seconds the slowest rank took."""
    comm.Barrier()
    start = MPI.Wtime()
    out = work()
    comm.Barrier()
    return out, max(comm.allgather(MPI.Wtime() - start))


def _iterate(advance: Callable[[int], None], check: Callable[[], tuple[bool, bool]],
             every: int, max_steps: int, comm) -> tuple[int, bool, bool, float]:  # fmt: skip
    """``every`` steps then a check until it holds, is not finite or ``max_steps`` is reached
    (the rest of ``max_steps`` then runs, with a last check); ``(steps, converged, finite,
    seconds)``, the seconds the slowest rank took, and a warning where it did not converge.
    The counts are Python ints: any ``max_steps`` runs exactly."""

    def loop() -> tuple[int, bool, bool]:
        n, done, finite = 0, False, True
        while not done and finite and n + every <= max_steps:
            advance(every)
            n, (done, finite) = n + every, check()
        if not done and finite and max_steps % every:
            advance(max_steps % every)
            n, (done, finite) = n + max_steps % every, check()
        return n, done, finite

    (n, done, finite), seconds = _timed(loop, comm)
    if not finite:
        warn_non_finite(n, every)
    elif not done:
        warn_not_converged(max_steps, every)
    return n, done, finite, seconds
