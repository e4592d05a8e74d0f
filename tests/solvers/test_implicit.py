"""Solves differentiate implicitly: the gradient with respect to the right-hand side is one
more solve (the dense adjoint), with respect to a coefficient field central differences
agree, and forward mode gives the solve of the tangent."""

import jax
import numpy as np
import poisson_numpy as ref

import pgas

KINDS = ("keep", "keep")


def test_gradients_of_a_multigrid_solve_through_b_and_the_coefficient():
    n = 5  # on 2 x 2 devices: 5 x 5 split, then 5 x 5 and 3 x 3 replicated
    mesh = pgas.make_mesh(("y", "x"), devices=4)
    rng = np.random.default_rng(0)
    b, a = rng.standard_normal((n, n)), 1 + rng.random((n, n))
    f = lambda v: pgas.from_numpy(v, mesh, boundary=pgas.Keep())  # noqa: E731
    h = 1.0 / (n - 1)

    def loss(b, a):
        op = pgas.solvers.Poisson(h=h, coefficient=a)
        x = pgas.solvers.multigrid(op, b, tol=1e-12).x
        return pgas.sum(x * x)

    value, (gb, ga) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(f(b), f(a))
    x = ref.solve(b, KINDS, h, a)
    assert float(value) == np.sum(x * x) or abs(float(value) / np.sum(x * x) - 1) < 1e-9
    adjoint = ref.solve(2 * x, KINDS, h, a)  # A is symmetric: dL/db = A^-1 (2 x)
    np.testing.assert_allclose(gb.to_numpy()[1:-1, 1:-1], adjoint[1:-1, 1:-1], rtol=1e-8,
                               atol=1e-10 * abs(adjoint).max())  # fmt: skip
    eps = 1e-6
    for i, j in [(2, 2), (1, 3), (0, 2)]:  # (0, 2): an edge cell's coefficient is read too
        up, down = a.copy(), a.copy()
        up[i, j] += eps
        down[i, j] -= eps
        fd = (np.sum(ref.solve(b, KINDS, h, up) ** 2)
              - np.sum(ref.solve(b, KINDS, h, down) ** 2)) / (2 * eps)  # fmt: skip
        assert abs(float(ga.to_numpy()[i, j]) - fd) <= 1e-6 * max(abs(fd), 1e-3), (i, j)


def test_forward_mode_of_cg_is_the_solve_of_the_tangent():
    n = 9
    mesh = pgas.make_mesh(("y", "x"), devices=2)
    rng = np.random.default_rng(1)
    b, db = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    f = lambda v: pgas.from_numpy(v, mesh, boundary=pgas.Keep())  # noqa: E731
    op = pgas.solvers.Poisson()

    def tangent(b, db):  # under jax.jit: one program (eager: a program per operation)
        return jax.jvp(lambda b: pgas.solvers.cg(op, b, tol=1e-12).x, (b,), (db,))[1]

    got = jax.jit(tangent)(f(b), f(db))
    np.testing.assert_allclose(got.to_numpy(), ref.solve(db, KINDS, 1.0), rtol=1e-9, atol=1e-11)
