"""The checks of the MPI path: ``reduce`` over all ranks, and the loop of steps and checks.

Contract: :class:`Reducer` is the ``reduce(values, op="sum",
reproducible=False)`` that ``converged`` (and a state dict's kernel) calls on
every rank: the rank's own cells reduced with NumPy over the cells the kernel
writes, then one ``Allreduce`` (two for a reproducible float sum, the same bits
as the other backends); every rank gets the same value and takes the same
decision. :func:`all_finite` says whether a check's values are finite;
:func:`iterate` runs ``every`` steps then a check until one holds, is not
finite or ``max_steps`` is reached, timed between barriers (:func:`timed`),
and warns as every backend does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pgas.errors import PgasError
from pgas.globalview import reprosum
from pgas.globalview.reduce import reproducible_kind
from pgas.loop.until import warn_non_finite, warn_not_converged
from pgas.references.mpi.block import Block
from pgas.references.mpi.collectives import extreme
from pgas.references.mpi.world import MPI

__all__ = ["Reducer", "all_finite", "timed", "iterate"]

_OPS = {"sum": (np.sum, MPI.SUM, 0), "max": (np.max, MPI.MAX, -np.inf),
        "min": (np.min, MPI.MIN, np.inf)}  # fmt: skip


class Reducer:
    """``reduce(values, op, reproducible=False)`` over the cells the kernel writes, on all
    ranks; counts its calls and keeps what it returned (``seen``: a check reads them,
    :func:`all_finite`). A float sum with ``reproducible=True`` is
    :mod:`pgas.globalview.reprosum` on NumPy: a max ``Allreduce``, then one of the lanes. A
    NaN gives NaN, as in NumPy (:func:`pgas.mpi.collectives.extreme`)."""

    def __init__(self, block: Block) -> None:
        core = [m[lo : lo + n] for m, (lo, _), n in zip(block.masks, block.rim,
                                                      block.grid.local_shape)]  # fmt: skip
        mask = core[0]
        for m in core[1:]:
            mask = mask[..., None] & m
        self.mask = None if mask.all() else mask
        self.comm, self.calls, self.seen = block.grid.comm, 0, []
        self.size = math.prod(block.grid.global_shape)

    def __call__(self, values, op: str = "sum", reproducible: bool = False):
        out = self._reduced(values, op, reproducible)
        self.seen.append(out)
        return out

    def _reduced(self, values, op: str, reproducible: bool):
        if op not in _OPS:
            raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_OPS)}")
        local, mpi_op, fill = _OPS[op]
        values = np.asarray(values)
        if reproducible_kind(values.dtype, reproducible, op):
            self.calls += 2  # two Allreduce calls: the max, then the lanes
            if self.mask is not None:
                values = np.where(self.mask, values, np.zeros((), values.dtype))
            amax = self.comm.allreduce(reprosum.local_max(values, np), op=MPI.MAX)
            amax = np.asarray(amax, values.dtype)
            with np.errstate(invalid="ignore"):  # inf - inf in the non-finite lane: nan
                part = reprosum.lanes(values, amax, self.size, np)
            summed = np.empty_like(part)
            self.comm.Allreduce(part, summed, op=MPI.SUM)
            return reprosum.combine(summed, amax, self.size, np)[()]
        if self.mask is not None:
            if not np.issubdtype(values.dtype, np.floating) and op != "sum":
                info = np.iinfo(values.dtype)
                fill = info.min if op == "max" else info.max
            values = np.where(self.mask, values, np.asarray(fill).astype(values.dtype))
        self.calls += 1
        if op != "sum":
            return extreme(local(values), op, self.comm)
        return self.comm.allreduce(local(values), op=mpi_op)


def all_finite(values, scalars=()) -> bool:
    """Whether every float among ``values`` (what a check reduced) and ``scalars`` (a state
    dict's) is finite, as :func:`pgas.loop.decision.all_finite` decides on the other backends."""
    return all(bool(np.isfinite(x)) for x in [*values, *scalars]
               if np.ndim(x) == 0 and np.issubdtype(np.asarray(x).dtype, np.inexact))  # fmt: skip


def timed(work: Callable[[], Any], comm) -> tuple[Any, float]:
    """``work()`` between barriers: its result and the seconds the slowest rank took."""
    comm.Barrier()
    start = MPI.Wtime()
    out = work()
    comm.Barrier()
    return out, max(comm.allgather(MPI.Wtime() - start))


def iterate(advance: Callable[[int], None], check: Callable[[], tuple[bool, bool]],
             every: int, max_steps: int, comm) -> tuple[int, bool, bool, float]:  # fmt: skip
    """``every`` steps then a check until it holds, is not finite or ``max_steps`` is reached
    (the rest of ``max_steps`` then runs, with a last check); ``(steps, converged, finite,
    seconds)``, the seconds the slowest rank took, and a warning where it did not converge.
    The counts are Python ints: any ``max_steps`` runs exactly."""

    def loop() -> tuple[int, bool, bool]:
        n, done, finite = 0, False, True
        while not done and finite and n + every <= max_steps:
            advance(every)
            n, (done, finite) = n + every, check()
        if not done and finite and max_steps % every:
            advance(max_steps % every)
            n, (done, finite) = n + max_steps % every, check()
        return n, done, finite

    (n, done, finite), seconds = timed(loop, comm)
    if not finite:
        warn_non_finite(n, every)
    elif not done:
        warn_not_converged(max_steps, every)
    return n, done, finite, seconds
