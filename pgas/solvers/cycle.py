"""One multigrid cycle in the global view: smoothing, residuals, the coarsest solve, FMG.

A V-cycle on the residual ``r`` of a level (correction form, zero first guess):
``pre`` weighted-Jacobi sweeps (weight ``2d / (2d + 1)`` in ``d`` dimensions),
the residual restricted to the next coarser level (:mod:`pgas.solvers.transfer`),
a V-cycle there, the correction prolongated and added, ``post`` sweeps. The
levels stay split over the devices while each keeps two cells per axis; below
that they are replicated (:class:`Levels`: one all-gather of a few cells per
device per cycle, and none back). On the coarsest level (3 cells on a Keep
axis, 2 on the others, or where an axis cannot halve) conjugate gradients
solves, to a relative residual of :data:`COARSEST_TOL` or as many iterations
as the level has unknowns. With
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

import dataclasses
import math

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reduce import sum as global_sum
from pgas.grid.layout import Layout
from pgas.solvers import fields, krylov, transfer

__all__ = ["Levels", "operators", "residual", "smooth", "vcycle", "coarsest", "full_multigrid",
           "mean_free", "COARSEST_TOL"]  # fmt: skip

#: the coarsest level's CG stops at this relative residual
COARSEST_TOL = 1e-12


@dataclasses.dataclass(frozen=True, eq=False)
class Levels:
    """A multigrid hierarchy: each level's operator, finest first, on the field's devices,
    and the levels below them, replicated on every device (``None``: none).

    Built inside a trace (the coarse coefficients are traced arrays); not a pytree.
    """

    ops: tuple
    layouts: tuple
    below: Levels | None = None

    @property
    def depth(self) -> int:
        """Levels in all (the replicated ones start at the last split level's grid)."""
        return len(self.ops) + (self.below.depth - 1 if self.below is not None else 0)

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """Each level's grid, finest first."""
        mine = tuple(lay.shape for lay in self.layouts)
        return mine + (self.below.shapes[1:] if self.below is not None else ())


def operators(op, layout: Layout) -> Levels:
    """The hierarchy of ``op`` on ``layout``: twice the spacing and the restricted
    coefficient per level, while every device keeps two cells
    (:func:`pgas.solvers.transfer.hierarchy`); where the grid would halve further on one
    device, the levels below are replicated: the last split level's residual is gathered
    onto every device (a few cells per device: one small all-gather per cycle), the
    coarser levels run there, and each device keeps its block of the correction.

    Raises:
        PgasError: ``op.levels`` more than the grid has.
    """
    levels = _levels(op, layout, op.levels)
    if op.levels is not None and levels.depth < op.levels:
        sizes = " -> ".join(" x ".join(map(str, shape)) for shape in levels.shapes)
        raise PgasError(
            f"levels = {op.levels}: the grid has only {levels.depth} level(s) ({sizes}; a "
            f"level halves every axis, "
            f"Keep axes 2**L + 1 cells, the others an even count, down to 3 and 2 cells); "
            f"give levels <= {levels.depth}, or None for all of them"
        )
    return levels


def _levels(op, layout: Layout, most: int | None) -> Levels:
    lays = transfer.hierarchy(layout, most)
    ops = [op]
    for _ in lays[1:]:
        prev = ops[-1]
        a = None if prev.coefficient is None else transfer.restrict(prev.coefficient)
        ops.append(prev.coarse(a))
    below = None
    if (most is None or len(lays) < most) and transfer.halves_alone(lays[-1]):
        last = ops[-1]
        a = None if last.coefficient is None else fields.gathered(last.coefficient)
        rest = None if most is None else most - len(lays) + 1
        below = _levels(dataclasses.replace(last, coefficient=a), fields.replicated(lays[-1]),
                        rest)  # fmt: skip
    return Levels(tuple(ops), tuple(lays), below)


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


def vcycle(levels: Levels, r: GlobalArray, level: int = 0) -> GlobalArray:
    """One V-cycle from zero on ``A e = r`` at ``level`` of ``levels`` (:func:`operators`)."""
    op = levels.ops[level]
    singular = op.singular(r.layout)
    if level == len(levels.ops) - 1:
        return _bottom(levels, mean_free(r) if singular else r)
    pre, post = op.sweeps
    e = smooth(op, None, r, pre)
    coarse = transfer.restrict(residual(op, e, r))
    ec = vcycle(levels, mean_free(coarse) if singular else coarse, level + 1)
    e = fields.updated(e, 1.0, transfer.prolong(ec, r.layout))
    return smooth(op, e, r, post)


def _bottom(levels: Levels, r: GlobalArray) -> GlobalArray:
    """The last split level: a V-cycle on the replicated levels below, else the coarsest
    solve."""
    if levels.below is None:
        return coarsest(levels.ops[-1], r)
    return fields.scattered(vcycle(levels.below, fields.gathered(r)), r.layout)


def coarsest(op, r: GlobalArray) -> GlobalArray:
    """The coarsest level's solve: CG to :data:`COARSEST_TOL`, at most one iteration per
    unknown."""
    unknowns = math.prod(n - (2 if sl.start == 1 else 0)
                         for n, sl in zip(r.shape, fields.unknowns(r.layout)))  # fmt: skip
    x, _ = krylov.iterate(op, None, r, fields.dot(r, r), COARSEST_TOL, max(unknowns, 1),
                          fields.dot)  # fmt: skip
    return mean_free(x) if op.singular(r.layout) else x


def full_multigrid(levels: Levels, rhs: GlobalArray) -> GlobalArray:
    """Full multigrid from zero: the coarsest solve, then per finer level the prolongated
    solution and one V-cycle on its residual."""
    rhss = [rhs]
    for _ in levels.ops[1:]:
        rhss.append(transfer.restrict(rhss[-1]))
    if levels.below is None:
        e = coarsest(levels.ops[-1], rhss[-1])
    else:
        below = full_multigrid(levels.below, fields.gathered(rhss[-1]))
        e = fields.scattered(below, rhss[-1].layout)
    for level in range(len(levels.ops) - 2, -1, -1):
        e = transfer.prolong(e, rhss[level].layout)
        d = vcycle(levels, residual(levels.ops[level], e, rhss[level]), level)
        e = fields.updated(e, 1.0, d)
    return e
