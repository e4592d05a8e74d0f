"""Collectives over the ranks of a grid: a scalar reduction and the gather for output."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pgas.errors import PgasError, ShapeMismatchError
from pgas.references.mpi.grid import CartGrid
from pgas.references.mpi.world import MPI

__all__ = ["allreduce", "extreme", "gather"]

_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}


def allreduce(value: Any, op: str = "sum", grid: CartGrid | None = None) -> Any:
    """Reduce a scalar over all ranks; every rank gets the same result.

    Args:
        value: a Python or NumPy scalar.
        op: ``"sum"``, ``"min"`` or ``"max"``.
        grid: whose communicator to use (default ``MPI.COMM_WORLD``).

    Returns:
        A NumPy scalar of ``value``'s type; a NaN on any rank gives NaN, as NumPy's
        ``max``, ``min`` and ``sum`` (:func:`extreme`).

    >>> allreduce(2.0, "max")   # one rank
    np.float64(2.0)
    """
    if op not in _OPS:
        raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_OPS)}")
    comm = MPI.COMM_WORLD if grid is None else grid.comm
    if op != "sum":
        return extreme(value, op, comm)
    return comm.allreduce(np.asarray(value)[()], op=_OPS[op])


def extreme(value: Any, op: str, comm) -> Any:
    """``value``, this rank's max (``op="max"``) or min, reduced over ``comm`` as NumPy
    reduces: a NaN on any rank gives NaN. MPI's max and min (and Python's, which
    ``comm.allreduce`` of objects uses) keep or drop a NaN by the order of the ranks, so a
    float travels with a NaN flag: one ``Allreduce`` of two values.

    >>> extreme(np.float64("nan"), "min", MPI.COMM_WORLD)   # one rank
    np.float64(nan)
    """
    value = np.asarray(value)[()]
    dtype = np.asarray(value).dtype
    if not np.issubdtype(dtype, np.floating):
        return comm.allreduce(value, op=_OPS[op])
    sign = 1 if op == "max" else -1  # the flag: 1 (MAX) or -1 (MIN) where a NaN was
    nan = bool(np.isnan(value))
    # float16 travels as float32 (exact), a type MPI has
    send = np.array([-sign * np.inf if nan else value, sign * nan],
                    np.promote_types(dtype, np.float32))  # fmt: skip
    both = np.empty_like(send)
    comm.Allreduce(send, both, op=_OPS[op])
    return dtype.type(np.nan if both[1] != 0 else both[0])


def gather(block: np.ndarray, grid: CartGrid, root: int = 0) -> np.ndarray | None:
    """Assemble the global array on ``root`` (for output only).

    Args:
        block: this rank's cells, shape ``grid.local_shape`` (no halo).
        grid: the layout.
        root: the rank that receives the result.

    Returns:
        The global array on ``root``, ``None`` on every other rank.
    """
    if block.shape != grid.local_shape:
        raise ShapeMismatchError(
            f"block.shape = {block.shape} on rank {grid.rank}, expected {grid.local_shape}; "
            f"pass the cells without halo, e.g. ext[1:-1]"
        )
    send = np.ascontiguousarray(block)
    if grid.rank != root:
        grid.comm.Gatherv([send, MPI.BYTE], None, root=root)
        return None
    blocks = [grid.block(grid.comm.Get_coords(r)) for r in range(grid.size)]
    counts = [math.prod(s.stop - s.start for s in b) * send.itemsize for b in blocks]
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    buf = np.empty(sum(counts), np.uint8)
    grid.comm.Gatherv([send, MPI.BYTE], [buf, counts, displs, MPI.BYTE], root=root)
    out = np.empty(grid.global_shape, send.dtype)
    for b, c, d in zip(blocks, counts, displs, strict=True):
        out[b] = buf[d : d + c].view(send.dtype).reshape([s.stop - s.start for s in b])
    return out
