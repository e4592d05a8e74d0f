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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pgas.errors import HaloError, LayoutError, ShapeMismatchError
from pgas.grid.boundary import normalize_boundary
from pgas.grid.decomposition import halo_widths
from pgas.references.mpi.grid import CartGrid
from pgas.references.mpi.world import MPI

__all__ = ["MessageCounter", "check_exchange", "exchange", "exchange_halo", "fill_edges"]


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
        ext: the block with halo, shape ``local_shape[i] + 2*halo[i]``.
        grid: the layout.
        halo: ghost width, one for all axes or one per axis.
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
    """
    halo, faces = check_exchange(ext.shape, grid, halo, boundary)
    exchange(ext, grid, halo, faces, counter)


def check_exchange(shape: Sequence[int], grid: CartGrid, halo, boundary):
    """Validate an exchange once; return the halo widths and the normalized faces."""
    halo = halo_widths(halo, grid.ndim)
    faces = normalize_boundary(boundary, grid.ndim)
    want = tuple(n + 2 * h for n, h in zip(grid.local_shape, halo, strict=True))
    if tuple(shape) != want:
        raise ShapeMismatchError(
            f"ext.shape = {tuple(shape)}, but a block of {grid.local_shape} cells with halo "
            f"{halo} needs {want}; allocate local_shape + 2*halo per axis"
        )
    for i, (h, ax) in enumerate(zip(halo, grid.axes, strict=True)):
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

    ``ext`` may be a view (a deep halo's inner part) of a larger array.
    """
    for a, h in enumerate(halo):
        if h:
            _exchange_axis(ext, grid, a, halo, faces[a], counter)


_NOTHING = np.empty(0, np.uint8)


def _slabs(grid: CartGrid, a: int, halo: tuple[int, ...]):
    """Low ghost, high ghost, low cells, high cells of axis ``a``, as index tuples."""
    h, n = halo[a], grid.local_shape[a]
    # Earlier axes: full extent (their halos are filled); later axes: interior only.
    rest = [
        slice(None) if b < a else slice(halo[b], halo[b] + grid.local_shape[b])
        for b in range(grid.ndim)
    ]

    def sl(start: int, stop: int) -> tuple[slice, ...]:
        rest[a] = slice(start, stop)
        return tuple(rest)

    return sl(0, h), sl(h + n, 2 * h + n), sl(h, 2 * h), sl(n, n + h)


def _exchange_axis(ext, grid, a, halo, faces, counter) -> None:
    low_ghost, high_ghost, low_cells, high_cells = _slabs(grid, a, halo)
    if grid.periods[a] and grid.dims[a] == 1:
        ext[low_ghost] = ext[high_cells]
        ext[high_ghost] = ext[low_cells]
        return
    down, up = grid.neighbours[a]
    for src_cells, ghost, dest, source, tag in (
        (high_cells, low_ghost, up, down, 2 * a),
        (low_cells, high_ghost, down, up, 2 * a + 1),
    ):
        if dest == source == MPI.PROC_NULL:
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
    if down == MPI.PROC_NULL:
        _fill_edge(ext, low_ghost, low_cells, faces[0], a)
    if up == MPI.PROC_NULL:
        _fill_edge(ext, high_ghost, high_cells, faces[1], a)


def _fill_edge(ext, ghost, cells, bc, axis) -> None:
    ext[ghost] = bc.ghost(ext[cells], axis, np)  # the same rule as the JAX halo's


def fill_edges(ext: np.ndarray, grid: CartGrid, halo: tuple[int, ...], faces) -> None:
    """Re-fill the ghost cells beyond a non-periodic domain edge from the boundary condition.

    What a deep halo needs between its sub-steps: no messages, only the
    faces of this rank that lie on the domain's edge, over the whole extent
    of the other axes, axis by axis (a later axis wins in the corners, as in
    :func:`exchange`).
    """
    for a, h in enumerate(halo):
        if not h or grid.periods[a]:
            continue
        n = grid.local_shape[a]
        for side, neighbour in enumerate(grid.neighbours[a]):
            if neighbour != MPI.PROC_NULL:
                continue
            ghost, cells = (slice(0, h), slice(h, 2 * h)) if side == 0 else (
                slice(h + n, 2 * h + n), slice(n, n + h))  # fmt: skip
            index = [slice(None)] * grid.ndim
            _fill_edge(ext, _at(index, a, ghost), _at(index, a, cells), faces[a][side], a)


def _at(index: list[slice], axis: int, s: slice) -> tuple[slice, ...]:
    out = list(index)
    out[axis] = s
    return tuple(out)
