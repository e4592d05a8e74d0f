"""This rank's block on the MPI path: its cells with a ghost rim, and the deep-halo sub-steps.

Contract: :func:`setup` checks a run's shape, halo and boundary and builds its
:class:`~pgas.mpi.grid.CartGrid`; :func:`update_bounds` gives the cells that
take the kernel's value (``region`` minus the outermost ``halo`` cells of a
``Keep`` face); :class:`Block` holds this rank's cells with a rim ``k *
halo`` wide (``k * below`` before and ``k * above`` after the block, per
axis), filled by :func:`initialize`, and advances them: one exchange, then
``k`` sub-steps on slabs of rows, each writing the kernel's values where the
update mask (a function of the global index only) allows, bitwise equal to a
single-process NumPy loop. :func:`plan` chooses ``k`` for the smallest block of
the ranks (:func:`pgas.loop.plan.choose_steps_per_exchange`). Shared by
:func:`pgas.mpi.run`, :func:`pgas.mpi.run_until` and their state dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pgas.errors import IndexingError, ShapeMismatchError
from pgas.grid.boundary import normalize_boundary
from pgas.grid.decomposition import BlockAxis, dims_create, halo_sides
from pgas.loop.plan import Plan, choose_steps_per_exchange
from pgas.references.mpi.exchange import (
    MessageCounter,
    check_exchange,
    exchange,
    fill_edges,
    sides_of,
)
from pgas.references.mpi.grid import CartGrid, cart_grid, fill_local

__all__ = ["Block", "plan", "setup", "update_bounds", "initialize"]

_SLAB = 1 << 17  # cells per slab of a sub-step: the kernel's temporaries are a slab's


def update_bounds(grid: CartGrid, halo, faces, region) -> list[tuple[int, int]]:
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


class Block:
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
                self.put(e, masks, *held)
            held = (r0, r1, new)
        if held is not None:
            self.put(e, masks, *held)

    def put(self, e, masks, r0: int, r1: int, new: np.ndarray) -> None:
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


def setup(global_shape, halo, boundary, grid, dims):
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


def initialize(block: Block, init: Callable, grid: CartGrid, cells_per_value: int = 1) -> None:
    try:  # a slab at a time: no block-sized temporaries
        fill_local(block.core, init, grid, max(1, (1 << 16) // max(1, cells_per_value)))
    except ValueError as err:
        raise ShapeMismatchError(
            f"init returned values that do not fit a block of {grid.local_shape} (filled a "
            f"slab of rows at a time): compute it elementwise from the index arrays it "
            f"receives ({err})"
        ) from None
