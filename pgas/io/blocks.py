"""This process's blocks of a snapshot as host copies, mapped to global cells.

A *piece* is ``(region, block)``: the global slices a block covers and its
values, a NumPy array that owns its memory. :func:`host_blocks` takes the
pieces of a ``pgas.GlobalArray`` (its addressable shards, padding dropped, by
the layout's block distribution, :class:`pgas.decomposition.BlockAxis`);
:func:`decode_piece` turns stored values into cells (e.g. packed bits into a
board), which changes the region; :func:`block_chunks` gives the store chunks
that follow the blocks, and :func:`split_chunks` cuts them to at most
:data:`CHUNK_BYTES` (a writer encodes a chunk at a time, so that bounds what
writing a block holds beyond the block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgas.grid.decomposition import BlockAxis
from pgas.io.dataset import ResultsError

__all__ = [
    "BlockError",
    "CHUNK_BYTES",
    "Piece",
    "Region",
    "block_chunks",
    "decode_piece",
    "host_blocks",
    "host_copy",
    "split_chunks",
]

#: the most bytes of one store chunk that :func:`split_chunks` leaves (zarr holds a few times
#: a chunk while it encodes it: benchmarks/README.md, "Memory per process")
CHUNK_BYTES = 1 << 20

Region = tuple[slice, ...]
Piece = tuple[Region, np.ndarray]


class BlockError(ResultsError):
    """A field or a decode that does not give blocks of one snapshot."""


def block_chunks(axes: Sequence[BlockAxis], factor: Sequence[int] | None = None) -> tuple[int, ...]:
    """Chunk shape aligned to a block distribution: ``block * factor`` cells per axis.

    Args:
        axes: the block distribution per axis (``GlobalArray.layout.axes`` or
            ``CartGrid.axes``).
        factor: cells per stored value along each axis when a ``decode``
            expands values (e.g. ``(1, 64)`` for 64 cells per word); default 1.

    >>> block_chunks([BlockAxis(10, 4)]), block_chunks([BlockAxis(3, 2)], factor=[64])
    ((3,), (128,))
    """
    factor = [1] * len(axes) if factor is None else list(factor)
    return tuple(a.block * f for a, f in zip(axes, factor, strict=True))


def split_chunks(chunks: Sequence[int], itemsize: int, limit: int = CHUNK_BYTES) -> tuple[int, ...]:
    """``chunks`` cut along the first axis into equal parts of at most about ``limit`` bytes.

    A chunk of a block's size costs its size again (and its encoding) while it is
    written; parts of it bound that. Where a part does not divide the block, the chunk
    at a block's edge is shared with the next block (writers lock shared chunks).

    >>> split_chunks((16_000_003,), 8), split_chunks((334,), 8), split_chunks((8192, 8192), 1)
    ((130082,), (334,), (128, 8192))
    """
    row = itemsize * int(np.prod(chunks[1:], dtype=np.int64))
    parts = -(-chunks[0] * row // max(limit, 1))
    if parts <= 1:
        return tuple(chunks)
    return (-(-chunks[0] // parts), *chunks[1:])


def host_blocks(field: Any, copy: bool = True, into: Sequence[Piece] | None = None) -> list[Piece]:
    """This process's blocks of a ``pgas.GlobalArray`` as ``(global slices, host copy)``.

    Uses ``field.data.addressable_shards`` (one replica of each block) and
    the layout's block distribution: the padding of a short block is never
    copied. The copies own their memory (the device buffers may be donated);
    with ``copy=False`` the blocks are read-only views of the device buffers
    where the platform allows (the CPU), valid while the field is. ``into``:
    the pieces of an earlier call on a field of the same layout, whose host
    arrays are free to be overwritten: the copies go into them (a stream of
    snapshots allocates its host blocks once, not once per snapshot).

    >>> import pgas
    >>> u = pgas.from_numpy(np.arange(5.0), pgas.make_mesh(devices=1))
    >>> [(r, b.tolist()) for r, b in host_blocks(u)]
    [((slice(0, 5, None),), [0.0, 1.0, 2.0, 3.0, 4.0])]
    """
    layout = field.layout
    if field.data.ndim != layout.ndim:
        raise BlockError(
            f"field has shape {field.shape} with {field.data.ndim - layout.ndim} batch axes; "
            f"write one snapshot at a time (a field of shape {layout.shape})"
        )
    pieces, reuse = [], iter(into or ())
    for shard in field.data.addressable_shards:
        if shard.replica_id != 0:
            continue
        region, crop = [], []
        for ax, sl in zip(layout.axes, shard.index, strict=True):
            b = (sl.start or 0) // ax.block
            n = ax.length(b)
            region.append(slice(ax.offset(b), ax.offset(b) + n))
            crop.append(slice(0, n))
        if all(r.stop > r.start for r in region):
            block = np.asarray(shard.data)[tuple(crop)]
            piece = (tuple(region), block)
            pieces.append(host_copy(piece, next(reuse, None)) if copy else piece)
    return pieces


def host_copy(piece: Piece, into: Piece | None = None) -> Piece:
    """``piece`` with its block copied: into ``into``'s array where region, shape and dtype match.

    >>> a = np.zeros(2)
    >>> host_copy(((slice(0, 2),), np.ones(2)), ((slice(0, 2),), a))[1] is a
    True
    """
    region, block = piece
    if into is not None and (into[0], into[1].shape, into[1].dtype) == (
        region, block.shape, block.dtype):  # fmt: skip
        np.copyto(into[1], block)
        return region, into[1]
    return region, np.array(block, copy=True)


def decode_piece(
    piece: Piece, decode: Callable[[np.ndarray], np.ndarray] | None, shape: Sequence[int]
) -> Piece:
    """Apply ``decode`` to a block and map its region to cells, cropped at the global edge.

    ``decode`` must expand every stored value to the same number of cells per
    axis whatever the block (a fixed factor); cells past ``shape`` are dropped.

    >>> unpack = lambda w: np.unpackbits(w, axis=-1, bitorder="little")
    >>> r, c = decode_piece(((slice(1, 2),), np.array([5], np.uint8)), unpack, (12,))
    >>> r, c.tolist()
    ((slice(8, 12, None),), [1, 0, 1, 0])
    """
    region, block = piece
    if decode is None:
        return piece
    cells = np.asarray(decode(block))
    if cells.ndim != block.ndim or any(c % max(b, 1) for c, b in zip(cells.shape, block.shape)):
        raise BlockError(
            f"decode turned a block of shape {block.shape} into shape {cells.shape}; it must "
            f"give a whole number of cells per stored value along each axis"
        )
    out, crop = [], []
    for sl, c, b, n in zip(region, cells.shape, block.shape, shape, strict=True):
        f = c // max(b, 1)
        start, stop = sl.start * f, min(sl.start * f + c, n)
        out.append(slice(start, stop))
        crop.append(slice(0, stop - start))
    return tuple(out), cells[tuple(crop)]
