"""How a global axis of N cells is cut into blocks, one per process or device.

pgas uses the block distribution MPI codes use, on every backend: N cells over
D parts give the first ``N % D`` blocks ``N // D + 1`` cells and the others
``N // D``. Every block is stored with the same physical size
``ceil(N / D)``; a short block carries one padding cell at its end, which no
result ever shows. This layout lets a size the device count does not divide
(``1_000_003`` cells on 8 devices, or ``N + 2``) be sharded by JAX, and makes
block ``b`` on a device hold exactly the cells rank ``b`` holds under
``mpiexec``.

:func:`dims_create` splits a device count over k mesh axes the way
``MPI_Dims_create`` does; :func:`halo_widths` reads a halo width given as one
number or one per axis, :func:`halo_sides` one also given per side of each axis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pgas.errors import DeviceCountError, HaloError

__all__ = ["BlockAxis", "dims_create", "halo_widths", "halo_sides", "Ext", "ext_sides", "ext_pair",
           "ext_of"]  # fmt: skip


def halo_widths(halo: int | Sequence[int], ndim: int, name: str = "halo") -> tuple[int, ...]:
    """One ghost width per axis from one width for all axes or one per axis.

    Args:
        halo: a whole number >= 0, or a sequence of ``ndim`` of them.
        ndim: number of array axes.
        name: the parameter's name in the error message.

    Returns:
        ``ndim`` widths.

    Raises:
        HaloError: a negative or non-integer width, or the wrong number of them.

    >>> halo_widths(1, 3)
    (1, 1, 1)
    >>> halo_widths((2, 0), 2)
    (2, 0)
    """
    single = isinstance(halo, (int, np.integer)) and not isinstance(halo, bool)
    items = [halo] * ndim if single else list(halo) if isinstance(halo, Sequence) else None
    if (
        items is None
        or len(items) != ndim
        or not all(isinstance(h, (int, np.integer)) and not isinstance(h, bool) for h in items)
        or any(h < 0 for h in items)
    ):
        raise HaloError(
            f"{name} = {halo!r} for a {ndim}-D array: give one whole number >= 0 or {ndim} "
            f"of them, e.g. {name}=1 or {name}={(1,) * ndim}"
        )
    return tuple(int(h) for h in items)


def _whole(h) -> bool:
    return isinstance(h, (int, np.integer)) and not isinstance(h, bool) and h >= 0


def halo_sides(halo, ndim: int, name: str = "halo") -> tuple[tuple[int, int], ...]:
    """Ghost widths per side of each axis: ``(below, above)`` pairs.

    ``halo`` is one whole number for every side, one per axis (both sides), or
    one ``(below, above)`` pair per axis: the cells a stencil reads below
    (lower indices) and above each block. A one-sided stencil, such as an
    upwind step reading ``u[:-1]`` for ``u[1:]``, has ``halo=((1, 0),)``.

    Args:
        halo: as above.
        ndim: number of array axes.
        name: the parameter's name in the error message.

    Raises:
        HaloError: a negative or non-integer width, or the wrong number of them.

    >>> halo_sides(1, 2)
    ((1, 1), (1, 1))
    >>> halo_sides((2, 0), 2)
    ((2, 2), (0, 0))
    >>> halo_sides(((1, 0), 2), 2)
    ((1, 0), (2, 2))
    """
    items = [halo] * ndim if _whole(halo) else list(halo) if isinstance(halo, Sequence) else None
    pairs = []
    for h in items if items is not None and len(items) == ndim else ():
        if _whole(h):
            pairs.append((int(h), int(h)))
        elif isinstance(h, Sequence) and len(h) == 2 and all(_whole(x) for x in h):
            pairs.append((int(h[0]), int(h[1])))
    if len(pairs) != ndim:
        example = ((1, 0),) * ndim
        raise HaloError(
            f"{name} = {halo!r} for a {ndim}-D array: give one whole number >= 0, {ndim} of "
            f"them (one per axis), or {ndim} (below, above) pairs of them (one per side of "
            f"each axis), e.g. {name}=1, {name}={(1,) * ndim} or {name}={example}"
        )
    return tuple(pairs)


Ext = tuple["int | tuple[int, int]", ...]
"""Halo cells a block keeps per axis, in the ``halo=`` form: an int where both sides are
equal, else ``(below, above)`` (what :attr:`pgas.GlobalArray.ext` holds)."""


def ext_sides(ext: Ext) -> tuple[tuple[int, int], ...]:
    """``ext`` as ``(below, above)`` per axis.

    >>> ext_sides((2, (1, 0)))
    ((2, 2), (1, 0))
    """
    return tuple(ext_pair(e) for e in ext)


def ext_pair(e: int | tuple[int, int]) -> tuple[int, int]:
    """One axis's entry of an :data:`Ext` as ``(below, above)``."""
    return (e, e) if isinstance(e, (int, np.integer)) else (e[0], e[1])


