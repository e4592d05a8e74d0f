"""Solves as linear maps of their right-hand side: implicit differentiation.

A solve ``x = A^-1 r`` is wrapped in ``jax.lax.custom_linear_solve``: JAX
differentiates it as the linear map it is, not through its iterations. The
derivative of a solve with respect to its right-hand side (reverse mode: the
cotangent) costs one more solve with the same (symmetric) operator; with
respect to what the operator reads (a coefficient field), the tangent
``-A^-1 (dA) x`` is one solve too. The iterations' states are never stored.

The solve is traced once: ``jax.lax.custom_linear_solve`` traces its solve and,
for a symmetric operator, the same solve again as the transpose solve; both
replay the one jaxpr (a multigrid solve's Python tracing, the V-cycle's global
view, is then done once per program, not twice).
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from pgas.globalview.array import GlobalArray

__all__ = ["linear_solve"]


def linear_solve(matvec: Callable[[GlobalArray], GlobalArray], rhs: GlobalArray,
                 solve: Callable[[GlobalArray], tuple[GlobalArray, tuple]]):  # fmt: skip
    """``solve(rhs)`` (``(x, aux)``) with ``matvec`` symmetric, differentiated implicitly;
    ``solve`` is traced once.

    >>> import numpy as np, jax, pgas
    >>> u = pgas.from_numpy(np.array([2.0, 4.0]), pgas.make_mesh(devices=1))
    >>> halve = lambda v: pgas.apply(lambda d: d / 2, v).to_array()
    >>> double = lambda v: pgas.apply(lambda d: d * 2, v).to_array()
    >>> x, aux = linear_solve(double, u, lambda r: (halve(r), ()))
    >>> x.to_numpy()
    array([1., 2.])
    """
    traced, consts = jax.closure_convert(solve, rhs)  # one trace, replayed by both solves
    return jax.lax.custom_linear_solve(matvec, rhs, lambda _, r: traced(r, *consts),
                                       symmetric=True, has_aux=True)  # fmt: skip
