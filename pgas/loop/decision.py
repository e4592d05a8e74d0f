"""A check's decision: what ``converged`` returns, checked, and whether it was finite.

Every backend's :func:`~pgas.loop.until.run_until` checks ``converged`` the same
way: a global-view one (:func:`check_converged`) or a local-view one
(:func:`check_decision`) must return one truth value, built from reductions, and
Python ``if`` on a reduction inside a compiled loop is explained
(:func:`call_converged`). A check is *finite* where every scalar it reduced and
every float scalar of the state is (:func:`all_finite`): the loop stops at a
check that is not (:mod:`pgas.loop.until`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.view import Operators
from pgas.loop.plan import signature

__all__ = ["check_converged", "called", "call_converged", "all_finite", "check_decision"]


def check_converged(converged: Callable, state, params) -> None:
    """A global-view ``converged`` (:func:`pgas.run_until`'s) returns a scalar boolean: traced
    once per function (a :class:`pgas.loop.until.SameCode`) and state signature, nothing runs.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(3), pgas.make_mesh(devices=1))
    >>> check_converged(lambda u: pgas.max(u) < 1, u, None)
    """
    key = (converged, signature((state, params)))
    if key in _CHECKED:
        return
    out = jax.eval_shape(lambda s, p: _one_value(call_converged(converged, *_args(s, p))),
                         state, params)  # fmt: skip
    leaves = jax.tree.leaves(out)
    if len(leaves) != 1 or getattr(leaves[0], "shape", None) != () or \
            leaves[0].dtype != jnp.bool_:  # fmt: skip
        got = jax.tree.map(lambda x: f"{x.dtype}{list(x.shape)}", out)
        raise PgasError(
            f"converged returned {got}; it must return a scalar boolean, e.g. "
            f"lambda s: pgas.max(abs(s['r'])) < 1e-8 (a comparison of a reduction)"
        )
    if len(_CHECKED) >= 64:  # it holds the functions (and what they close over) alive,
        _CHECKED.clear()  # as the program cache does: no more of them than it keeps
    _CHECKED.add(key)


_CHECKED: set = set()  # (converged, signature) pairs that returned a scalar boolean


def called(converged: Callable, state, params):
    """``converged(state)``, or ``converged(state, params)`` with params."""
    return converged(state, params) if params is not None else converged(state)


def _args(state, params) -> tuple:
    return (state,) if params is None else (state, params)


def _one_value(out):
    """``out``, what a global-view ``converged`` returned, unless it holds a pgas array or
    expression: a value per cell, not one decision."""
    for leaf in jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, Operators)):
        if isinstance(leaf, Operators):
            what = "a pgas.GlobalArray" if isinstance(leaf, GlobalArray) else \
                "a pgas expression of views"  # fmt: skip
            raise PgasError(
                f"converged returned {what} of shape {tuple(leaf.shape)} (a value per cell); "
                f"it must return a scalar boolean built from reductions, e.g. "
                f"pgas.max(abs(r)) < tol, or pgas.all(u < tol) for a test of every cell"
            )
    return out


def call_converged(converged: Callable, *args):
    """``converged(*args)``, traced inside a compiled loop (every backend but MPI): Python
    ``if``, ``and``, ``or`` or ``not`` on a reduction there raises a PgasError saying how to
    write it.

    >>> bool(call_converged(lambda x: x < 1, 0.5))
    True
    """
    try:
        return converged(*args)
    except jax.errors.TracerBoolConversionError:
        raise PgasError(
            "converged used Python `if`, `and`, `or` or `not` on a reduction: inside the "
            "compiled loop a reduction (pgas.max(...) < tol) is a traced value with no Python "
            "truth value. Return a scalar boolean built from reductions instead: the "
            "comparison itself, tests combined with & | ~ ((pgas.max(abs(r)) < tol) & "
            "(pgas.min(u) > 0)), a choice made with jnp.where(test, a, b)"
        ) from None


def all_finite(values, state=None) -> jax.Array:
    """Whether every float among ``values`` (the scalars a check reduced) and the 0-d
    float leaves of ``state`` is finite (neither NaN nor infinite); ``True`` with none.

    A value reduced inside a transformation of its own (a branch of ``lax.cond`` in
    ``converged``) is not visible outside it, and not read.

    >>> bool(all_finite([jnp.float64(1.0)], (jnp.float32(jnp.inf),)))
    False
    """
    scalars = [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
               if not isinstance(x, GlobalArray)]  # fmt: skip
    ok = jnp.ones((), jnp.bool_)
    for x in [*(v for v in values if _here(v, ok)), *scalars]:
        if jnp.ndim(x) == 0 and jnp.issubdtype(jnp.result_type(x), jnp.inexact):
            ok = ok & jnp.isfinite(x)
    return ok


def _here(value, probe) -> bool:
    """Whether ``value`` may be read where ``probe`` was made: not a tracer of another trace
    (one that ended, a branch of ``lax.cond``). JAX has no public test for it; where its
    tracers lack ``_trace``, every value passes."""
    if not isinstance(value, jax.core.Tracer) or not isinstance(probe, jax.core.Tracer):
        return not isinstance(value, jax.core.Tracer)
    return getattr(value, "_trace", None) is getattr(probe, "_trace", None)


def check_decision(out, reductions: int, scalars: bool = False):
    """``out``, what a local-view ``converged`` returned, checked (explicit and MPI paths).

    It must have called ``reduce`` (``reductions`` > 0: one decision for every device or
    rank, not a test of one block that would stop them at different steps), unless the
    state holds ``scalars`` (already reduced by the step, the same on every device: CG's
    ``rr``), and return one truth value.

    >>> check_decision(np.float64(0.5) < 1.0, 1)
    np.True_
    """
    if not reductions and not scalars:
        raise PgasError(
            "converged made no reduce(...) call: a test of one block alone would stop the "
            "devices (or ranks) at different steps; reduce over all of them, e.g. "
            "lambda e, reduce: reduce(abs(e[1:-1]), 'max') < tol"
        )
    dtype = getattr(out, "dtype", None)
    dtype = np.result_type(out) if dtype is None else np.dtype(dtype)
    if np.shape(out) != () or dtype != np.bool_:
        raise PgasError(
            f"converged returned {dtype}{list(np.shape(out))}; it must return a scalar "
            f"boolean, e.g. reduce(abs(r), 'max') < tol (a comparison of a reduction)"
        )
    return out
