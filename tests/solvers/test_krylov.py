"""Conjugate gradients for a user's operator: the dense solution, the same bits on every
mesh (reproducible sums), a multigrid preconditioner, limits and errors."""

import warnings

import jax
import numpy as np
import poisson_numpy as ref
import pytest

import pgas
from pgas.errors import PgasError


def five_point(p):
    """The user's operator, written as in examples/poisson (h**2 A: 4 u - neighbours)."""
    out = p.copy()
    out[1:-1, 1:-1] = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2]
                                           + p[1:-1, 2:])  # fmt: skip
    return out


# The user's problem: 17 x 17 points, boundary values on the Keep faces. On 3 devices (17
# rows split unevenly) the tests below solve it and check their operators there too: an eager
# solve compiles once per operator, layout and iteration limit, a symmetry check once per
# operator and layout.
N = 17
B = np.random.default_rng(0).standard_normal((N, N))
X0 = np.zeros((N, N))
X0[0, :], X0[:, -1] = 1.0, -0.5


def on(devices: int, *arrays):
    mesh = pgas.make_mesh(("y", "x"), devices=devices)
    return [pgas.from_numpy(a, mesh, boundary=pgas.Keep()) for a in arrays]


def test_cg_of_a_user_operator_is_the_dense_solution_with_the_same_bits_on_every_mesh():
    want = ref.solve(B, ("keep", "keep"), 1.0, None, X0)
    seen = []
    # an uneven split (17 rows on 3 devices), then a 2 x 2 mesh; the first also checks that
    # the operator is symmetric before iterating (check=True, the default)
    for devices, check in ((3, True), (4, False)):
        b, x0 = on(devices, B, X0)
        sol = pgas.solvers.cg(five_point, b, x0, tol=1e-10, check=check)
        assert bool(sol.converged) and float(sol.residual) <= 1e-10
        seen.append((sol.x.to_numpy(), int(sol.iterations)))
    np.testing.assert_allclose(seen[0][0], want, atol=1e-9 * abs(want).max())
    for x, iterations in seen[1:]:
        assert np.array_equal(x, seen[0][0]) and iterations == seen[0][1]
    assert np.array_equal(seen[0][0][0], X0[0])  # the boundary values, kept


def test_multigrid_preconditioned_cg_needs_few_iterations_and_solves_it():
    n = 17  # plain CG: about 50 iterations here (105 at n = 33)
    mesh = pgas.make_mesh(devices=1)  # on 3 devices: examples/poisson's variable case
    b = np.random.default_rng(1).standard_normal((n, n))
    op = pgas.solvers.Poisson(h=1.0 / (n - 1))
    field = pgas.from_numpy(b, mesh, boundary=pgas.Keep())
    pcg = pgas.solvers.cg(op, field, M=op.vcycle, tol=1e-9)
    plain = pgas.solvers.cg(op, field, tol=1e-9)
    want = ref.solve(b, ("keep", "keep"), 1.0 / (n - 1))
    for sol in (pcg, plain):
        np.testing.assert_allclose(sol.x.to_numpy(), want, atol=1e-7 * abs(want).max())
    assert int(pcg.iterations) <= 10 < 40 <= int(plain.iterations)


def test_reaching_the_limit_warns_and_says_not_converged():
    b, x0 = on(3, B, X0)  # the default limit: the first test's program
    with pytest.warns(pgas.NonConvergenceWarning, match=r"cg reached its limit of 2 iter"):
        sol = pgas.solvers.cg(five_point, b, x0, max_iters=2)
    assert not bool(sol.converged) and int(sol.iterations) == 2 and float(sol.residual) > 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bool(pgas.solvers.cg(five_point, b, x0).converged)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_iters": 0}, r"max_iters = 0: give a whole number >= 1"),
    ({"tol": 0.0}, r"tol = 0.0: give the relative residual"),
    ({"x0": np.zeros((5, 5))}, r"x0 must be a pgas.GlobalArray of b's layout"),
])  # fmt: skip
def test_bad_inputs_say_what_to_do(kwargs, match):
    b = pgas.zeros((5, 5), pgas.make_mesh(devices=1), dtype=np.float64, boundary=pgas.Keep())
    with pytest.raises(PgasError, match=match):
        pgas.solvers.cg(five_point, b, **kwargs)


def test_an_operator_returning_another_shape_is_named():
    b = pgas.zeros((5, 5), pgas.make_mesh(devices=1), dtype=np.float64, boundary=pgas.Keep())
    with pytest.raises(PgasError, match=r"the operator returned GlobalArray of shape \(3, 3\)"):
        pgas.solvers.cg(lambda p: p[::2, ::2], b)


def test_an_operator_that_is_not_symmetric_is_refused_before_iterating():
    (b,) = on(3, np.zeros((N, N)))  # the first test's layout: five_point passed there

    def upwind(p):
        out = p.copy()
        out[1:-1, 1:-1] = 2 * p[1:-1, 1:-1] - p[:-2, 1:-1]
        return out

    with pytest.raises(PgasError, match=r"A is not symmetric: <A u, v> = .* check=False"):
        pgas.solvers.cg(upwind, b)
    with pytest.raises(PgasError, match=r"M is not symmetric"):
        pgas.solvers.cg(five_point, b, M=upwind)


def test_a_solve_traces_its_preconditioner_once():
    """The solve is traced once for the forward and the transpose solve of its implicit
    derivative (one jaxpr, replayed), and the preconditioner once in it: at the start of each
    iteration, not again before the loop (the program holds one V-cycle)."""
    b = pgas.from_numpy(np.random.default_rng(4).random((9, 9)), pgas.make_mesh(devices=1),
                        boundary=pgas.Keep())  # fmt: skip
    op = pgas.solvers.Poisson()
    calls = []

    def M(r):
        calls.append(r)
        return op.vcycle(r)

    jax.jit(lambda b: pgas.solvers.cg(op, b, M=M, check=False).x).trace(b)
    assert len(calls) == 1
