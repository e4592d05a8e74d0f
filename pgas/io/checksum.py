"""The checksum of a field: one digest for the same cells, however they are decomposed.

A field's checksum is computed from its blocks where they live: every process
hashes the cells of its own blocks, and the parts combine with one reduction
(an ``Allreduce`` over MPI, one all-gather of 16 bytes per process over JAX's
processes, nothing on one process). No process ever holds the whole field.

Each cell contributes to two independent 64-bit lanes, summed modulo 2**64:

- lane A: ``splitmix64(bits ^ splitmix64(g * 0x9E3779B97F4A7C15 + 1))``
- lane B: ``fmix64(bits + fmix64(g ^ 0xD6E8FEB86659FD93))``

where ``bits`` are the cell's bytes as an unsigned integer and ``g`` its
flat C-order index in the global field (``splitmix64`` and ``fmix64``, the
finalisers of SplitMix64 and MurmurHash3, are bijections of 64-bit words).
Sums do not depend on the order of the cells, so any decomposition, backend,
device or process count, uneven blocks, ``k`` or packed form (blocks are
decoded to cells first) gives the same lanes. The digest is the sha256 of the
shape, the cells' dtype and the two lanes.

Collision odds: two fields that differ in one cell always differ (for a
fixed ``g`` each lane is a bijection of ``bits``). Fields that differ in more
cells collide only if both lanes' sums of differences vanish; for hash values
that behave as random, about 2**-128 per pair of fields. It is a check of
equal results, not a defence against fields crafted to collide.

>>> checksum(np.arange(6.0).reshape(2, 3)) == checksum_pieces(
...     [((slice(0, 1), slice(0, 3)), np.arange(3.0).reshape(1, 3)),
...      ((slice(1, 2), slice(0, 3)), np.arange(3.0, 6.0).reshape(1, 3))], (2, 3), "float64")
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["checksum", "checksum_pieces", "lanes", "combine", "sha256"]

_U = np.uint64
_GOLDEN, _SEED_A, _SEED_B = _U(0x9E3779B97F4A7C15), _U(1), _U(0xD6E8FEB86659FD93)
_CHUNK = 1 << 16  # cells hashed at a time: temporaries stay about 4 MiB whatever the block

Region = tuple[slice, ...]


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x ^= x >> _U(30)
    x *= _U(0xBF58476D1CE4E5B9)
    x ^= x >> _U(27)
    x *= _U(0x94D049BB133111EB)
    x ^= x >> _U(31)
    return x


def _fmix64(x: np.ndarray) -> np.ndarray:
    x ^= x >> _U(33)
    x *= _U(0xFF51AFD7ED558CCD)
    x ^= x >> _U(33)
    x *= _U(0xC4CEB9FE1A85EC53)
    x ^= x >> _U(33)
    return x


def _bits(values: np.ndarray) -> np.ndarray:
    """The cells' bytes as uint64 (itemsize 1, 2, 4 or 8), one per cell."""
    v = np.ascontiguousarray(values).reshape(-1)
    if v.dtype == np.bool_:
        v = v.view(np.uint8)
    if v.dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(
            f"checksum: field dtype = {v.dtype} has {v.dtype.itemsize} bytes a cell; checksums "
            f"take cells of 1 to 8 bytes (split complex values into real and imaginary parts)"
        )
    return v.view(f"u{v.dtype.itemsize}").astype(np.uint64)


