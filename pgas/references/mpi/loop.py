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

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.errors import IndexingError, ShapeMismatchError
from pgas.grid import schedule
from pgas.grid.boundary import normalize_boundary
from pgas.grid.decomposition import BlockAxis, dims_create, halo_sides
from pgas.loop.plan import Plan, choose_steps_per_exchange
from pgas.references.mpi.collectives import gather as gather_to_root
from pgas.references.mpi.exchange import (
    MessageCounter,
    check_exchange,
    exchange,
    fill_edges,
    sides_of,
)
from pgas.references.mpi.grid import CartGrid, cart_grid, fill_local
from pgas.references.mpi.params import bind, fitted_params
from pgas.references.mpi.world import MPI, abort_on_error, check_world

__all__ = ["RunResult", "plan", "run"]

_SLAB = 1 << 17  # cells per slab of a sub-step: the kernel's temporaries are a slab's


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns.

    Attributes:
        field: the final global field on rank 0 (``None`` elsewhere, and everywhere
            when :func:`run` was called with ``gather=False``); for a state dict, a
            dict of each gathered field and each scalar.
        seconds: wall time of the time loop (between barriers; no set-up, no gather).
        steps: time steps run.
        messages_per_step: messages sent per physical step (total / steps),
            summed over ranks.
        bytes_per_step: bytes sent per physical step, summed over ranks.
        rank_messages_per_step: messages sent per physical step by each rank.
        rank_bytes_per_step: bytes sent per physical step by each rank.
        grid: description of the layout (:meth:`CartGrid.describe`).
        dims: ranks per axis.
        snapshots: with ``snapshot_every=k``, the global field at steps
            ``0, k, 2k, ..., steps`` stacked on a leading axis, on rank 0 only
            (``None`` elsewhere and without ``snapshot_every``).
        snapshot_steps: the step number of each snapshot (every rank).
        steps_per_exchange: ``k``, physical steps per halo exchange.
        note: why ``k`` is lower than requested (blocks too small), else ``""``.
        wall_seconds: wall time of the time loop as the caller waited for it,
            snapshot gathers and callbacks included (``seconds`` leaves them out).
        converged: from :func:`pgas.mpi.run_until`: whether ``converged`` held at
            the last check (``None`` from :func:`run`).
        check_every: from :func:`pgas.mpi.run_until`: steps between checks.
        allreduces: ``Allreduce`` calls of this rank (one per reduction, two per
            reproducible sum): the checks of :func:`pgas.mpi.run_until` and the
            reductions of a state dict's kernel.
        finite: from :func:`pgas.mpi.run_until`: ``False`` where it stopped at a
            check whose reductions (or a float scalar of a state dict) were NaN or
            infinite, as :func:`pgas.run_until` stops (``None`` from :func:`run`).
    """

    field: np.ndarray | None
    seconds: float
    steps: int
    messages_per_step: float
    bytes_per_step: float
    rank_messages_per_step: tuple[float, ...]
    rank_bytes_per_step: tuple[float, ...]
    grid: str
    dims: tuple[int, ...]
    snapshots: np.ndarray | None = dataclasses.field(default=None, repr=False)
    snapshot_steps: tuple[int, ...] = ()
    steps_per_exchange: int = 1
    note: str = ""
    wall_seconds: float = float("nan")
    converged: bool | None = None
    check_every: int | None = None
    allreduces: int = 0
    finite: bool | None = None


def _update_bounds(grid: CartGrid, halo, faces, region) -> list[tuple[int, int]]:
    """Global ``[lo, hi)`` per axis of the cells that are updated (region minus Keep cells)."""
    if region is None:
        region = (slice(None),) * grid.ndim
    elif isinstance(region, slice):
        region = (region,)
    if not isinstance(region, tuple) or len(region) != grid.ndim:
        raise IndexingError(
            f"region = {region!r}: give a tuple of {grid.ndim} slices, "
            f"e.g. {(slice(1, -1),) * grid.ndim}"
        )
    bounds = []
    for a, (s, ax) in enumerate(zip(region, grid.axes, strict=True)):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise IndexingError(
                f"region[{a}] = {s!r}: each entry must be a slice with unit "
                f"step; write slice(i, i + 1) for a single index"
            )
        lo, hi, _ = s.indices(ax.size)
        keep = max(sides_of(halo)[a])  # the larger side, as the automatic path keeps
        if faces[a][0].keeps:
            lo = max(lo, keep)
        if faces[a][1].keeps:
            hi = min(hi, ax.size - keep)
        bounds.append((lo, hi))
    return bounds


class _Block:
    """This rank's cells with a ghost rim ``k * halo`` wide (``k * below`` before the block
    and ``k * above`` after it, per axis), and the sub-step machinery."""

    def __init__(self, grid, halo, faces, bounds, k, dtype) -> None:
        self.grid, self.faces, self.k = grid, faces, k
        self.halo = sides_of(halo)  # (below, above) per axis
        self.rim = tuple((k * lo, k * hi) for lo, hi in self.halo)
        n = grid.local_shape
        self.ext = np.zeros([m + lo + hi for m, (lo, hi) in zip(n, self.rim)], np.dtype(dtype))
        self.core = self.ext[tuple(slice(r, r + m) for m, (r, _) in zip(n, self.rim))]
        # Per axis: may the cell at each position of ext take the kernel's value?
        self.masks = []
        for a, (lo, hi) in enumerate(bounds):
            g = grid.axes[a].offset(grid.coords[a]) - self.rim[a][0] + np.arange(self.ext.shape[a])
            ax_size = grid.axes[a].size
            g = g % ax_size if grid.periods[a] else g
            self.masks.append((g >= lo) & (g < hi) & (g >= 0) & (g < ax_size))
        self.checked = False

    def view(self, width: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, list | None]:
        """The part of ``ext`` with a rim ``width`` wide (``(below, above)`` per axis), and
        its update mask per axis (of the cells inside the halo; None: all)."""
        cut = tuple(slice(r - lo, r + m + hi) for (r, _), (lo, hi), m
                    in zip(self.rim, width, self.grid.local_shape))  # fmt: skip
        inner = [
            m[c][lo : len(m[c]) - hi] for m, c, (lo, hi) in zip(self.masks, cut, self.halo)
        ]  # fmt: skip
        if all(m.all() for m in inner):
            return self.ext[cut], None
        return self.ext[cut], inner

    def advance(self, steps: int, kernel: Callable, counter: MessageCounter,
                whole: bool = False) -> None:  # fmt: skip
        """One exchange of a rim ``steps * halo`` wide, then ``steps`` sub-steps (``whole``:
        the kernel on the whole extended block, for a kernel that reads where it is)."""
        width = tuple((steps * lo, steps * hi) for lo, hi in self.halo)
        e, masks = self.view(width)
        exchange(e, self.grid, width, self.faces, counter)
        for sub in range(steps):
            self.substep(e, masks, kernel, whole)
            if sub < steps - 1:
                fill_edges(e, self.grid, width, self.faces)

    def substep(self, e: np.ndarray, masks: list[np.ndarray] | None, kernel: Callable,
                whole: bool = False) -> None:  # fmt: skip
        """``e``'s cells inside the halo take ``kernel(e)`` where ``masks`` allow, in place.

        The kernel runs on slabs of rows (with their halo), so its temporaries are a
        slab's, not the block's. A slab's result is written once the next slab is
        computed (that one still reads the old rows at their border; a slab is at
        least ``below + above`` rows, so the one after never does), so the values are
        those of one call on the whole block, bitwise.
        """
        lo, hi = self.halo[0]
        rows = e.shape[0] - lo - hi
        across = int(np.prod([s - b - a for s, (b, a) in zip(e.shape[1:], self.halo[1:])]))
        tile = max(rows, 1) if whole else max(lo + hi, 1, _SLAB // max(across, 1))
        held = None
        for r0 in range(0, max(rows, 1), tile):
            r1 = min(r0 + tile, rows)
            part = e[r0 : r1 + lo + hi]
            new = np.asarray(kernel(part))
            if not self.checked:
                self.check_shape(new.shape, part.shape)
            if held is not None:
                self._put(e, masks, *held)
            held = (r0, r1, new)
        if held is not None:
            self._put(e, masks, *held)

    def _put(self, e, masks, r0: int, r1: int, new: np.ndarray) -> None:
        """Rows ``r0:r1`` of the cells inside the halo take ``new`` where ``masks`` allow."""
        first = self.halo[0][0]
        inner = tuple(slice(b, s - a) for (b, a), s in zip(self.halo[1:], e.shape[1:]))
        target = e[(slice(first + r0, first + r1), *inner)]
        if masks is None:
            target[...] = new
            return
        mask = masks[0][r0:r1]
        for m in masks[1:]:
            mask = mask[..., None] & m
        np.copyto(target, new, where=mask, casting="unsafe")  # as `target[...] = new`

    def check_shape(self, got: tuple[int, ...], ext_shape: tuple[int, ...]) -> None:
        want = tuple(s - lo - hi for s, (lo, hi) in zip(ext_shape, self.halo))
        if tuple(got) != want:
            symmetric = all(lo == hi for lo, hi in self.halo)
            halo = tuple(lo for lo, _ in self.halo) if symmetric else self.halo
            raise ShapeMismatchError(
                f"kernel returned shape {tuple(got)} on rank {self.grid.rank} for a block of "
                f"{ext_shape} cells with halo {halo}; return the new values of the cells "
                f"inside the halo (shape {want}), e.g. 0.5*e[1:-1] + 0.25*(e[:-2] + e[2:]), "
                f"or e[1:] - c*(e[1:] - e[:-1]) for halo ((1, 0),)"
            )
        self.checked = True


def plan(global_shape: Sequence[int], halo: int | Sequence[int], dims: int | Sequence[int],
         steps_per_exchange: int | str = "auto") -> Plan:  # fmt: skip
    """The plan of an MPI run: ``k`` for the smallest block of ``dims`` ranks, a halo ``k * halo``.

    Args:
        global_shape: cells per axis of the global field.
        halo: halo width (one for all axes, one per axis, or a ``(below, above)``
            pair per axis).
        dims: ranks per axis, or the number of ranks (split as ``MPI_Dims_create``).
        steps_per_exchange: ``k`` (an int >= 1) or ``"auto"``.

    Single-buffered, on the CPU; what :func:`run` runs for the same arguments.

    >>> p = plan((11,), 1, 2, "auto")
    >>> p.steps_per_exchange, p.halo, p.double
    (5, (5,), False)
    >>> plan((11,), ((1, 0),), 2, 4).exchanged
    ((4, 0),)
    """
    if isinstance(dims, int):
        dims = dims_create(dims, len(global_shape))
    sides = halo_sides(halo, len(global_shape))
    widths = tuple(max(p) for p in sides)
    blocks = [BlockAxis(n, d).min_length for n, d in zip(global_shape, dims, strict=True)]
    choice = choose_steps_per_exchange(steps_per_exchange, blocks, widths)
    k = choice.steps_per_exchange
    one_sided = None if all(lo == hi for lo, hi in sides) else sides
    return Plan(widths, choice, tuple(k * w for w in widths), "cpu", sides=one_sided)


def _setup(global_shape, halo, boundary, grid, dims):
    faces = normalize_boundary(boundary, len(global_shape))
    if grid is None:
        grid = cart_grid(global_shape, dims, tuple(f[0].periodic for f in faces))
    elif tuple(global_shape) != grid.global_shape:
        raise ShapeMismatchError(
            f"global_shape = {tuple(global_shape)} but grid has "
            f"{grid.global_shape}; pass the grid built for this shape"
        )
    sides = halo_sides(halo, grid.ndim)
    shape = [n + lo + hi for n, (lo, hi) in zip(grid.local_shape, sides)]
    halo, faces = check_exchange(shape, grid, sides, faces)
    return grid, halo, faces


def _initialize(block: _Block, init: Callable, grid: CartGrid, cells_per_value: int = 1) -> None:
    try:  # a slab at a time: no block-sized temporaries
        fill_local(block.core, init, grid, max(1, (1 << 16) // max(1, cells_per_value)))
    except ValueError as err:
        raise ShapeMismatchError(
            f"init returned values that do not fit a block of {grid.local_shape} (filled a "
            f"slab of rows at a time): compute it elementwise from the index arrays it "
            f"receives ({err})"
        ) from None


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
            from pgas.references.mpi.until import _run_state  # until imports this module

            return _run_state(kernel, init, global_shape, dtype, steps, halo, boundary, region,
                              grid, dims, snapshot_every, chunk, cells_per_value,
                              steps_per_exchange, params, callback, gather)  # fmt: skip
        grid, halo, faces = _setup(global_shape, halo, boundary, grid, dims)
        steps = schedule.check_steps(steps)
        every, chunk = schedule.check_schedule(steps, snapshot_every, chunk)
        choice = plan(global_shape, halo, grid.dims, steps_per_exchange).choice
        bounds = _update_bounds(grid, halo, faces, region)
        block = _Block(grid, halo, faces, bounds, choice.steps_per_exchange, dtype)
        _initialize(block, init, grid, cells_per_value)
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
