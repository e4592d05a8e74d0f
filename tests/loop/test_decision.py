"""A check's decision: one truth value built from reductions, and whether it was finite."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.loop.decision import all_finite, call_converged, check_converged, check_decision


def test_all_finite_reads_the_reduced_values_and_the_float_scalars_of_the_state():
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.array([np.nan, 1.0]), mesh)  # a field's cells are not read here
    assert bool(all_finite([], u)) and bool(all_finite([jnp.float32(1), jnp.int32(7)], u))
    for bad in (np.nan, np.inf, -np.inf):
        assert not bool(all_finite([jnp.float64(bad)]))
        assert not bool(all_finite([], {"u": u, "rr": jnp.float32(bad)}))


def test_converged_must_be_one_truth_value_built_from_reductions():
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.zeros(4), mesh)
    check_converged(lambda u: (pgas.max(u) < 1) & (pgas.min(u) > -1), u, None)
    check_converged(lambda u, tol: pgas.max(u) < tol, u, 1.0)
    for converged, phrase in [
        (lambda u: u[1:] < 1, "converged returned a pgas expression of views of shape (3,)"),
        (lambda u: u, "converged returned a pgas.GlobalArray of shape (4,)"),
        (lambda u: pgas.max(u), "converged returned float64[]"),
        (lambda u: pgas.max(u) < 1 and pgas.min(u) > 0, "combined with & | ~"),
    ]:
        with pytest.raises(pgas.PgasError, match=re.escape(phrase)):
            check_converged(converged, u, None)
    assert bool(call_converged(lambda x: x < 1, 0.5))
    assert check_decision(np.float64(0.5) < 1.0, 1)
    with pytest.raises(pgas.PgasError, match="converged made no reduce"):
        check_decision(np.True_, 0)


def test_a_value_of_another_trace_is_not_read():
    """A reduction inside a branch of lax.cond in converged is a tracer of that branch's trace:
    reading it in the check would leak it (JAX's UnexpectedTracerError); it is left out."""
    import jax

    leaked = []
    jax.jit(lambda x: leaked.append(x * 2) or x)(1.0)  # a tracer of a trace that has ended
    assert not bool(jax.jit(lambda x: all_finite([leaked[0], x]))(jnp.float64(np.inf)))
    assert bool(jax.jit(lambda x: all_finite([leaked[0], x]))(jnp.float64(1.0)))
