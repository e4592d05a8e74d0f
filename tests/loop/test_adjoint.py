"""Reverse mode of a step affine in its state: the transposed step through the deep-halo loop.

Each gradient is checked against the transpose of the step's matrix, built here by
applying a NumPy version of the step (written in this file) to the unit vectors. The
gradient program's collectives: test_derivative.py; a vmap of it: test_batching.py.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from stencils import advect_diffuse, downwind, heat, ring, two_below, upwind2d

import pgas
from pgas.loop.adjoint import affine, transposable


def matrix(step_numpy, shape) -> np.ndarray:
    """The dense matrix of a linear NumPy step on arrays of ``shape``."""
    n = math.prod(shape)
    cols = [step_numpy(np.eye(n)[j].reshape(shape)).ravel() for j in range(n)]
    return np.stack(cols, axis=1)


def adjoint(step_numpy, w: np.ndarray, steps: int) -> np.ndarray:
    """``(A^T)^steps w``: the gradient of ``sum(w * run(u))`` for the step's matrix ``A``."""
    a = matrix(step_numpy, w.shape)
    g = w.ravel()
    for _ in range(steps):
        g = a.T @ g
    return g.reshape(w.shape)


def _copy_set(fn):
    def step(u):
        v = u.copy()
        fn(u, v)
        return v

    return step


C = 0.5
NUMPY = {
    "downwind": _copy_set(lambda u, v: v.__setitem__(slice(None, -1),
                                                     u[:-1] - C * (u[:-1] - u[1:]))),
    "downwind_keep": _copy_set(lambda u, v: v.__setitem__(  # Keep: cell 0 is never written
        slice(1, -1), u[1:-1] - C * (u[1:-1] - u[2:]))),
    "two_below": _copy_set(lambda u, v: v.__setitem__(
        slice(2, None), u[2:] - 0.5 * (u[1:-1] - u[:-2]) - 0.25 * (u[2:] - u[1:-1]))),
    "ring": lambda u: u - C * (u - np.roll(u, 1)),
    "upwind2d": _copy_set(lambda u, v: v.__setitem__(
        (slice(1, None), slice(1, None)),
        u[1:, 1:] - 0.25 * (u[1:, 1:] - u[:-1, 1:]) - 0.25 * (u[1:, 1:] - u[1:, :-1]))),
    "advect_diffuse": _copy_set(lambda u, v: v.__setitem__(
        (slice(1, None), slice(1, -1)),
        u[1:, 1:-1] - 0.25 * (u[1:, 1:-1] - u[:-1, 1:-1])
        + 0.125 * (u[1:, :-2] - 2 * u[1:, 1:-1] + u[1:, 2:]))),
}  # fmt: skip
CASES = [  # step, its name in NUMPY, shape, mesh shape, boundary (upwind on 17 cells with
    # Dirichlet(0.0): the paths of downwind there, reading the other side, and of upwind2d)
    (downwind, "downwind", (17,), (3,), pgas.Dirichlet(1.0)),  # blocks 6, 6, 5
    (downwind, "downwind_keep", (17,), (3,), pgas.Keep()),
    (two_below, "two_below", (19,), (2,), pgas.Neumann()),
    (ring, "ring", (17,), (3,), pgas.Periodic()),
    (upwind2d, "upwind2d", (9, 8), (2, 2), pgas.Dirichlet(0.0)),  # blocks 5/4 by 4: k = 4
    (advect_diffuse, "advect_diffuse", (13, 12), (2, 2), pgas.Neumann()),
]


