"""The Cartesian grid of ranks: which block of the global field each rank holds.

Array axis ``i`` is Cartesian dimension ``i``; ``dims`` defaults to
:func:`pgas.decomposition.dims_create`; ranks are numbered row-major
(``reorder=False``). The rank at coordinate ``c`` on axis ``i`` holds
``BlockAxis(N_i, dims[i]).length(c)`` cells from global index ``offset(c)``:
the same blocks as device ``c`` on the JAX backends, no padding, and no rank
ever holds the global array (except the root of :func:`pgas.mpi.gather`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pgas.errors import DeviceCountError, LayoutError
from pgas.grid.decomposition import BlockAxis, dims_create
from pgas.references.mpi.world import MPI

__all__ = ["CartGrid", "cart_grid", "local_coordinates"]


@dataclasses.dataclass(frozen=True, eq=False)
class CartGrid:
    """A global grid cut into one block per rank of a Cartesian communicator.

    Attributes:
        comm: the ``MPI.Cartcomm`` (one Cartesian dimension per array axis).
        global_shape: cells of the whole field per axis.
        dims: ranks per axis.
        periods: whether each axis wraps around.
        coords: this rank's Cartesian coordinates.
        axes: the block distribution of each axis.
        neighbours: ``(low, high)`` rank per axis; ``MPI.PROC_NULL`` beyond a
            non-periodic edge.
    """

    comm: Any
    global_shape: tuple[int, ...]
    dims: tuple[int, ...]
    periods: tuple[bool, ...]
    coords: tuple[int, ...]
    axes: tuple[BlockAxis, ...]
    neighbours: tuple[tuple[int, int], ...]

    @property
    def rank(self) -> int:
        """This rank in :attr:`comm`."""
        return self.comm.rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.comm.size

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.global_shape)

    def block(self, coords: Sequence[int] | None = None) -> tuple[slice, ...]:
        """Global slices of the block at ``coords`` (default: this rank's)."""
        coords = self.coords if coords is None else coords
        return tuple(
            slice(ax.offset(c), ax.offset(c) + ax.length(c))
            for ax, c in zip(self.axes, coords, strict=True)
        )

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Cells this rank holds per axis (without halo)."""
        return tuple(ax.length(c) for ax, c in zip(self.axes, self.coords, strict=True))

    def describe(self) -> str:
        """One line: global shape, rank layout and block lengths."""
        return (
            f"global {self.global_shape} over {self.size} rank(s): dims {self.dims}, "
            f"periodic {self.periods}, block lengths {tuple(a.lengths for a in self.axes)}"
        )


def cart_grid(
    global_shape: Sequence[int],
    dims: Sequence[int] | None = None,
    periods: bool | Sequence[bool] = False,
    comm: Any = None,
) -> CartGrid:
    """Build the Cartesian communicator and block layout for a global grid.

    Collective over ``comm``.

    Args:
        global_shape: cells per axis of the global field.
        dims: ranks per axis (1 for an axis that is not split); default
            ``dims_create(comm.size, len(global_shape))``.
        periods: one flag for all axes or one per axis (``True`` = wraps).
        comm: the communicator to split (default ``MPI.COMM_WORLD``).

    Returns:
        The :class:`CartGrid` of this rank.

    Raises:
        DeviceCountError: if ``prod(dims)`` differs from the number of ranks.
        LayoutError: on a wrong ``dims``/``periods`` length or an axis with
            fewer cells than ranks.

    >>> grid = cart_grid((1001,))          # doctest: +SKIP
    >>> grid.local_shape                    # rank 0 of 4  # doctest: +SKIP
    (251,)
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    shape = tuple(int(n) for n in global_shape)
    ndim = len(shape)
    if ndim < 1 or any(n < 1 for n in shape):
        raise LayoutError(f"global_shape = {shape}: give at least one axis, each >= 1 cell")
    dims = dims_create(comm.size, ndim) if dims is None else tuple(int(d) for d in dims)
    if len(dims) != ndim or any(d < 1 for d in dims):
        raise LayoutError(
            f"dims = {dims} for a {ndim}-D grid: give {ndim} positive integers "
            f"(1 for an axis that is not split)"
        )
    if math.prod(dims) != comm.size:
        raise DeviceCountError(
            f"dims = {dims} asks for {math.prod(dims)} ranks but the communicator has "
            f"{comm.size}; launch with `mpiexec -n {math.prod(dims)}` or pass dims whose "
            f"product is {comm.size} (or dims=None)"
        )
    periods = (
        (bool(periods),) * ndim
        if isinstance(periods, (bool, np.bool_))
        else tuple(bool(p) for p in periods)
    )
    if len(periods) != ndim:
        raise LayoutError(f"periods = {periods} for a {ndim}-D grid: give one flag or {ndim}")
    for i, (n, d) in enumerate(zip(shape, dims, strict=True)):
        if n < d:
            raise LayoutError(
                f"global_shape[{i}] = {n} cells cannot be split over dims[{i}] = {d} ranks; "
                f"use fewer ranks on axis {i} (dims=...) or a larger grid"
            )
    cart = comm.Create_cart(dims, periods=periods, reorder=False)
    return CartGrid(
        comm=cart,
        global_shape=shape,
        dims=dims,
        periods=periods,
        coords=tuple(cart.Get_coords(cart.rank)),
        axes=tuple(BlockAxis(n, d) for n, d in zip(shape, dims, strict=True)),
        neighbours=tuple(tuple(cart.Shift(i, 1)) for i in range(ndim)),
    )


def local_coordinates(grid: CartGrid) -> tuple[np.ndarray, ...]:
    """Global indices of this rank's cells, one 1-D array per axis.

    Build the initial field from them with
    ``np.meshgrid(*local_coordinates(grid), indexing="ij")``.
    """
    return tuple(np.arange(s.start, s.stop) for s in grid.block())


def fill_local(out: np.ndarray, init, grid: CartGrid, cells: int = 1 << 16) -> np.ndarray:
    """Fill ``out`` (this rank's block) with ``init`` of its global indices, a slab at a time.

    ``init(*index_arrays)`` is elementwise, so it is called on slabs of about
    ``cells`` cells along the first axis: the temporaries it makes stay a few
    MiB, whatever the block. Returns ``out``.

    Raises:
        ValueError: ``init`` returned values that do not fit a slab.

    >>> fill_local(np.zeros(5), lambda i: 2 * i, cart_grid((5,), (1,)), cells=2)
    array([0., 2., 4., 6., 8.])
    """
    coords = local_coordinates(grid)
    rows = max(1, cells // max(1, int(np.prod([len(c) for c in coords[1:]], dtype=np.int64))))
    for r0 in range(0, len(coords[0]), rows):
        index = np.meshgrid(coords[0][r0 : r0 + rows], *coords[1:], indexing="ij")
        out[r0 : r0 + rows] = init(*index)
    return out
