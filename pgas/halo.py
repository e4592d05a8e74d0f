"""Halo exchange written in the global view, for JAX's partitioner to place.

:func:`extend` takes an array in the blocks form ``(D0, b0, D1, b1, ...)`` (see
:mod:`pgas.layout`) and returns it with ``width`` halo cells on both sides of
every block along one axis: ``(..., D, b + 2 * width, ...)``. It is written
only with global-view operations on the blocks form: slices of the edge slabs
along the cell axis (local), ``jnp.roll`` of those slabs by one block along the
block axis (which the partitioner turns into one halo-sized
collective-permute per direction), and ``where`` on the block number for the
domain edges and for short blocks. Boundary conditions fill the ghost cells at
the domain edges. Extending axis 0 and then axis 1 of the result gives the
corners (two-phase exchange): 2 collective-permutes per split axis per step,
whatever the stencil.

The same function serves the explicit path: given a ``transport`` that sends a
slab to the next or previous block with ``lax.ppermute`` inside ``shard_map``,
and a block number from ``lax.axis_index``, it fills the halo of a local block.

A trace-time :class:`ExchangeLog` records every exchange so that
:func:`pgas.comm_report` can state the ideal halo traffic of the stencil.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp

from pgas.boundary import Dirichlet, Periodic
from pgas.decomposition import BlockAxis

__all__ = ["extend", "slabs", "shifted", "Exchange", "ExchangeLog", "record_exchanges"]

Transport = Callable[[jax.Array, int], jax.Array]
"""``transport(slab, direction)``: block b receives the slab of block b - direction."""


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One halo exchange along one axis, as seen by one device.

    Attributes:
        axis: array axis.
        width: halo width.
        parts: number of blocks along the axis (devices of its mesh axis).
        slab_cells: cells in one slab sent in one direction by one device.
        itemsize: bytes per cell.
    """

    axis: int
    width: int
    parts: int
    slab_cells: int
    itemsize: int

    @property
    def ideal_bytes(self) -> int:
        """Bytes one device must send per exchange: 2 sides x slab (0 on one block)."""
        return 2 * self.slab_cells * self.itemsize if self.parts > 1 else 0


@dataclasses.dataclass
class ExchangeLog:
    """Halo exchanges traced in a ``with record_exchanges()`` block.

    ``materialized`` tells whether any extended block was built in full
    (:func:`extend`) rather than read lazily through :func:`shifted`.
    """

    exchanges: list[Exchange] = dataclasses.field(default_factory=list)
    materialized: bool = False


_LOG: contextvars.ContextVar[ExchangeLog | None] = contextvars.ContextVar("pgas_log", default=None)


@contextlib.contextmanager
def record_exchanges() -> Iterator[ExchangeLog]:
    """Record the halo exchanges traced inside the ``with`` block.

    >>> with record_exchanges() as log:
    ...     pass
    >>> log.exchanges
    []
    """
    log = ExchangeLog()
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def _roll_transport(block_axis: int) -> Transport:
    return lambda slab, direction: jnp.roll(slab, direction, axis=block_axis)


def _take(x: jax.Array, axis: int, start: int, stop: int) -> jax.Array:
    return jax.lax.slice_in_dim(x, start, stop, axis=axis)


def extend(
    blocks: jax.Array,
    axis: int,
    width: int,
    grid: BlockAxis,
    faces: tuple,
    block_number: jax.Array,
    transport: Transport | None = None,
) -> jax.Array:
    """Add ``width`` halo cells on both sides of every block along ``axis``.

    Args:
        blocks: array in blocks form (axis ``2*axis`` = block number,
            ``2*axis + 1`` = cell in block); in the explicit path the block
            axis has size 1 (the local block).
        axis: array axis to extend.
        width: halo width (>= 1, at most the smallest block).
        grid: block distribution of the axis.
        faces: ``(low, high)`` boundary conditions of the axis.
        block_number: block number, broadcastable against ``blocks``.
        transport: how slabs travel; default: ``jnp.roll`` along the block axis.

    Returns:
        The extended array; block ``b``'s cell ``j`` is at position
        ``width + j`` and its right halo starts at ``width + length(b)``.

    >>> import jax.numpy as jnp
    >>> from pgas.boundary import Periodic
    >>> b = jnp.arange(6.0).reshape(2, 3)          # 6 cells in 2 blocks
    >>> extend(b, 0, 1, BlockAxis(6, 2), (Periodic(), Periodic()),
    ...        jnp.arange(2).reshape(2, 1)).tolist()
    [[5.0, 0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0, 0.0]]
    """
    ca = 2 * axis + 1
    nb = blocks.shape[ca]
    short = None if grid.even else block_number >= grid.extra  # blocks one cell short
    first = _take(blocks, ca, 0, width)
    last = _take(blocks, ca, nb - width, nb)
    if short is not None:
        last = jnp.where(short, _take(blocks, ca, nb - 1 - width, nb - 1), last)
    from_left, from_right = slabs(first, last, axis, width, grid, faces, block_number, transport)
    ext = jnp.concatenate([from_left, blocks, from_right], axis=ca)
    log = _LOG.get()
    if log is not None:
        log.materialized = True
    if short is not None:
        body = _take(blocks, ca, 0, nb - 1)
        pad = _take(blocks, ca, nb - 1, nb)
        ext = jnp.where(short, jnp.concatenate([from_left, body, from_right, pad], axis=ca), ext)
    return ext