def lanes(block: np.ndarray, region: Region, shape: Sequence[int]) -> np.ndarray:
    """The two lanes (``uint64[2]``) of the cells ``block`` holds at ``region`` of ``shape``.

    Args:
        block: the cells (any dtype of 1 to 8 bytes), of the region's shape.
        region: the global slices (unit step) the block covers.
        shape: the global field's shape.

    >>> a = lanes(np.arange(4.0), (slice(0, 4),), (4,))
    >>> b = lanes(np.arange(2.0, 4.0), (slice(2, 4),), (4,))
    >>> ((a - b) == lanes(np.arange(2.0), (slice(0, 2),), (4,))).all()
    np.True_
    """
    block = np.asarray(block)
    starts = [sl.start or 0 for sl in region]
    if block.ndim == 0:
        block, starts, shape = block.reshape(1), [0], (1,)
    total = np.zeros(2, np.uint64)
    rows = max(1, _CHUNK // max(1, int(np.prod(block.shape[1:], dtype=np.int64))))
    for r0 in range(0, block.shape[0], rows):
        part = block[r0 : r0 + rows]
        if part.size == 0:
            continue
        local = np.unravel_index(np.arange(part.size), part.shape)
        index = [ix + s + (r0 if a == 0 else 0) for a, (ix, s) in enumerate(zip(local, starts))]
        g = np.ravel_multi_index(index, tuple(shape)).astype(np.uint64)
        del local, index
        bits = _bits(part)
        key = g * _GOLDEN
        key += _SEED_A
        a = _splitmix64(_splitmix64(key) ^ bits).sum(keepdims=True, dtype=np.uint64)
        del key
        g ^= _SEED_B
        b = _fmix64(_fmix64(g) + bits).sum(keepdims=True, dtype=np.uint64)
        total += np.concatenate([a, b])  # array sums wrap modulo 2**64 silently
    return total


def combine(part: np.ndarray, comm: Any = None, processes: int = 1) -> np.ndarray:
    """The sum of every process's ``part`` (``uint64[2]``) modulo 2**64: one reduction.

    Args:
        part: this process's lanes.
        comm: an MPI communicator (``Allreduce``), or None: JAX's processes
            (one all-gather of the parts) when ``processes > 1``, else ``part``.
        processes: how many processes hold parts.

    >>> combine(np.array([1, 2], np.uint64)).tolist()
    [1, 2]
    """
    part = np.ascontiguousarray(part, np.uint64)
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI

        out = np.zeros_like(part)
        comm.Allreduce(part, out, op=MPI.SUM)  # unsigned sums wrap modulo 2**64
        return out
    if comm is None and processes > 1:
        from jax.experimental import multihost_utils

        words = np.asarray(multihost_utils.process_allgather(part.view(np.uint32)))
        return (
            np.ascontiguousarray(words.reshape(-1, 4)).view(np.uint64).sum(axis=0, dtype=np.uint64)
        )
    return part


def digest(total: np.ndarray, shape: Sequence[int], dtype: Any) -> str:
    """The checksum text of the combined lanes of a field of ``shape`` and ``dtype``."""
    text = f"{tuple(int(n) for n in shape)}|{np.dtype(dtype).str}|{int(total[0])}|{int(total[1])}"
    return hashlib.sha256(text.encode()).hexdigest()


def checksum_pieces(pieces: Iterable[tuple[Region, np.ndarray]], shape: Sequence[int],
                    dtype: Any, comm: Any = None, processes: int = 1) -> str:  # fmt: skip
    """The checksum of a field from this process's ``(region, cells)`` pieces (collective).

    Every process passes its own pieces (together they cover the field once)
    and the same ``shape``, ``dtype``, ``comm`` and ``processes``; all get the
    same digest, equal to :func:`checksum` of the whole field.

    >>> checksum_pieces([((slice(0, 2),), np.zeros(2, np.uint8))], (2,), "uint8") == (
    ...     checksum(np.zeros(2, np.uint8)))
    True
    """
    total = np.zeros(2, np.uint64)
    for region, cells in pieces:
        total += lanes(cells, region, shape)
    return digest(combine(total, comm, processes), shape, dtype)


def checksum(field: Any, decode: Callable[[np.ndarray], np.ndarray] | None = None,
             shape: Sequence[int] | None = None, comm: Any = None) -> str:  # fmt: skip
    """The checksum of a field: a NumPy array, or a ``pgas.GlobalArray`` without gathering it.

    For a GlobalArray every process hashes the blocks of its own shards (views
    of the device buffers where the platform allows, a chunk of temporaries at
    a time) and the parts combine with one reduction, so this is collective:
    call it on every process.

    Args:
        field: the whole field (NumPy), or a GlobalArray.
        decode: maps a GlobalArray's stored values to cells (e.g. packed words to
            a board), applied block by block: a fixed number of cells per value, or a
            :class:`pgas.io.blocks.Decoding`; see :func:`pgas.io.blocks.decode_piece`.
        shape: the decoded field's shape (default: the field's).
        comm: the MPI communicator of the processes, or None (JAX's processes).

    >>> checksum(np.zeros(2, np.uint8))[:12]
    '4484a11e75d8'
    >>> checksum(np.zeros(2, np.uint8)) != checksum(np.array([0, 1], np.uint8))
    True
    """
    if isinstance(field, np.ndarray | np.generic | list | tuple | int | float):
        field = np.asarray(field)
        region = tuple(slice(0, n) for n in field.shape)
        return checksum_pieces([(region, field)], field.shape, field.dtype)
    from pgas.io.blocks import decode_piece, decoded_dtype, host_blocks

    cells = tuple(shape or field.shape)
    dtype = decoded_dtype(decode, field.dtype, len(cells))
    pieces = (decode_piece(p, decode, cells) for p in host_blocks(field, copy=False))
    import jax

    return checksum_pieces(pieces, cells, dtype, comm, jax.process_count())


def sha256(block: np.ndarray) -> str:
    """sha256 of a block's bytes in C order (the integrity check of checkpoint blocks).

    >>> sha256(np.zeros(2, np.uint8))[:12]
    '96a296d224f2'
    """
    return hashlib.sha256(np.ascontiguousarray(block).tobytes()).hexdigest()
