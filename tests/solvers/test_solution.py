"""A Solution unpacks as (x, iterations) and crosses jax.jit as a pytree."""

import jax
import jax.numpy as jnp
import numpy as np

import pgas
from pgas.solvers.solution import Solution


def test_a_solution_unpacks_and_crosses_jit():
    u = pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))
    s = Solution(u, jnp.asarray(4), jnp.asarray(True), jnp.asarray(1e-9))
    x, iterations = s
    assert x is u and int(iterations) == 4
    out = jax.jit(
        lambda s: Solution((s.x * 2).to_array(), s.iterations + 1, s.converged, s.residual)
    )(s)
    assert isinstance(out, Solution) and int(out.iterations) == 5 and bool(out.converged)
    assert np.array_equal(out.x.to_numpy(), [0.0, 2.0, 4.0])