def slabs(
    first: jax.Array,
    last: jax.Array,
    axis: int,
    width: int,
    grid: BlockAxis,
    faces: tuple,
    block_number: jax.Array,
    transport: Transport | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The halo slabs of every block along ``axis``: ``(from_left, from_right)``.

    ``first`` / ``last`` are each block's first / last ``width`` real cells. The
    slabs travel one block along the block axis (one collective-permute per
    direction); at non-periodic domain edges they are the boundary's ghost cells.
    This is everything :func:`extend` sends; it only adds the concatenation.
    """
    ba, ca = 2 * axis, 2 * axis + 1
    move = transport or _roll_transport(ba)
    from_left = move(last, 1)  # block b gets the last cells of block b - 1
    from_right = move(first, -1)  # block b gets the first cells of block b + 1
    low, high = faces
    if not isinstance(low, Periodic):
        from_left = jnp.where(block_number == 0, _ghost(low, first, ca), from_left)
    if not isinstance(high, Periodic):
        from_right = jnp.where(block_number == grid.parts - 1, _ghost(high, last, ca), from_right)
    log = _LOG.get()
    if log is not None:
        slab = math.prod(first.shape[1::2])  # cells per device: the cell axes only
        log.exchanges.append(
            Exchange(axis, width, grid.parts, slab, jnp.dtype(first.dtype).itemsize)
        )
    return from_left, from_right


def shifted(
    blocks: jax.Array, axis: int, k: int, from_left: jax.Array, from_right: jax.Array
) -> jax.Array:
    """Every block read at offset ``k`` along ``axis``: cell ``j`` gets cell ``j + k``.

    Where ``j + k`` leaves the block the value comes from the halo slabs of
    :func:`slabs`. The result is the bitwise OR of two pads (``lax.pad``), the block
    shifted (a pad with a negative side, which XLA fuses into its consumer) and
    the slab placed at the edge, on the bit patterns (exact for every dtype:
    the pieces do not overlap). Unlike :func:`extend`, nothing of block size is
    materialised: on the CPU XLA does not fuse a concatenate into its consumer,
    so the extended block would cost a full extra write and read per step.
    Needs a layout without short blocks and a non-bool dtype.

    >>> import jax.numpy as jnp
    >>> b = jnp.arange(6.0).reshape(2, 3)
    >>> left, right = jnp.array([[5.0], [2.0]]), jnp.array([[3.0], [0.0]])
    >>> shifted(b, 0, 1, left, right).tolist()
    [[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]
    """
    if k == 0:
        return blocks
    ca, nb = 2 * axis + 1, blocks.shape[2 * axis + 1]
    uint = jnp.dtype(f"uint{8 * jnp.dtype(blocks.dtype).itemsize}")
    zero = jnp.zeros((), uint)

    def placed(x, low, high):  # x's bits, padded (negative: cut) along the cell axis
        cfg = [(0, 0, 0)] * blocks.ndim
        cfg[ca] = (low, high, 0)
        return jax.lax.pad(jax.lax.bitcast_convert_type(x, uint), zero, cfg)

    if k > 0:
        halo = placed(_take(from_right, ca, 0, k), nb - k, 0)
    else:
        width = from_left.shape[ca]
        halo = placed(_take(from_left, ca, width + k, width), 0, nb + k)
    bits = placed(blocks, -k, k) | halo
    return jax.lax.bitcast_convert_type(bits, blocks.dtype)


def _ghost(bc: object, edge: jax.Array, cell_axis: int) -> jax.Array:
    """Ghost cells beyond a face, from the ``width`` edge cells next to it."""
    if isinstance(bc, Dirichlet):
        return jnp.full_like(edge, bc.value)
    return jnp.flip(edge, axis=cell_axis)  # Neumann and Keep: mirror
