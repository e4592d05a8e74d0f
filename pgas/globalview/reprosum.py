"""A reproducible floating-point sum: the same bits on every decomposition, backend and order.

A plain sum's bits depend on its order (the block split, XLA's reduction tree,
NumPy's pairwise sum, the all-reduce's). Here the values are *pre-rounded*
(Demmel & Nguyen, "Fast reproducible floating-point summation", 2013, the
scheme behind ReproBLAS) so that every partial sum is exact, in any order:

1. ``M = max |x|`` over all values (a max is exact in any order: one all-reduce);
2. with ``2**(E - 1) <= M < 2**E`` and ``L = max(1, ceil(log2(size)))``, fold
   ``j = 1..K`` takes ``sigma_j = 1.5 * 2**e_j``, ``e_1 = E + L`` and
   ``e_(j+1) = e_j + L - p`` (``p`` the dtype's significand bits, 53 for
   float64), and splits the rest of each value: ``q = (sigma_j + x) - sigma_j``
   is ``x`` rounded to a multiple of ``ulp(sigma_j)`` (exact arithmetic: both
   sums stay in ``sigma_j``'s binade), ``x - q`` exact, goes on to the next fold;
3. every ``q`` of a fold is a multiple of ``ulp(sigma_j)`` and at most ``size``
   of them sum to less than ``2**(e_j + 1)``, so each fold's sum is exact in any
   order: the local sums and the all-reduce of the ``K`` lanes (one all-reduce of
   a short vector) give the same bits everywhere;
4. the lanes are added in a fixed order, first fold first.

So a reproducible sum is two all-reduces of a few scalars (the max, then the
lanes). ``K`` is :func:`folds`: 2 for float64 and 3 for smaller floats, which
keep fewer bits per fold. The dropped remainders are each at most
``ulp(sigma_K) / 2``, so ``|result - exact sum| <= size * 2**(E - K * (p - L))
+`` the final roundings (``K`` additions, each half an ulp of the result); for
float64 on a grid of a million cells (``L = 20``) the first term is
``2 M * 2**-66``, far below a plain sum's ``size * M * 2**-53``. ``size`` is the
number of cells of the *grid* the values live on, not the count of values
summed (a window, masked cells): every backend knows it, so every backend
picks the same folds; the bound needs ``L <= p - 2`` (float32 grids up to
``2**22`` cells, where few bits per fold remain: the error bound is then loose).

Non-finite input: an inf or nan anywhere makes ``M`` infinite (a nan counts as
inf), and the result is then the sum of the non-finite values alone (a third
lane: ``+inf``, ``-inf`` or ``nan``, as a plain sum gives, and in any order).
All-zero input sums to ``0.0``. Values so large that ``sigma_1`` would overflow
are scaled by a power of two first (exact), and the result scaled back; values
below about ``2**(emin + K * p)`` (1e-276 for float64) lose the guarantee to
subnormal arithmetic.

The algorithm is written once on operations NumPy and ``jax.numpy`` share
(``xp`` is either module), as local kernels are: the automatic and explicit
paths call it on ``jax.numpy`` blocks inside ``shard_map`` with
``pmax``/``psum``, the MPI path on NumPy blocks with ``Allreduce``, and the
arithmetic (elementwise, then exact sums) is the same IEEE operations on both.
XLA does not simplify ``(sigma + x) - sigma`` away (no fast-math), and the
values are multiplied by the scale (a power of two, 1 unless huge) before the
first fold, so a product being summed (``pgas.sum(u * v)``) is rounded by
itself, as NumPy rounds it, and never fused with ``sigma`` into an FMA:
``tests/globalview/test_reprosum.py`` checks the bits against this algorithm
written in NumPy in the test.

Cost: a pass or two over the values more than a plain sum (the absolute values
and their max, then the folds, whose lanes are summed as one variadic reduction).
The Poisson example's CG, two sums per iteration, takes 1.51-1.55x the plain-sum
CG's time per iteration (1025x1025 float64, 2x2 CPU devices).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pgas.errors import PgasError

__all__ = ["folds", "local_max", "lanes", "combine", "total"]


def folds(dtype: Any) -> int:
    """``K``, the number of folds: 2 for float64, 3 for float32 and smaller floats.

    >>> folds("float64"), folds("float32")
    (2, 3)
    """
    return 2 if np.finfo(dtype).nmant >= 52 else 3


def _level(size: int, dtype: Any) -> int:
    """``L = max(1, ceil(log2(size)))``: at most ``2**L`` values are summed exactly."""
    level = max(1, math.ceil(math.log2(max(size, 1))))
    p = np.finfo(dtype).nmant + 1
    if level > p - 2:
        raise PgasError(
            f"a reproducible sum over a grid of {size} cells in {np.dtype(dtype)} keeps no bits "
            f"per fold (it takes at most 2**{p - 2} cells); sum in float64 (.astype('float64'))"
        )
    return level


def local_max(values, xp):
    """``max |x|`` of this block (a nan counts as inf; 0 for an empty block).

    >>> float(local_max(np.array([1.0, -3.0, np.nan]), np)), float(local_max(np.ones(0), np))
    (inf, 0.0)
    """
    a = xp.abs(values)
    a = xp.where(xp.isnan(a), xp.asarray(np.inf, a.dtype), a)
    return xp.max(a) if a.size else xp.asarray(0, a.dtype)


def _exponents(amax, size: int, dtype, xp):
    """``E`` (``amax < 2**E``) made safe for non-finite and zero ``amax``, and the scale shift."""
    finfo = np.finfo(dtype)
    finite = xp.isfinite(amax) & (amax > 0)
    _, e = xp.frexp(xp.where(finite, amax, xp.asarray(1, amax.dtype)))
    top = finfo.maxexp - 2 - _level(size, dtype)  # e_1 = E + L stays below maxexp - 1
    shift = xp.maximum(e - top, 0)
    return e - shift, shift


def lanes(values, amax, size: int, xp):
    """This block's ``K`` fold sums (exact) and the sum of its non-finite values: ``K + 1`` lanes.

    Args:
        values: this block's values (cells not summed hold 0).
        amax: ``max |x|`` over all blocks (:func:`local_max`, then a max all-reduce).
        size: cells of the grid the values live on (every backend passes the same).
        xp: ``numpy`` or ``jax.numpy``.

    Returns:
        A vector of ``K + 1`` values of ``values.dtype``; sum it over all blocks (in
        any order), then :func:`combine`.

    >>> x = np.array([0.1, 0.2, 0.3])
    >>> s = lanes(x, local_max(x, np), 3, np)
    >>> float(combine(s, local_max(x, np), 3, np))
    0.6
    """
    dtype = values.dtype
    p, level = np.finfo(dtype).nmant + 1, _level(size, dtype)
    e, shift = _exponents(xp.asarray(amax, dtype), size, dtype, xp)
    one = xp.asarray(1, dtype)
    rest = xp.where(xp.isfinite(values), values, xp.asarray(0, dtype))
    rest = rest * xp.ldexp(one, -shift)  # exact: a power of two (1 unless huge)
    parts = []
    for j in range(folds(dtype)):
        sigma = xp.ldexp(xp.asarray(1.5, dtype), e + level + j * (level - p))
        q = (sigma + rest) - sigma
        rest = rest - q
        parts.append(q)
    parts.append(xp.where(xp.isfinite(values), xp.asarray(0, dtype), values))  # inf, -inf, nan
    return xp.stack(_sums(parts, xp))


def _sums(parts: list, xp) -> list:
    """The sum of each of ``parts`` (same shape), each the same in any order (a fold's
    exact sum, the non-finite values' inf, -inf or nan): one sum each in NumPy, one pass over
    the block for all of them in JAX (a variadic reduction, where separate sums each read a
    materialised array on XLA's CPU backend)."""
    if xp is np:
        return [np.sum(q) for q in parts]
    import jax

    def add(a, b):
        return tuple(x + y for x, y in zip(a, b))

    zeros = tuple(xp.zeros((), q.dtype) for q in parts)
    return list(jax.lax.reduce(tuple(parts), zeros, add, tuple(range(parts[0].ndim))))


def combine(summed, amax, size: int, xp):
    """The sum from the lanes summed over all blocks: the folds in a fixed order, first first.

    ``amax`` and ``size`` as given to :func:`lanes`; with a non-finite ``amax`` the
    last lane (the non-finite values' sum).

    >>> x = np.array([1e16, 1.0, -1e16])
    >>> float(combine(lanes(x, local_max(x, np), 3, np), local_max(x, np), 3, np))
    1.0
    """
    dtype = summed.dtype
    _, shift = _exponents(xp.asarray(amax, dtype), size, dtype, xp)
    k = folds(dtype)
    total = summed[0]
    for j in range(1, k):
        total = total + summed[j]
    total = total * xp.ldexp(xp.asarray(1, dtype), shift)  # exact, and so is its derivative
    return xp.where(xp.isfinite(xp.asarray(amax, dtype)), total, summed[k])


def total(values, size: int | None = None, xp=np):
    """The reproducible sum of ``values`` held whole in one process (a CG's first ``r.r``).

    The same bits as :func:`pgas.sum` with ``reproducible=True`` of the same values on any
    mesh, and the MPI path's ``reduce(..., reproducible=True)``, given the same ``size``
    (the grid's cells; default ``values.size``).

    >>> float(total(np.full(10, 0.1)))
    1.0
    """
    values = xp.asarray(values)
    size = values.size if size is None else size
    amax = local_max(values, xp)
    return combine(lanes(values, amax, size, xp), amax, size, xp)[()]
