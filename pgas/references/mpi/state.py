"""State dicts on the MPI path: several fields and scalars, reductions inside the step.

Contract: a state dict's init holds field inits (functions of the global
indices) and 0-d scalars; its kernel, ``kernel(e, reduce)`` (``kernel(e, p,
reduce)`` with params), gets ``e``, each field's block with its halo and each
scalar, and returns a dict of the same keys. One step per exchange (``k = 1``:
a reduction needs every cell up to date), each field's halo exchanged once per
step (a check right after a step reuses it). :func:`run_state` is
:func:`pgas.mpi.run` on a state dict and :func:`run_until_state`
:func:`pgas.mpi.run_until`: the same step, the same bits, and the same bits as
:func:`pgas.explicit.run_until`, whose kernels run here unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pgas.errors import PgasError
from pgas.grid import schedule
from pgas.loop.decision import check_decision
from pgas.loop.until import check_state_steps, choose_check_every
from pgas.references.mpi.block import Block, initialize, plan, setup, update_bounds
from pgas.references.mpi.checks import Reducer, all_finite, iterate, timed
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import MessageCounter, exchange, sides_of
from pgas.references.mpi.params import fitted_params
from pgas.references.mpi.result import RunResult

__all__ = ["State", "run_state", "run_until_state"]


class State:
    """The rank's blocks of a state dict (one :class:`Block` per field, ``k = 1``), its
    scalars, and the kernel's ``reduce`` and params; each field's halo is exchanged when
    read after a write, not again. :func:`pgas.mpi.run` on a state dict is
    ``advance(steps)``, :func:`pgas.mpi.run_until` ``advance`` and ``check`` in turn."""

    def __init__(self, kernel: Callable, init: dict, grid, halo, faces, bounds, dtype, params,
                 who: str) -> None:  # fmt: skip
        self.keys, self.blocks, self.scalars, self.fresh = tuple(init), {}, {}, {}
        for key, value in init.items():
            if callable(value):
                block = Block(grid, halo, faces, bounds, 1, dtype)
                initialize(block, value, grid)
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
        self.kernel, self.counter, self.reduce = kernel, MessageCounter(), Reducer(self.first)
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
                self.blocks[key].put(e[key], masks[key], 0, want[0], new[key])
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
        return done, all_finite(self.reduce.seen[seen:], self.scalars.values())

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
                 steps_per_exchange, params, who: str) -> tuple[State, str]:  # fmt: skip
    """A state dict's :class:`State` on this rank, checked, and the plan's note."""
    check_state_steps(steps_per_exchange)
    grid, halo, faces = setup(global_shape, halo, boundary, grid, dims)
    note = plan(global_shape, halo, grid.dims, 1).note
    bounds = update_bounds(grid, halo, faces, region)
    return State(kernel, init, grid, halo, faces, bounds, dtype, params, who), note


def run_state(kernel, init: dict, global_shape, dtype, steps, halo, boundary, region, grid,
               dims, snapshot_every, chunk, cells_per_value, steps_per_exchange, params,
               callback, gather) -> RunResult:  # fmt: skip
    """:func:`pgas.mpi.run` on a state dict of fields and scalars: ``steps`` steps, one per
    exchange, the same bits as :func:`pgas.mpi.run_until` after as many."""
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
    _, seconds = timed(lambda: state.advance(steps), state.grid.comm)
    return state.result(steps, seconds, note, callback, gather)


def run_until_state(kernel, init: dict, global_shape, dtype, converged, max_steps: int, halo,
                     boundary, region, grid, dims, check_every, steps_per_exchange, params,
                     callback, gather) -> RunResult:  # fmt: skip
    """:func:`pgas.mpi.run_until` on a state dict of fields and scalars (one step per exchange)."""
    state, note = _begin_state(kernel, init, global_shape, dtype, halo, boundary, region, grid,
                               dims, steps_per_exchange, params, "pgas.mpi.run_until")  # fmt: skip
    every, _ = choose_check_every(check_every, 1, True)
    n, done, finite, seconds = iterate(state.advance, lambda: state.check(converged), every,
                                        max_steps, state.grid.comm)  # fmt: skip
    result = state.result(n, seconds, note, callback, gather)
    return dataclasses.replace(result, converged=done, check_every=every, finite=finite)
