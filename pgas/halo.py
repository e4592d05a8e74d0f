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

__all__ = ["extend", "Exchange", "ExchangeLog", "record_exchanges"]

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
    exchanges: list[Exchange] = dataclasses.field(default_factory=list)


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
    ba, ca = 2 * axis, 2 * axis + 1
    move = transport or _roll_transport(ba)
    nb = blocks.shape[ca]
    short = None if grid.even else block_number >= grid.extra  # blocks one cell short

    first = _take(blocks, ca, 0, width)
    last = _take(blocks, ca, nb - width, nb)
    if short is not None:
        last = jnp.where(short, _take(blocks, ca, nb - 1 - width, nb - 1), last)
    from_left = move(last, 1)  # block b gets the last cells of block b - 1
    from_right = move(first, -1)  # block b gets the first cells of block b + 1

    low, high = faces
    if not isinstance(low, Periodic):
        ghost = _ghost(low, first, ca)
        from_left = jnp.where(block_number == 0, ghost, from_left)
    if not isinstance(high, Periodic):
        ghost = _ghost(high, last, ca)
        from_right = jnp.where(block_number == grid.parts - 1, ghost, from_right)

    ext = jnp.concatenate([from_left, blocks, from_right], axis=ca)
    if short is not None:
        body = _take(blocks, ca, 0, nb - 1)
        pad = _take(blocks, ca, nb - 1, nb)
        ext = jnp.where(short, jnp.concatenate([from_left, body, from_right, pad], axis=ca), ext)

    log = _LOG.get()
    if log is not None:
        slab = math.prod(first.shape[1::2])  # cells per device: the cell axes only
        log.exchanges.append(
            Exchange(axis, width, grid.parts, slab, jnp.dtype(blocks.dtype).itemsize)
        )
    return ext


def _ghost(bc: object, edge: jax.Array, cell_axis: int) -> jax.Array:
    """Ghost cells beyond a face, from the ``width`` edge cells next to it."""
    if isinstance(bc, Dirichlet):
        return jnp.full_like(edge, bc.value)
    return jnp.flip(edge, axis=cell_axis)  # Neumann and Keep: mirror
