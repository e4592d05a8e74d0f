"""This process's blocks of a snapshot as host copies, mapped to global cells.

A *piece* is ``(region, block)``: the global slices a block covers and its
values, a NumPy array that owns its memory. :func:`host_blocks` takes the
pieces of a ``pgas.GlobalArray`` (its addressable shards, padding dropped, by
the layout's block distribution, :class:`pgas.decomposition.BlockAxis`);
:func:`decode_piece` turns stored values into cells (e.g. packed bits into a
board), which changes the region: a representation that is not a fixed number of cells
per value says how with a :class:`Decoding`; :func:`block_chunks` gives the store chunks
that follow the blocks, and :func:`split_chunks` cuts them to at most
:data:`CHUNK_BYTES` (a writer encodes a chunk at a time, so that bounds what
writing a block holds beyond the block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pgas.grid.decomposition import BlockAxis
from pgas.io.dataset import ResultsError

__all__ = [
    "BlockError",
    "CHUNK_BYTES",
    "Decoding",
    "Piece",
    "Region",
    "block_chunks",
    "decode_piece",
    "decoded_dtype",
    "host_blocks",
    "host_copy",
    "split_chunks",
]

#: the most bytes of one store chunk that :func:`split_chunks` leaves: zarr holds a few times
#: a chunk while it encodes it (a 16 MiB block written in 8 MiB chunks raised the peak 64 MiB
#: above the block, in 1 MiB chunks 6 MiB, and wrote as fast)
CHUNK_BYTES = 1 << 20

Region = tuple[slice, ...]
Piece = tuple[Region, np.ndarray]


class BlockError(ResultsError):
    """A field or a decode that does not give blocks of one snapshot."""


@runtime_checkable
class Decoding(Protocol):
    """A representation's map from stored values to the cells users see, block by block.

    ``decoding(values)`` turns a block of whole stored values (any block of the
    layout, or the whole field) into its cells; ``decoding.region(region)`` names
    the global cells of a block whose values sit at ``region`` (global slices of
    the stored field, both ends given). Snapshots, checksums, diagnostics and
    plots all go through this one map (:func:`decode_piece`), so a representation
    whose blocks hold different numbers of cells (bit-packed Life at a width that
    is not a multiple of 64, examples/life/packed.py) is written as it is stepped.
    A plain function ``decode`` is the special case of a fixed number of cells
    per value along each axis.

    >>> class Pairs:  # each stored value is two equal cells
    ...     def __call__(self, values): return np.repeat(values, 2, axis=-1)
    ...     def region(self, region): return tuple(slice(2 * s.start, 2 * s.stop) for s in region)
    >>> isinstance(Pairs(), Decoding), decode_piece(((slice(1, 2),), np.array([7])), Pairs(), (4,))
    (True, ((slice(2, 4, None),), array([7, 7])))
    """

    def __call__(self, values: np.ndarray) -> np.ndarray: ...

    def region(self, region: Region) -> Region: ...


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


def decode_piece(piece: Piece, decode: Callable[[np.ndarray], np.ndarray] | None,
                 shape: Sequence[int]) -> Piece:  # fmt: skip
    """Apply ``decode`` to a block and map its region to the global cells it covers.

    A :class:`Decoding` maps the region itself, and must give exactly the cells
    it names. A plain function must expand every stored value to the same number
    of cells per axis whatever the block (a fixed factor); cells past ``shape``
    are dropped. A region's ``stop`` may be None: the block's end.

    >>> unpack = lambda w: np.unpackbits(w, axis=-1, bitorder="little")
    >>> r, c = decode_piece(((slice(1, 2),), np.array([5], np.uint8)), unpack, (12,))
    >>> r, c.tolist()
    ((slice(8, 12, None),), [1, 0, 1, 0])
    """
    region, block = piece
    if decode is None:
        return piece
    region = tuple(
        slice(s.start or 0, (s.start or 0) + b if s.stop is None else s.stop)
        for s, b in zip(region, block.shape, strict=True)
    )
    cells = np.asarray(decode(block))
    if isinstance(decode, Decoding):
        out = tuple(decode.region(region))
        want = tuple(s.stop - s.start for s in out)
        if cells.shape != want or any(s.stop > n for s, n in zip(out, shape, strict=True)):
            raise BlockError(
                f"decode turned the block of shape {block.shape} at {region} into shape "
                f"{cells.shape}, but its region() names cells {out} of a field of shape "
                f"{tuple(shape)}; the two must agree"
            )
        return out, cells
    if cells.ndim != block.ndim or any(c % max(b, 1) for c, b in zip(cells.shape, block.shape)):
        raise BlockError(
            f"decode turned a block of shape {block.shape} into shape {cells.shape}; it must "
            f"give a whole number of cells per stored value along each axis, or be a "
            f"pgas.io.blocks.Decoding that maps each block's region to its cells"
        )
    out, crop = [], []
    for sl, c, b, n in zip(region, cells.shape, block.shape, shape, strict=True):
        f = c // max(b, 1)
        start, stop = sl.start * f, min(sl.start * f + c, n)
        out.append(slice(start, stop))
        crop.append(slice(0, stop - start))
    return tuple(out), cells[tuple(crop)]


def decoded_dtype(decode: Callable[[np.ndarray], np.ndarray] | None, dtype: Any,
                  ndim: int) -> np.dtype:  # fmt: skip
    """The dtype of the cells ``decode`` gives for ``ndim``-D stored values of ``dtype``.

    >>> decoded_dtype(None, "uint64", 2), decoded_dtype(lambda w: w.astype(np.uint8), "u8", 2)
    (dtype('uint64'), dtype('uint8'))
    """
    if decode is None:
        return np.dtype(dtype)
    return np.asarray(decode(np.zeros((1,) * ndim, dtype))).dtype
