"""Geometric multigrid for :class:`~pgas.solvers.Poisson`: V-cycles and full multigrid.

A V-cycle (:mod:`pgas.solvers.cycle`) smooths, restricts the residual
(:mod:`pgas.solvers.transfer`), corrects from the next coarser level, and
smooths again; with as many sweeps before as after it is symmetric:
:meth:`Poisson.vcycle` is a preconditioner for :func:`pgas.solvers.cg`
(MG-preconditioned CG).

:func:`multigrid` repeats V-cycles, as one compiled :func:`pgas.run_until`
loop, until ``||b - A x|| <= tol ||b||``; with ``fmg=True`` it starts from full
multigrid (the coarsest solve prolongated up level by level, a V-cycle on
each), which reaches the discretisation error in about one cycle's work.

Where constants are the null space (every axis periodic or Neumann) the
right-hand side must sum to zero over the unknowns; it is checked outside a
trace (a clear error), the residual is projected onto mean zero at every level,
and the solution has mean zero plus the first guess's mean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reduce import sum as global_sum
from pgas.globalview.view import View
from pgas.loop.timeloop import check_not_framed
from pgas.loop.until import run_until
from pgas.solvers import cycle, fields, implicit, krylov, outer
from pgas.solvers.poisson_operator import Poisson
from pgas.solvers.solution import Solution

__all__ = ["multigrid"]


def multigrid(op: Poisson, b: GlobalArray, x0: GlobalArray | None = None, *,
              tol: float = 1e-8, max_cycles: int = 100, fmg: bool = False) -> Solution:  # fmt: skip
    """Solve ``op(x) = b`` by multigrid V-cycles (module docstring).

    Args:
        op: the operator, a :class:`~pgas.solvers.Poisson` (its spacing,
            coefficient, sweeps and levels).
        b: the right-hand side, a field or an expression (its values on ``Keep`` faces are
            not read).
        x0: the first guess, and on ``Keep`` faces the boundary values the
            solution keeps (default: zeros).
        tol: stop when ``||b - A x|| <= tol ||b||`` over the unknowns.
        max_cycles: the most V-cycles (after full multigrid, where ``fmg``).
        fmg: start from full multigrid.

    Returns:
        A :class:`~pgas.solvers.Solution`; ``iterations`` counts V-cycles.

    Raises:
        PgasError: an operator or field it cannot solve (boundaries, sizes), bad
            settings, or (outside a trace) a right-hand side with no solution.

    >>> import numpy as np, pgas
    >>> n = 5
    >>> b = pgas.from_numpy(np.ones((n, n)), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> sol = pgas.solvers.multigrid(pgas.solvers.Poisson(h=1 / (n - 1)), b)
    >>> bool(sol.converged), int(sol.iterations) < 12
    (True, True)
    """
    if not isinstance(op, Poisson):
        raise PgasError(
            f"op is a {type(op).__name__}: multigrid solves a "
            f"pgas.solvers.Poisson operator (use pgas.solvers.cg for others)"
        )
    b = b.to_array() if isinstance(b, View) else b
    krylov.check_args(b, x0, tol, max_cycles, "max_cycles")
    op.check(b)
    if not isinstance(fmg, bool):
        raise PgasError(f"fmg = {fmg!r}: give True or False")
    if op.singular(b.layout) and not isinstance(b.data, jax.core.Tracer):
        _check_consistent(b)
    return outer.call(_multigrid, (max_cycles, fmg), (op, b, x0, tol), "multigrid")


def _check_consistent(b: GlobalArray) -> None:
    total = float(global_sum(b))
    size = float(global_sum(abs(b)))
    if abs(total) > 1e-10 * max(size, 1e-300):
        raise PgasError(
            f"b sums to {total:.6g} over the unknowns, but every axis is periodic or Neumann: "
            f"constants are the operator's null space, so A x = b has a solution only where b "
            f"sums to zero; subtract its mean (b - pgas.mean(b)) or fix the source"
        )


def _multigrid(static, op, b, x0, tol) -> Solution:
    max_cycles, fmg = static
    singular = op.singular(b.layout)
    x0 = fields.zeros(b.layout, b.dtype) if x0 is None else x0
    r0 = fields.updated(fields.masked(b, b), -1.0, op(x0))
    if singular:
        r0 = cycle.mean_free(r0)
    bb = fields.dot(b, b)  # over the unknowns

    def solve(rhs):
        levels = cycle.operators(op, rhs.layout)
        e = cycle.full_multigrid(levels, rhs) if fmg else fields.zeros(rhs.layout, rhs.dtype)
        r = cycle.residual(op, e, rhs)
        state = {"e": e, "r": r, "rr": fields.dot(r, r)}

        def step(s):
            check_not_framed(s)  # strided transfers: the loop's plan learns it at once
            e = fields.updated(s["e"], 1.0, cycle.vcycle(levels, s["r"]))
            r = cycle.residual(op, e, rhs)
            return {"e": e, "r": r, "rr": fields.dot(r, r)}

        limit = jnp.asarray(tol, rhs.dtype) ** 2 * bb
        out = run_until(step, state, lambda s: s["rr"] <= limit, max_cycles, check_every=1)
        e = cycle.mean_free(out.state["e"]) if singular else out.state["e"]
        return e, (out.steps_taken, out.converged, out.state["rr"])

    e, (cycles, converged, rr) = implicit.linear_solve(op, r0, solve)
    return outer.solution(fields.updated(x0, 1.0, e), cycles, converged, rr, bb)
