"""Conjugate gradients, preconditioned or not, for a user's operator on GlobalArrays.

:func:`cg` solves ``A x = b`` for a symmetric positive (semi-)definite ``A``
given as a function of fields (global-view code: ``A(p)`` returns a field or
an expression of the same shape). It runs as one compiled
:func:`pgas.run_until` loop; each iteration applies ``A`` once (its halo
exchange), the preconditioner once, and reduces two or three scalars (one
all-reduce each, or two when ``reproducible``). A preconditioner ``M`` is any
function of a field that is itself a pgas program: a multigrid cycle
(:meth:`pgas.solvers.Poisson.vcycle`), a few Jacobi sweeps by :func:`pgas.run`,
a diagonal scaling.

Solves are differentiable by implicit differentiation
(:mod:`pgas.solvers.implicit`), and run inside ``jax.jit``, ``jax.vmap`` and
inside the step of :func:`pgas.run` or :func:`pgas.run_until` (a solve per
time step: the step then runs one step per exchange, the solve's own loop as
in a standalone call).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.view import View
from pgas.loop.timeloop import check_not_framed
from pgas.loop.until import run_until
from pgas.solvers import fields, implicit, outer
from pgas.solvers.solution import Solution

__all__ = ["cg", "check_symmetric", "check_args", "iterate"]


def cg(
    A: Callable,
    b: GlobalArray,
    x0: GlobalArray | None = None,
    *,
    M: Callable | None = None,
    tol: float = 1e-8,
    max_iters: int = 10_000,
    reproducible: bool = True,
    check: bool = True,
) -> Solution:
    """Solve ``A x = b`` by (preconditioned) conjugate gradients.

    Args:
        A: the operator, ``A(p)`` a field (or View) of ``b``'s shape; linear,
            symmetric and positive (semi-)definite over the unknowns (cells on
            ``Keep`` faces hold boundary values: :mod:`pgas.solvers.fields`).
        b: the right-hand side, a field or an expression (its values on ``Keep`` faces are
            not read).
        x0: the first guess, and on ``Keep`` faces the boundary values the
            solution keeps (default: zeros).
        M: a preconditioner, ``M(r)`` an approximation of ``A^-1 r``, symmetric
            positive definite (``None``: none).
        tol: stop when ``||b - A x|| <= tol ||b||`` over the unknowns.
        max_iters: the most iterations (reaching it: ``converged`` is ``False``
            and a :class:`pgas.NonConvergenceWarning` is issued outside a trace).
        reproducible: reproducible sums (``pgas.sum(..., reproducible=True)``):
            the same iterates, bit for bit, on every mesh.
        check: outside a trace, test ``A`` (and ``M``) for symmetry first (not a
            :class:`~pgas.solvers.Poisson` or its ``vcycle``, symmetric as built):
            ``<A u, v> = <u, A v>`` for two pseudo-random fields (one small compiled
            program; :func:`check_symmetric`). Inside a trace nothing is tested: an
            operator that is not symmetric positive definite may stall or diverge
            (``converged`` is then ``False``).

    Returns:
        A :class:`~pgas.solvers.Solution`. Eager calls compile once per ``A``,
        ``M`` (by identity, as ``jax.jit``), layout and ``max_iters``.

    >>> import numpy as np, pgas
    >>> b = pgas.from_numpy(np.array([0.0, 1.0, 1.0, 1.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> x, iterations = pgas.solvers.cg(pgas.solvers.Poisson(), b)
    >>> x.to_numpy(), int(iterations)
    (array([0. , 1.5, 2. , 1.5, 0. ]), 2)
    """
    b = b.to_array() if isinstance(b, View) else b
    check_args(b, x0, tol, max_iters)
    if check and not isinstance(b.data, jax.core.Tracer):
        for name, op in (("A", A), ("M", M)):
            if op is not None and not _symmetric_by_construction(op):
                check_symmetric(op, b, name)
    return outer.call(_cg, (A, M, max_iters, reproducible), (b, x0, tol), "cg")


def _symmetric_by_construction(op) -> bool:
    """An operator that says it is symmetric as built (``op.symmetric``, a
    :class:`~pgas.solvers.Poisson`), or a V-cycle of one with as many sweeps before as after
    (``vcycle_symmetric``): no test needed."""
    if getattr(op, "symmetric", False) is True:
        return True
    owner = getattr(op, "__self__", None)
    return getattr(op, "__name__", "") == "vcycle" and getattr(owner, "vcycle_symmetric", False)


def check_symmetric(A: Callable, b: GlobalArray, name: str = "A") -> None:
    """Raise where ``<A u, v>`` and ``<u, A v>`` differ for two pseudo-random fields ``u, v``
    of ``b``'s layout (beyond rounding: ``1e-8`` of ``|A u| |v|``).

    >>> import numpy as np, pgas
    >>> b = pgas.from_numpy(np.zeros(6), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> check_symmetric(pgas.solvers.Poisson(), b)
    >>> def upwind(p):
    ...     out = p.copy()
    ...     out[1:-1] = p[1:-1] - p[:-2]
    ...     return out
    >>> check_symmetric(upwind, b)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.PgasError: A is not symmetric: <A u, v> = ... but <u, A v> = ...
    """
    _symmetric(A, b.layout, np.dtype(b.dtype), name)


@functools.lru_cache(maxsize=64)
def _symmetric(A: Callable, layout, dtype, name: str) -> None:
    """:func:`check_symmetric`, once per operator and layout (a passed check is kept, so
    a Python loop of solves tests once)."""
    uv, vu, scale = (float(x) for x in _products(A, layout, dtype))
    if abs(uv - vu) > 1e-8 * scale:
        raise PgasError(
            f"{name} is not symmetric: <{name} u, v> = {uv:.6g} but <u, {name} v> = {vu:.6g} "
            f"for two pseudo-random fields u, v (over the unknowns); conjugate gradients needs "
            f"a symmetric positive definite {name} (check its stencil's weights and boundary "
            f"rows), or pass check=False to skip this test"
        )


def _products(A, layout, dtype):
    @jax.jit
    def products():
        u, v = (_pseudo_random(layout, dtype, seed) for seed in (1, 2))
        au, av = fields.masked(A(u), u), fields.masked(A(v), v)
        norm = jnp.sqrt(fields.dot(au, au) * fields.dot(v, v))
        return fields.dot(au, v), fields.dot(u, av), norm

    return products()


def _pseudo_random(layout, dtype, seed: int) -> GlobalArray:
    """A field of values in [0, 1) from its global index (no transfer, any mesh)."""
    out = fields.zeros(layout, dtype)
    index = jnp.zeros(layout.physical_shape, dtype)
    for axis, n in enumerate(layout.physical_shape):
        shape = [1] * len(layout.physical_shape)
        shape[axis] = n
        index = index * 1.618 + jnp.arange(n, dtype=dtype).reshape(shape) * (seed + 0.7)
    data = jnp.sin(index) * 0.5 + 0.5
    if layout.mesh.size > 1:
        data = jax.lax.with_sharding_constraint(data, layout.sharding)
    return fields.masked(GlobalArray(data, layout), out)


def check_args(b, x0, tol, max_iters, name: str = "max_iters") -> None:
    if not isinstance(b, GlobalArray):
        raise PgasError(f"b is a {type(b).__name__}: give the right-hand side as a "
                        f"pgas.GlobalArray")  # fmt: skip
    if x0 is not None and (not isinstance(x0, GlobalArray) or x0.layout != b.layout):
        raise PgasError("x0 must be a pgas.GlobalArray of b's layout (shape, mesh, spec and "
                        "boundary), or None for zeros")  # fmt: skip
    if not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1:
        raise PgasError(f"{name} = {max_iters!r}: give a whole number >= 1")
    outer.check_tol(tol)


def _cg(static, b, x0, tol) -> Solution:
    A, M, max_iters, reproducible = static
    M = _prepared(M, b.layout)
    dot = functools.partial(fields.dot, reproducible=reproducible)
    x0 = fields.zeros(b.layout, b.dtype) if x0 is None else x0
    r0 = fields.masked(b, b)
    r0 = fields.updated(r0, -1.0, fields.masked(A(x0), b))
    bb = dot(b, b)  # over the unknowns

    def solve(rhs):
        return iterate(A, M, rhs, bb, tol, max_iters, dot)

    e, (iterations, converged, rr) = implicit.linear_solve(lambda v: fields.masked(A(v), b),
                                                           r0, solve)  # fmt: skip
    return outer.solution(fields.updated(x0, 1.0, e), iterations, converged, rr, bb)


def _prepared(M, layout):
    """``M`` made once per solve, outside the loop, where it has a per-layout form
    (``op.vcycle`` of a :class:`~pgas.solvers.Poisson`: its hierarchy, with the coefficient
    restricted level by level, built once instead of in every iteration)."""
    owner = getattr(M, "__self__", None)
    if getattr(M, "__name__", "") == "vcycle" and hasattr(owner, "vcycle_on"):
        return owner.vcycle_on(layout)
    return M


def iterate(A, M, rhs, bb, tol, max_iters, dot):
    """``(x, (iterations, converged, r.r))``: CG from zero on ``rhs`` until ``r.r <= tol**2
    bb``, as one :func:`pgas.run_until` loop.

    Each iteration starts by preconditioning its residual (``z = M(r)``, then the new
    direction ``p = z + beta p``), so ``M`` appears once in the compiled program: the first
    iteration's ``beta`` is zero (``rz`` starts at zero) and its ``p`` is ``z``."""
    rr = dot(rhs, rhs)
    zero = fields.zeros(rhs.layout, rhs.dtype)
    state = {"x": zero, "r": rhs, "p": zero, "rr": rr, "rz": jnp.zeros_like(rr)}

    def step(s):
        if M is not None:
            check_not_framed(s)  # a preconditioner may slice with strides (multigrid)
        x, r, p, rz = s["x"], s["r"], s["p"], s["rz"]
        z = r if M is None else fields.masked(M(r), r)
        new = s["rr"] if M is None else dot(r, z)
        beta = jnp.where(rz > 0, new / jnp.where(rz > 0, rz, 1), 0)
        p = fields.updated(z, beta, p)
        ap = fields.masked(A(p), p)
        pap = dot(p, ap)
        alpha = jnp.where(pap > 0, new / jnp.where(pap > 0, pap, 1), 0)
        x = fields.updated(x, alpha, p)
        r = fields.updated(r, -alpha, ap)
        return {"x": x, "r": r, "p": p, "rr": dot(r, r), "rz": new}

    limit = jnp.asarray(tol, rhs.dtype) ** 2 * bb
    out = run_until(step, state, lambda s: s["rr"] <= limit, max_iters, check_every=1)
    return out.state["x"], (out.steps_taken, out.converged, out.state["rr"])
