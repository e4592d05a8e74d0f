"""Halo exchange between the blocks of a :class:`~pgas.mpi.CartGrid` (``Sendrecv``).

A local block is stored with ``halo[i]`` ghost cells on both faces of axis
``i``. :func:`exchange_halo` fills them in place, axis by axis (later axes
send slabs that include the filled halos of earlier axes, so edges and
corners are right for 9- and 27-point stencils). At a non-periodic domain
edge the ghost cells come from the boundary condition (Dirichlet: the value;
Neumann and Keep: the mirror, ghost ``-1-j`` = cell ``j``). On a
non-periodic axis of ``D`` ranks, ``D - 1`` messages move each way.

ImplicitGlobalGrid.jl's ``update_halo!`` is the model. A deep halo (``k``
steps per exchange) is the same exchange, ``k`` times wider.

Halos per side: ``halo`` may give a ``(below, above)`` pair per axis (a block
then has ``below`` ghost cells before it and ``above`` after it); a side of
width 0 sends no message, so an upwind step's ``halo=((1, 0),)`` sends one
message per rank and axis, up, as the automatic path's one collective-permute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pgas.errors import HaloError, LayoutError, ShapeMismatchError
from pgas.grid.boundary import normalize_boundary
from pgas.grid.decomposition import halo_sides
from pgas.references.mpi.grid import CartGrid
from pgas.references.mpi.world import MPI

__all__ = ["MessageCounter", "check_exchange", "exchange", "exchange_halo", "fill_edges",
           "sides_of"]  # fmt: skip


@dataclasses.dataclass
class MessageCounter:
    """Messages and bytes this rank has sent (self-copies are not messages)."""

    messages: int = 0
    bytes: int = 0


def exchange_halo(
    ext: np.ndarray,
    grid: CartGrid,
    halo: int | Sequence[int],
    boundary: object,
    counter: MessageCounter | None = None,
) -> None:
    """Fill the ghost cells of a local block in place.

    Axis by axis: ``Sendrecv`` of contiguous copies with the two neighbours
    (tag ``2*axis`` for data moving up, ``2*axis + 1`` moving down), a local
    copy on a periodic axis with one rank, the boundary condition at a
    non-periodic domain edge.

    Args:
        ext: the block with halo, shape ``local_shape[i] + 2*halo[i]``
            (``local_shape[i] + below + above`` for pairs).
        grid: the layout.
        halo: ghost width, one for all axes, one per axis, or a ``(below, above)``
            pair per axis.
        boundary: as accepted by :func:`pgas.boundary.normalize_boundary`;
            periodic axes must match ``grid.periods``.
        counter: if given, incremented with the messages and bytes sent.

    Raises:
        HaloError: a halo wider than the smallest block of its axis.
        LayoutError: a periodic boundary on an axis the grid does not wrap
            (or the reverse).
        ShapeMismatchError: ``ext`` of the wrong shape.

    >>> from pgas.grid.boundary import Keep
    >>> from pgas.references.mpi import cart_grid
    >>> ext = np.array([0.0, 1.0, 2.0, 3.0, 0.0])    # one rank: 3 cells, halo 1
    >>> exchange_halo(ext, cart_grid((3,)), 1, Keep())
    >>> ext
    array([1., 1., 2., 3., 3.])
    >>> ext = np.array([0.0, 1.0, 2.0, 3.0])          # one ghost cell below only
    >>> exchange_halo(ext, cart_grid((3,)), ((1, 0),), Keep())
    >>> ext
    array([1., 1., 2., 3.])
    """
    halo, faces = check_exchange(ext.shape, grid, halo, boundary)
    exchange(ext, grid, halo, faces, counter)


def sides_of(halo) -> tuple[tuple[int, int], ...]:
    """``(below, above)`` per axis from widths per axis or pairs (as :func:`check_exchange`
    returns them).

    >>> sides_of((1, 0)), sides_of(((1, 0),))
    (((1, 1), (0, 0)), ((1, 0),))
    """
    return tuple((h, h) if isinstance(h, (int, np.integer)) else (int(h[0]), int(h[1]))
                 for h in halo)  # fmt: skip


def check_exchange(shape: Sequence[int], grid: CartGrid, halo, boundary):
    """Validate an exchange once; return the halo and the normalized faces.

    The halo comes back as one width per axis where both sides are equal, else as
    ``(below, above)`` pairs (:func:`sides_of` reads either).
    """
    sides = halo_sides(halo, grid.ndim)
    faces = normalize_boundary(boundary, grid.ndim)
    want = tuple(n + lo + hi for n, (lo, hi) in zip(grid.local_shape, sides, strict=True))
    symmetric = all(lo == hi for lo, hi in sides)
    halo = tuple(lo for lo, _ in sides) if symmetric else sides
    if tuple(shape) != want:
        per = "2*halo" if symmetric else "below + above"
        raise ShapeMismatchError(
            f"ext.shape = {tuple(shape)}, but a block of {grid.local_shape} cells with halo "
            f"{halo} needs {want}; allocate local_shape + {per} per axis"
        )
    for i, (h, ax) in enumerate(zip((max(p) for p in sides), grid.axes, strict=True)):
        if h > ax.min_length:
            raise HaloError(
                f"halo[{i}] = {h} is wider than the smallest block on axis {i} "
                f"({ax.min_length} cells of {ax.size} over {ax.parts} rank(s)); use fewer "
                f"ranks on axis {i} (dims=...), a larger grid, or a narrower stencil"
            )
    for a, (lo, _) in enumerate(faces):
        if lo.periodic != grid.periods[a]:
            raise LayoutError(
                f"boundary on axis {a} is {lo!r} but the grid has periods[{a}] = "
                f"{grid.periods[a]}; build the grid with cart_grid(..., periods="
                f"{tuple(f[0].periodic for f in faces)})"
            )
    return halo, faces


def exchange(ext, grid: CartGrid, halo: tuple[int, ...], faces, counter=None) -> None:
    """:func:`exchange_halo` without the checks (``halo``, ``faces``: :func:`check_exchange`).

    ``ext`` may be a view (a deep halo's inner part) of a larger array; ``halo``
    widths per axis or ``(below, above)`` pairs.
    """
    sides = sides_of(halo)
    for a, (lo, hi) in enumerate(sides):
        if lo or hi:
            _exchange_axis(ext, grid, a, sides, faces[a], counter)


_NOTHING = np.empty(0, np.uint8)


def _slabs(grid: CartGrid, a: int, sides: tuple[tuple[int, int], ...]):
    """Index tuples of axis ``a``: low ghost, high ghost, the cells sent down (the first
    ``above``), the cells sent up (the last ``below``), and the cells the low and high
    ghosts mirror (the first ``below``, the last ``above``)."""
    (lo, hi), n = sides[a], grid.local_shape[a]
    # Earlier axes: full extent (their halos are filled); later axes: interior only.
    rest = [
        slice(None) if b < a else slice(sides[b][0], sides[b][0] + grid.local_shape[b])
        for b in range(grid.ndim)
    ]

    def sl(start: int, stop: int) -> tuple[slice, ...]:
        rest[a] = slice(start, stop)
        return tuple(rest)

    return (sl(0, lo), sl(lo + n, lo + n + hi), sl(lo, lo + hi), sl(n, n + lo),
            sl(lo, 2 * lo), sl(lo + n - hi, lo + n))  # fmt: skip


def _exchange_axis(ext, grid, a, sides, faces, counter) -> None:
    low_ghost, high_ghost, down_cells, up_cells, low_mirror, high_mirror = _slabs(grid, a, sides)
    lo, hi = sides[a]
    if grid.periods[a] and grid.dims[a] == 1:
        ext[low_ghost] = ext[up_cells]
        ext[high_ghost] = ext[down_cells]
        return
    down, up = grid.neighbours[a]
    for src_cells, ghost, dest, source, tag, width in (
        (up_cells, low_ghost, up, down, 2 * a, lo),
        (down_cells, high_ghost, down, up, 2 * a + 1, hi),
    ):
        if dest == source == MPI.PROC_NULL or not width:  # a side nobody reads: no message
            continue
        send = _NOTHING if dest == MPI.PROC_NULL else np.ascontiguousarray(ext[src_cells])
        target = ext[ghost]
        recv = target if target.flags.c_contiguous else np.empty(target.shape, ext.dtype)
        grid.comm.Sendrecv([send, MPI.BYTE], dest, tag, [recv, MPI.BYTE], source, tag)
        if dest != MPI.PROC_NULL and counter is not None:
            counter.messages += 1
            counter.bytes += send.nbytes
        if source != MPI.PROC_NULL and recv is not target:
            ext[ghost] = recv
    if down == MPI.PROC_NULL and lo:
        _fill_edge(ext, low_ghost, low_mirror, faces[0], a)
    if up == MPI.PROC_NULL and hi:
        _fill_edge(ext, high_ghost, high_mirror, faces[1], a)


def _fill_edge(ext, ghost, cells, bc, axis) -> None:
    ext[ghost] = bc.ghost(ext[cells], axis, np)  # the same rule as the JAX halo's


def fill_edges(ext: np.ndarray, grid: CartGrid, halo: tuple[int, ...], faces) -> None:
    """Re-fill the ghost cells beyond a non-periodic domain edge from the boundary condition.

    What a deep halo needs between its sub-steps: no messages, only the
    faces of this rank that lie on the domain's edge, over the whole extent
    of the other axes, axis by axis (a later axis wins in the corners, as in
    :func:`exchange`). ``halo``: widths per axis or ``(below, above)`` pairs.
    """
    for a, (lo, hi) in enumerate(sides_of(halo)):
        if grid.periods[a]:
            continue
        n = grid.local_shape[a]
        for side, neighbour in enumerate(grid.neighbours[a]):
            if neighbour != MPI.PROC_NULL or not (lo, hi)[side]:
                continue
            ghost, cells = (slice(0, lo), slice(lo, 2 * lo)) if side == 0 else (
                slice(lo + n, lo + n + hi), slice(lo + n - hi, lo + n))  # fmt: skip
            index = [slice(None)] * grid.ndim
            _fill_edge(ext, _at(index, a, ghost), _at(index, a, cells), faces[a][side], a)


def _at(index: list[slice], axis: int, s: slice) -> tuple[slice, ...]:
    out = list(index)
    out[axis] = s
    return tuple(out)