@pytest.mark.parametrize(
    "step,name,shape,parts,bc", CASES, ids=lambda c: getattr(c, "__name__", str(c))
)
def test_a_one_sided_steps_gradient_is_its_transposed_matrix(step, name, shape, parts, bc):
    names = ("y", "x")[-len(shape) :]
    mesh = pgas.make_mesh(names, shape=parts, devices=math.prod(parts))
    rng = np.random.default_rng(7)
    x0, w = rng.random(shape), rng.random(shape)
    weight = pgas.from_numpy(w, mesh, boundary=bc)
    want = adjoint(NUMPY[name], w, 11)
    u = pgas.from_numpy(x0, mesh, boundary=bc)
    assert affine(step, u)
    grads = []
    for k in (1, "auto"):

        def loss(u, k=k):
            return pgas.sum(weight * pgas.run(step, u, 11, steps_per_exchange=k))

        grads.append(jax.jit(jax.grad(loss))(u).to_numpy())
        np.testing.assert_allclose(grads[-1], want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(grads[0], grads[1])  # every k: the same bits


def _variable(u, kappa):
    n = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    u[1:-1, 1:-1] = u[1:-1, 1:-1] + kappa[1:-1, 1:-1] * n
    return u


def test_a_coefficient_fields_transposed_step_reads_it_in_params_and_from_the_enclosing_scope():
    rng = np.random.default_rng(8)
    # blocks 5 by 5/4 (the automatic k: 4)
    x0, k0, w = rng.random((10, 9)), 0.05 + 0.15 * rng.random((10, 9)), rng.random((10, 9))

    def numpy_step(u):
        v = u.copy()
        n = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        v[1:-1, 1:-1] = u[1:-1, 1:-1] + k0[1:-1, 1:-1] * n
        return v

    want = adjoint(numpy_step, w, 9)
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    kappa = pgas.from_numpy(k0, mesh)
    weight = pgas.from_numpy(w, mesh)

    def captured(u):
        return _variable(u, kappa)

    def in_params(u):
        return pgas.sum(weight * pgas.run(_variable, u, 9, params=kappa))

    def closed(u):
        return pgas.sum(weight * pgas.run(captured, u, 9))

    np.testing.assert_allclose(jax.jit(jax.grad(in_params))(u).to_numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.grad(closed))(u).to_numpy(), want, rtol=1e-12)


def test_affine_tells_a_linear_step_from_a_nonlinear_one():
    """Affine steps on fields without Neumann faces are transposed; the rest (also the
    Neumann cases above) are differentiated through JAX's transpose of the single-step
    loop."""
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.ones(16), mesh)

    def scaled(u, c):
        u[1:-1] = c * u[1:-1] + 1.0  # affine: a constant added
        return u

    def clipped(u):
        u[1:-1] = abs(u[1:-1])
        return u

    assert affine(heat, u) and affine(scaled, u, 0.5) and transposable(heat, u)
    assert not transposable(heat, pgas.from_numpy(np.ones(16), mesh, boundary=pgas.Neumann()))
    assert not affine(lambda u: u * u, u)
    assert not affine(clipped, u)
    with_time = {"u": u, "t": jnp.float64(0.0)}  # a scalar in the state
    assert not affine(lambda s: {"u": s["u"], "t": s["t"] + 1.0}, with_time)


def _leapfrog(s):
    """The wave equation, leapfrog: the new u written over the old v, then the two swapped."""
    u, v = s["u"], s["v"]
    v[1:-1] = 2 * u[1:-1] - v[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
    return {"u": v, "v": u}


def test_a_two_field_steps_gradient_is_its_transposed_matrix():
    n, rng = 11, np.random.default_rng(11)  # blocks 4, 4, 3: the automatic k is 3 (odd)
    u0, v0, wu, wv = (rng.random(n) for _ in range(4))

    def numpy_step(uv):
        u, v = uv
        new = v.copy()
        new[1:-1] = 2 * u[1:-1] - v[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
        return np.stack([new, u])

    want = adjoint(numpy_step, np.stack([wu, wv]), 9)
    mesh = pgas.make_mesh(("x",), devices=3)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Keep())

    state, weights = {"u": field(u0), "v": field(v0)}, {"u": field(wu), "v": field(wv)}
    assert transposable(_leapfrog, state)

    def loss(s):
        out = pgas.run(_leapfrog, s, 9)
        return pgas.sum(weights["u"] * out["u"]) + pgas.sum(weights["v"] * out["v"])

    g = jax.jit(jax.grad(loss))(state)
    np.testing.assert_allclose(np.stack([g["u"].to_numpy(), g["v"].to_numpy()]), want, rtol=1e-12)
