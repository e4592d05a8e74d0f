"""A V-cycle is a symmetric linear map (a CG preconditioner), with the residual history of a
NumPy multigrid written from the same definitions (tests/poisson_numpy.py)."""

import jax
import numpy as np
import poisson_numpy as ref
import pytest

import pgas


def test_the_levels_stay_split_while_each_device_has_two_cells():
    from pgas.solvers import cycle

    mesh = pgas.make_mesh(("y", "x"), devices=4)
    op = pgas.solvers.Poisson(h=1.0 / 8)
    levels = cycle.operators(op, pgas.zeros((9, 9), mesh, boundary=pgas.Keep()).layout)
    assert levels.shapes == ((9, 9), (5, 5), (3, 3)) and levels.below is not None  # 9 and 5
    # points split on 2 x 2 devices, 5 and 3 on all


FACES = {"keep": pgas.Keep(), "periodic": pgas.Periodic(), "neumann": pgas.Neumann()}


# every grid kind, odd and even sizes, 2x3 (uneven: 9 and 17 points) and 3x2 meshes, 2-D and
# 3-D, each with split levels above replicated ones; a coefficient on Keep (its edge cells
# picked), periodic and Neumann axes, none in 3-D. The compiled cycle of each case is also the
# symmetric linear map a CG preconditioner must be (from e = 0 it returns M r).
@pytest.mark.parametrize("kinds, shape, mesh, coefficient", [
    (("keep", "keep"), (9, 17), (2, 3), True),
    (("periodic", "neumann"), (12, 8), (3, 2), True),
    (("keep", "periodic", "neumann"), (9, 8, 12), (1, 2, 2), False),
])  # fmt: skip
def test_v_cycles_have_numpy_s_residual_history_and_are_symmetric_and_linear(
    kinds, shape, mesh, coefficient
):
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
    # the right-hand side on the unknowns, zero on the Keep faces' cells, and the fields of
    # zeros made in NumPy: eager pgas operations would each compile a program of this layout
    b_in = np.where(ref.edges(shape, kinds), 0.0, b)
    rhs = f(b_in)

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
    e, r, got = f(np.zeros(shape)), rhs, []
    norm = np.linalg.norm(b_in)
    for _ in range(4):
        e, r, rr = one(e, r, op)
        got.append(float(np.sqrt(rr)) / norm)
    np.testing.assert_allclose(got, want, rtol=1e-8)
    assert want[-1] < 0.35**4  # the cycles contract

    # M r from e = 0 (the same compiled program): symmetric, linear, and one cycle from zero
    # is close to the exact solution
    r1, r2 = rng.standard_normal((2, *shape))
    for r in (r1, r2):
        r[ref.edges(shape, kinds)] = 0.0
        if "keep" not in kinds:
            r -= r.mean()
    zero = f(np.zeros(shape))
    m1, m2, m12 = (one(zero, f(v), op)[0].to_numpy() for v in (r1, r2, r1 + 2 * r2))
    assert abs((m1 * r2).sum() - (r1 * m2).sum()) <= 1e-12 * abs((m1 * r2).sum())
    np.testing.assert_allclose(m12, m1 + 2 * m2, atol=1e-12 * abs(m12).max())
    exact = ref.solve(r1, kinds, h, a)
    assert np.linalg.norm(exact - m1) <= 0.3 * np.linalg.norm(exact)
