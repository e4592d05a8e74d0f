"""A V-cycle is a symmetric linear map (a CG preconditioner), with the residual history of a
NumPy multigrid written from the same definitions (tests/poisson_numpy.py)."""

import jax
import numpy as np
import poisson_numpy as ref
import pytest

import pgas


def test_a_vcycle_is_symmetric_linear_and_contracts():
    from pgas.solvers import cycle

    n = 9
    mesh = pgas.make_mesh(("y", "x"), devices=4)
    rng = np.random.default_rng(0)
    r1, r2 = rng.standard_normal((2, n, n))
    r1[[0, -1]] = r1[:, [0, -1]] = r2[[0, -1]] = r2[:, [0, -1]] = 0.0
    op = pgas.solvers.Poisson(h=1.0 / (n - 1))
    f = lambda v: pgas.from_numpy(v, mesh, boundary=pgas.Keep())  # noqa: E731
    m = jax.jit(lambda r: cycle.vcycle(cycle.operators(op, r.layout), r))
    m1, m2, m12 = (m(f(v)).to_numpy() for v in (r1, r2, r1 + 2 * r2))
    assert abs((m1 * r2).sum() - (r1 * m2).sum()) <= 1e-12 * abs((m1 * r2).sum())
    np.testing.assert_allclose(m12, m1 + 2 * m2, atol=1e-12 * abs(m12).max())
    exact = ref.solve(r1, ("keep", "keep"), 1.0 / (n - 1))
    assert np.linalg.norm(exact - m1) <= 0.3 * np.linalg.norm(exact)  # one cycle from zero
    levels = cycle.operators(op, f(r1).layout)  # 9 and 5 points split, 5 and 3 on all
    assert levels.shapes == ((9, 9), (5, 5), (3, 3)) and levels.below is not None


FACES = {"keep": pgas.Keep(), "periodic": pgas.Periodic(), "neumann": pgas.Neumann()}


# every grid kind, odd and even sizes, 2x3 (uneven: 9 and 17 points) and 3x2 meshes, 2-D and
# 3-D, each with split levels above replicated ones; a coefficient on Keep (its edge cells
# picked), periodic and Neumann axes, none in 3-D
@pytest.mark.parametrize("kinds, shape, mesh, coefficient", [
    (("keep", "keep"), (9, 17), (2, 3), True),
    (("periodic", "neumann"), (12, 8), (3, 2), True),
    (("keep", "periodic", "neumann"), (9, 8, 12), (1, 2, 2), False),
])  # fmt: skip
def test_v_cycles_have_numpy_s_residual_history(kinds, shape, mesh, coefficient):
    from pgas.solvers import cycle, fields

    rng = np.random.default_rng(5)
    b = rng.standard_normal(shape)
    if "keep" not in kinds:
        b -= b.mean()
    a = 1 + rng.random(shape) if coefficient else None
    names = ("z", "y", "x")[-len(shape) :]
    devices = jax.devices()[: int(np.prod(mesh))]
    m = jax.sharding.Mesh(np.array(devices).reshape(mesh), names)
    f = lambda v: pgas.from_numpy(v, m, boundary=tuple(FACES[k] for k in kinds))  # noqa: E731
    h = tuple(1.0 / n for n in shape)
    op = pgas.solvers.Poisson(h=h, coefficient=None if a is None else f(a))
    rhs = fields.masked(f(b), f(b))

    @jax.jit
    def one(e, r, op):
        e = fields.updated(e, 1.0, cycle.vcycle(cycle.operators(op, r.layout), r))
        r = cycle.residual(op, e, rhs)
        return e, r, fields.dot(r, r)

    # the levels are the layout's: built without the coefficient (no eager restrictions)
    hierarchy = cycle.operators(pgas.solvers.Poisson(h=h), rhs.layout)
    assert len(hierarchy.ops) >= 2 and hierarchy.below is not None  # split, then replicated
    levels = hierarchy.depth
    want = ref.residual_history(b, kinds, h, a, levels, 4)
    e, r, got = fields.zeros(rhs.layout, rhs.dtype), rhs, []
    norm = float(np.sqrt(fields.dot(rhs, rhs)))
    for _ in range(4):
        e, r, rr = one(e, r, op)
        got.append(float(np.sqrt(rr)) / norm)
    np.testing.assert_allclose(got, want, rtol=1e-8)
    assert want[-1] < 0.35**4  # the cycles contract
