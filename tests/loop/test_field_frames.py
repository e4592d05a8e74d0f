"""Frames per field: a field a step reads at no offset is not extended, nor exchanged.

Conjugate gradients (x, r, p and a scalar; only p is read at an offset) and
smaller toys on 4 devices at k = 1: the plan records each field's reach per
side (through assignments that read each other's results, and reductions), the
compiled loop exchanges one field's halo per iteration (collective-permutes
counted in its HLO, their bytes written out here), and the results equal NumPy
written here (bitwise where the arithmetic is the same; CG's sums run in
another order on 4 blocks, so to rounding).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cg_steps_numpy
from stencils import cg

import pgas

ZERO_2D = ((0, 0), (0, 0))


def _permutes(report):
    return [c for c in report.per_step if c.kind == "collective-permute"]


# ---- conjugate gradients ------------------------------------------------------------------
def test_cg_extends_and_exchanges_p_only():
    n = 18  # blocks of 9 x 9 on a 2 x 2 mesh
    mesh = pgas.make_mesh(("y", "x"), devices=4)
    b = np.random.default_rng(0).random((n, n))
    b[0, :] = b[-1, :] = b[:, 0] = b[:, -1] = 0.0

    def field(a):
        return pgas.from_numpy(a, mesh, boundary=pgas.Keep())

    def state():
        return {"x": field(np.zeros_like(b)), "r": field(b.copy()), "p": field(b.copy()),
                "rr": jnp.asarray((b * b).sum())}  # fmt: skip

    plan = pgas.plan.plan(cg, state())
    assert plan.steps_per_exchange == 1
    assert plan.fields == (((1, 1), (1, 1)), ZERO_2D, ZERO_2D)  # p, r, x (the dict's order)
    report = pgas.comm_report(cg, state(), loop=True)
    permutes = _permutes(report)
    # p's halo alone: a row of 9 cells each way along y, then a column of 9 + 2 along x
    assert len(permutes) == 4, [c.shape for c in permutes]
    assert sorted(c.bytes for c in permutes) == [9 * 8, 9 * 8, 11 * 8, 11 * 8]
    assert report.bytes("collective-permute") == report.ideal_bytes == 2 * (9 + 11) * 8
    out = pgas.run(cg, state(), 12)
    np.testing.assert_allclose(
        out["x"].to_numpy(), cg_steps_numpy(b, 12)[0], rtol=1e-12, atol=1e-14
    )


# ---- two fields, one read at an offset ----------------------------------------------------
def heat_and_sum(s):
    u, v = s
    v[:] = v + u  # u read pointwise: v needs no frame, u only its own
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u, v


def heat_and_sum_numpy(u, v, steps):
    u, v = u.copy(), v.copy()
    for _ in range(steps):
        v = v + u
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u, v


def through(s):
    a, c, out = s
    c[:] = 0.5 * a  # c's new value is read at an offset: c and a need its frame
    out[1:-1] = c[:-2] + c[2:]
    return a, c, out


def through_numpy(a, c, out, steps):
    a, out = a.copy(), out.copy()
    for _ in range(steps):
        c = 0.5 * a
        out[1:-1] = c[:-2] + c[2:]
    return a, c, out


def reduced(s):
    u, total = s
    total = total + pgas.sum(u[1:] - u[:-1])  # only a reduction reads u at an offset
    u[:] = 0.5 * u
    return u, total


@pytest.mark.parametrize("k", [1, "auto"])
def test_two_fields_exchange_one(k):
    mesh = pgas.make_mesh(("x",), devices=4)
    rng = np.random.default_rng(1)
    u0, v0 = rng.random(64), rng.random(64)

    def state():
        return pgas.from_numpy(u0, mesh), pgas.from_numpy(v0, mesh)

    plan = pgas.plan.plan(heat_and_sum, state(), k)
    assert plan.fields == (((1, 1),), ((0, 0),))
    report = pgas.comm_report(heat_and_sum, state(), loop=True, steps_per_exchange=k)
    kk = report.steps_per_exchange
    if kk == 1:  # one slab of u each way; v is not exchanged
        assert sorted(c.bytes for c in _permutes(report)) == [8, 8]
        assert report.bytes("collective-permute") == report.ideal_bytes == 16
    want = heat_and_sum_numpy(u0, v0, 13)
    runs = {
        "run": pgas.run(heat_and_sum, state(), 13, steps_per_exchange=k),
        # single-buffered groups of 4 (a callback) and a remainder step in per-field frames
        "callback": pgas.run(
            heat_and_sum, state(), 13, steps_per_exchange=4, callback=lambda done, s: None
        ),
        "jit": jax.jit(lambda s: pgas.run(heat_and_sum, s, 13, steps_per_exchange=k))(state()),
    }
    for how, out in runs.items():
        for got, w in zip(out, want):
            np.testing.assert_array_equal(got.to_numpy(), w, err_msg=how)


def test_frames_follow_assignments_and_reductions():
    mesh = pgas.make_mesh(("x",), devices=4)
    rng = np.random.default_rng(2)
    a0, c0, o0 = rng.random(32), rng.random(32), rng.random(32)

    def state():
        return tuple(pgas.from_numpy(x, mesh, boundary=pgas.Keep()) for x in (a0, c0, o0))

    plan = pgas.plan.plan(through, state(), 1)
    assert plan.fields == (((1, 1),), ((1, 1),), ((0, 0),))  # out is read by no one
    report = pgas.comm_report(through, state(), loop=True, steps_per_exchange=1)
    assert len(_permutes(report)) == 4  # a and c, each way
    out = pgas.run(through, state(), 3, steps_per_exchange=1)
    for got, want in zip(out, through_numpy(a0, c0, o0, 3)):
        np.testing.assert_array_equal(got.to_numpy(), want)

    u0 = rng.random(32)
    s = (pgas.from_numpy(u0, mesh), jnp.asarray(0.0))
    plan = pgas.plan.plan(reduced, s)
    assert plan.steps_per_exchange == 1 and plan.fields == (((1, 0),),)  # the sum's read
    u, total = pgas.run(reduced, s, 3)
    want = sum(0.5**i * (u0[-1] - u0[0]) for i in range(3))
    np.testing.assert_array_equal(u.to_numpy(), u0 * 0.125)
    np.testing.assert_allclose(float(total), want, rtol=1e-12)


def test_read_only_field_read_pointwise_is_not_extended():
    mesh = pgas.make_mesh(("x",), devices=4)
    rng = np.random.default_rng(3)
    u0, b0 = rng.random(64), rng.random(64)

    def jacobi(u, b):
        u[1:-1] = 0.5 * (u[:-2] + u[2:]) + 0.25 * b[1:-1]
        return u

    u, b = pgas.from_numpy(u0, mesh), pgas.from_numpy(b0, mesh)
    plan = pgas.plan.plan(jacobi, u, 1, params=b)
    assert plan.fields is None and plan.inputs == (((0, 0),),)
    out = pgas.run(jacobi, u, 5, params=b, steps_per_exchange=1)
    want = u0.copy()
    for _ in range(5):
        want[1:-1] = 0.5 * (want[:-2] + want[2:]) + 0.25 * b0[1:-1]
    np.testing.assert_array_equal(out.to_numpy(), want)