def ext_of(sides: Sequence[tuple[int, int]]) -> Ext:
    """``(below, above)`` per axis in the one form an :data:`Ext` has: an int where both
    sides are equal, so that a symmetric frame is what it always was.

    >>> ext_of(((2, 2), (1, 0)))
    (2, (1, 0))
    """
    return tuple(lo if lo == hi else (lo, hi) for lo, hi in sides)


def dims_create(count: int, ndims: int) -> tuple[int, ...]:
    """Split ``count`` into ``ndims`` factors as equal as possible, largest first.

    The same rule as ``MPI_Dims_create`` with all dimensions free.

    Args:
        count: number of devices or processes (>= 1).
        ndims: number of mesh axes (>= 1).

    Returns:
        A non-increasing tuple of ``ndims`` integers whose product is ``count``.

    >>> dims_create(8, 2)
    (4, 2)
    >>> dims_create(12, 3)
    (3, 2, 2)
    """
    if count < 1:
        raise DeviceCountError(f"count = {count}: need at least 1 device or process")
    if ndims < 1:
        raise DeviceCountError(f"ndims = {ndims}: a mesh needs at least 1 axis")
    factors = []
    rest, p = count, 2
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    dims = [1] * ndims
    for f in sorted(factors, reverse=True):
        dims[int(np.argmin(dims))] *= f
    return tuple(sorted(dims, reverse=True))


@dataclasses.dataclass(frozen=True)
class BlockAxis:
    """Block distribution of one global axis of ``size`` cells over ``parts`` blocks.

    Attributes:
        size: global (logical) number of cells.
        parts: number of blocks (the mesh axis size; 1 for a replicated axis).

    >>> ax = BlockAxis(10, 4)
    >>> ax.block, ax.lengths, ax.offsets
    (3, (3, 3, 2, 2), (0, 3, 6, 8))
    >>> ax.padded
    12
    """

    size: int
    parts: int

    @property
    def base(self) -> int:
        """Cells in a short block (``size // parts``)."""
        return self.size // self.parts

    @property
    def extra(self) -> int:
        """How many leading blocks hold one more cell (``size % parts``)."""
        return self.size % self.parts

    @property
    def block(self) -> int:
        """Physical cells of every block, ``ceil(size / parts)``."""
        return self.base + (self.extra > 0)

    @property
    def padded(self) -> int:
        """Physical size of the axis, ``parts * block``."""
        return self.parts * self.block

    @property
    def even(self) -> bool:
        """True when every block is full (no padding)."""
        return self.extra == 0

    @property
    def min_length(self) -> int:
        """Cells in the smallest block."""
        return self.base

    def length(self, b: int) -> int:
        """Cells held by block ``b``."""
        return self.base + (b < self.extra)

    def offset(self, b: int) -> int:
        """Global index of the first cell of block ``b``."""
        return b * self.base + min(b, self.extra)

    @property
    def lengths(self) -> tuple[int, ...]:
        """Cells held by each block."""
        return tuple(self.length(b) for b in range(self.parts))

    @property
    def offsets(self) -> tuple[int, ...]:
        """Global index of the first cell of each block."""
        return tuple(self.offset(b) for b in range(self.parts))

    def global_index(self, physical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global index of each physical position, and whether it holds a real cell.

        A padding position (the end of a short block) gets a valid index
        (the last cell) and ``False``.

        >>> BlockAxis(4, 3).global_index(np.arange(6))
        (array([0, 1, 2, 3, 3, 3]), array([ True,  True,  True, False,  True, False]))
        """
        b, j = physical // self.block, physical % self.block
        length = self.base + (b < self.extra)
        g = b * self.base + np.minimum(b, self.extra) + j
        return np.minimum(g, self.size - 1), j < length

    def physical_index(self) -> np.ndarray:
        """Physical position of every global cell, shape ``(size,)``.

        >>> BlockAxis(5, 2).physical_index()
        array([0, 1, 2, 3, 4])
        >>> BlockAxis(4, 3).physical_index()
        array([0, 1, 2, 4])
        """
        g = np.arange(self.size)
        b = np.where(
            g < self.extra * (self.base + 1),
            g // max(self.base + 1, 1),
            self.extra + (g - self.extra * (self.base + 1)) // max(self.base, 1),
        )
        return b * self.block + (g - (b * self.base + np.minimum(b, self.extra)))
