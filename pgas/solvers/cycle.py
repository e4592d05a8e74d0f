"""One multigrid cycle in the global view: smoothing, residuals, the coarsest solve, FMG.

A V-cycle on the residual ``r`` of a level (correction form, zero first guess):
``pre`` weighted-Jacobi sweeps (weight ``2d / (2d + 1)`` in ``d`` dimensions),
the residual restricted to the next coarser level (:mod:`pgas.solvers.transfer`),
a V-cycle there, the correction prolongated and added, ``post`` sweeps. On the
coarsest level (where an axis would keep fewer than two cells per device)
conjugate gradients solves in place, to a relative residual of
:data:`COARSEST_TOL` or as many iterations as the level has unknowns. With
``pre == post`` a V-cycle is a symmetric linear map of ``r``: a preconditioner
for CG. Full multigrid solves the coarsest level first and works up, one
V-cycle per level.

Where constants are the operator's null space (every axis periodic or Neumann),
every level's residual is projected onto mean zero.

The functions take the operator by duck typing (``stencil``, ``diagonal``,
``coarse``, ``singular``, ``sweeps``, ``levels``, ``coefficient``: a
:class:`pgas.solvers.Poisson`).
"""

from __future__ import annotations

import math

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reduce import sum as global_sum
from pgas.grid.layout import Layout
from pgas.solvers import fields, krylov, transfer

__all__ = ["operators", "residual", "smooth", "vcycle", "coarsest", "full_multigrid",
           "mean_free", "COARSEST_TOL"]  # fmt: skip

#: the coarsest level's CG stops at this relative residual
COARSEST_TOL = 1e-12


def operators(op, layout: Layout) -> list:
    """Each level's operator, finest first: twice the spacing and the restricted
    coefficient per level, down the hierarchy of :func:`pgas.solvers.transfer.hierarchy`."""
    levels = transfer.hierarchy(layout, op.levels)
    if op.levels is not None and len(levels) < op.levels:
        sizes = " -> ".join(" x ".join(map(str, lay.shape)) for lay in levels)
        raise PgasError(
            f"levels = {op.levels}: the grid has only {len(levels)} level(s) on this mesh "
            f"({sizes}; a level halves every axis and keeps at least two cells per device, "
            f"Keep axes 2**L + 1 cells, the others an even count); give levels <= "
            f"{len(levels)}, or None for all of them"
        )
    out = [op]
    for _ in levels[1:]:
        prev = out[-1]
        a = None if prev.coefficient is None else transfer.restrict(prev.coefficient)
        out.append(prev.coarse(a))
    return out


def residual(op, e: GlobalArray, rhs: GlobalArray) -> GlobalArray:
    """``rhs - A e`` on the unknowns, zero on ``Keep`` faces."""
    idx = fields.unknowns(rhs.layout)
    r = fields.zeros(rhs.layout, rhs.dtype)
    r[idx] = rhs[idx] - op.stencil(e)
    return r


def smooth(op, e: GlobalArray | None, rhs: GlobalArray, sweeps: int) -> GlobalArray:
    """``sweeps`` weighted-Jacobi sweeps on ``A e = rhs`` (``e = None``: from zero)."""
    idx = fields.unknowns(rhs.layout)
    weight = 2 * rhs.ndim / (2 * rhs.ndim + 1)
    diag = op.diagonal(rhs)
    for _ in range(sweeps):
        if e is None:
            e = fields.zeros(rhs.layout, rhs.dtype)
            e[idx] = weight * rhs[idx] / diag
        else:
            e[idx] = e[idx] + weight * (rhs[idx] - op.stencil(e)) / diag
    return e if e is not None else fields.zeros(rhs.layout, rhs.dtype)


def mean_free(x: GlobalArray) -> GlobalArray:
    """``x`` minus its mean (for the singular case, where every cell is an unknown)."""
    mean = global_sum(x) / math.prod(x.shape)
    out = x.copy()
    out[...] = x - mean
    return out


def vcycle(ops: list, r: GlobalArray, level: int = 0) -> GlobalArray:
    """One V-cycle from zero on ``A e = r`` at ``level`` of ``ops`` (:func:`operators`)."""
    op = ops[level]
    singular = op.singular(r.layout)
    if level == len(ops) - 1:
        return coarsest(op, mean_free(r) if singular else r)
    pre, post = op.sweeps
    e = smooth(op, None, r, pre)
    coarse = transfer.restrict(residual(op, e, r))
    ec = vcycle(ops, mean_free(coarse) if singular else coarse, level + 1)
    e = fields.updated(e, 1.0, transfer.prolong(ec, r.layout))
    return smooth(op, e, r, post)


def coarsest(op, r: GlobalArray) -> GlobalArray:
    """The coarsest level's solve: CG to :data:`COARSEST_TOL`, at most one iteration per
    unknown."""
    unknowns = math.prod(n - (2 if sl.start == 1 else 0)
                         for n, sl in zip(r.shape, fields.unknowns(r.layout)))  # fmt: skip
    x, _ = krylov.iterate(op, None, r, fields.dot(r, r), COARSEST_TOL, max(unknowns, 1),
                          fields.dot)  # fmt: skip
    return mean_free(x) if op.singular(r.layout) else x


def full_multigrid(ops: list, rhs: GlobalArray) -> GlobalArray:
    """Full multigrid from zero: the coarsest solve, then per finer level the prolongated
    solution and one V-cycle on its residual."""
    rhss = [rhs]
    for _ in ops[1:]:
        rhss.append(transfer.restrict(rhss[-1]))
    e = coarsest(ops[-1], rhss[-1])
    for level in range(len(ops) - 2, -1, -1):
        e = transfer.prolong(e, rhss[level].layout)
        d = vcycle(ops, residual(ops[level], e, rhss[level]), level)
        e = fields.updated(e, 1.0, d)
    return e
