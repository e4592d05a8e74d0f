"""How a solve is called: compiled once outside a trace, inlined inside one; its result.

Outside a trace (an eager call) a solve is one compiled program, cached by
what it cannot take as an argument (the operator and preconditioner by
identity, the iteration limit, the layout through JAX's own cache), so a
Python loop of solves compiles once; the right-hand side, the first guess, the
tolerance and a :class:`~pgas.solvers.Poisson` operator's coefficient are
arguments. A solve that did not converge warns there
(:class:`pgas.NonConvergenceWarning`). Inside a trace (``jax.jit``, a step of
:func:`pgas.run`) the same function is traced in place, and ``converged`` says
what happened.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.loop.timeloop import check_not_framed
from pgas.loop.until import NonConvergenceWarning
from pgas.solvers.solution import Solution

__all__ = ["call", "solution", "check_tol"]


def check_tol(tol) -> None:
    """``tol`` must be a number in (0, 1)."""
    if isinstance(tol, jax.core.Tracer):
        return
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 < tol < 1:
        raise PgasError(f"tol = {tol!r}: give the relative residual to reach, a number "
                        f"between 0 and 1 (e.g. 1e-8)")  # fmt: skip


def solution(x, iterations, converged, rr, bb) -> Solution:
    """A :class:`Solution` from the loop's counts and ``r.r`` against ``b.b``."""
    residual = jnp.sqrt(rr / jnp.where(bb > 0, bb, 1))
    return Solution(x, iterations, converged, residual)


@functools.lru_cache(maxsize=64)
def _compiled(fn: Callable, static) -> Callable:
    return jax.jit(functools.partial(fn, static))


def _placed(args):
    """Each field's data on its layout's sharding: an array computed elsewhere (a View's
    ``to_array()``) may carry an equivalent sharding of another spec, which ``jax.jit``
    would key a second program on."""

    def place(g):
        if isinstance(g, GlobalArray) and g.ext is None and g.data.sharding != g.layout.sharding:
            return GlobalArray(jax.device_put(g.data, g.layout.sharding), g.layout)
        return g

    return jax.tree.map(place, args, is_leaf=lambda x: isinstance(x, GlobalArray))


def call(fn: Callable, static: tuple, args: tuple, name: str) -> Solution:
    """``fn(static, *args)``: compiled and cached outside a trace, traced in place inside."""
    check_not_framed(args)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args)):
        return fn(static, *args)
    try:
        hash(static)
    except TypeError as err:
        raise PgasError(f"{name}: the operator and preconditioner must be hashable (functions "
                        f"or pgas.solvers objects): {err}") from None  # fmt: skip
    out = _compiled(fn, static)(*_placed(args))
    if not bool(out.converged):
        warnings.warn(
            f"{name} reached its limit of {int(out.iterations)} iterations before the relative "
            f"residual fell to tol (it is {float(out.residual):.3g}); raise the limit, loosen "
            f"tol, or check the problem (a preconditioner that is not symmetric positive "
            f"definite, an operator that is not linear)", NonConvergenceWarning, stacklevel=3,
        )  # fmt: skip
    if not math.isfinite(float(out.residual)):
        warnings.warn(f"{name} ended with a non-finite residual: check the operator and the "
                      f"right-hand side", NonConvergenceWarning, stacklevel=3)  # fmt: skip
    return out
