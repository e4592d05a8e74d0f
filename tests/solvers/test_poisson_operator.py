"""The Poisson operator against NumPy (tests/poisson_numpy.py): every grid kind, a variable
coefficient, 3-D; its diagonal; one level coarser."""

import jax
import numpy as np
import poisson_numpy as ref
import pytest

import pgas

FACES = {"keep": pgas.Keep(), "periodic": pgas.Periodic(), "neumann": pgas.Neumann()}


@pytest.mark.parametrize("kinds, shape, devices, coefficient", [
    (("keep", "neumann"), (9, 8), 4, True),
    (("periodic", "keep", "neumann"), (6, 5, 4), 2, False),
])  # fmt: skip
def test_the_operator_and_its_diagonal_are_numpy_s(kinds, shape, devices, coefficient):
    rng = np.random.default_rng(0)
    u, a = rng.standard_normal(shape), 1 + rng.random(shape)
    mesh = pgas.make_mesh(("z", "y", "x")[-len(shape) :], devices=devices)
    f = lambda v: pgas.from_numpy(v, mesh, boundary=tuple(FACES[k] for k in kinds))  # noqa: E731
    h = tuple(0.5 + i for i in range(len(shape)))
    op = pgas.solvers.Poisson(h=h, coefficient=f(a) if coefficient else None)

    @jax.jit
    def applied(op, u):  # one program (eager: one per operation)
        d = u.copy()
        d[ref.unknowns(kinds)] = op.diagonal(u)  # a number, or an expression of a
        return op(u), d

    au, d = applied(op, f(u))
    np.testing.assert_allclose(au.to_numpy(), ref.apply(u, kinds, h, a if coefficient else None),
                               rtol=1e-13, atol=1e-13)  # fmt: skip
    e = np.zeros(shape)
    e[(1,) * len(shape)] = 1.0  # a unit vector at an unknown: A's diagonal there
    got = d.to_numpy()[(1,) * len(shape)]
    assert got == pytest.approx(
        ref.apply(e, kinds, h, a if coefficient else None)[(1,) * len(shape)], rel=1e-13
    )
    coarse = op.coarse(None)
    assert coarse.spacing(len(shape)) == tuple(2 * x for x in h) and coarse.sweeps == op.sweeps
