"""Reverse mode with respect to params through checkpointed segments (pgas.loop.reverse):
each adjoint step gives the cotangent of the params it reads, summed over the steps, and the
params' frames give their halo cells back once per segment.

Checked against an adjoint written by hand in NumPy for a 1-D Burgers step whose viscosity
is a field and whose advection speed a number (and central differences in float64), and
for a 2-D step of two fields on a 2x2 mesh against JAX's reverse mode of the same arithmetic
written with ``jnp.roll`` on the whole array; the gradient's HLO has halo-sized
collective-permutes and no all-gather.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.loop.derivative import reverse_of
from pgas.loop.programs import program
from pgas.loop.reverse import Checkpointed

COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")


def burgers(u, p):
    nu, c = p["nu"], p["c"]
    u[1:-1] = u[1:-1] - c * u[1:-1] * (u[2:] - u[:-2]) + nu[1:-1] * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u


def burgers_numpy(u, nu, c):
    v = u.copy()
    v[1:-1] = u[1:-1] - c * u[1:-1] * (u[2:] - u[:-2]) + nu[1:-1] * (u[2:] - 2 * u[1:-1] + u[:-2])
    return v


def burgers_adjoint(u, w, nu, c):
    """One step's transposed Jacobian at ``u`` applied to ``w``: the cotangents of the state,
    of ``nu`` and of ``c`` (Keep ends: the state's identity, no dependence on nu or c)."""
    g, gnu = np.zeros_like(w), np.zeros_like(nu)
    g[0], g[-1] = w[0], w[-1]
    inner, n = w[1:-1], nu[1:-1]
    g[1:-1] += (1 - c * (u[2:] - u[:-2]) - 2 * n) * inner
    g[2:] += (-c * u[1:-1] + n) * inner
    g[:-2] += (c * u[1:-1] + n) * inner
    gnu[1:-1] = (u[2:] - 2 * u[1:-1] + u[:-2]) * inner
    gc = -np.sum(u[1:-1] * (u[2:] - u[:-2]) * inner)
    return g, gnu, gc


def numpy_gradient(u0, w, nu, c, steps):
    states = [u0]
    for _ in range(steps - 1):
        states.append(burgers_numpy(states[-1], nu, c))
    g, gnu, gc = w, np.zeros_like(nu), 0.0
    for u in reversed(states):
        g, dnu, dc = burgers_adjoint(u, g, nu, c)
        gnu, gc = gnu + dnu, gc + dc
    return g, gnu, gc


def _cells(shape: str) -> int:
    """Cells in an HLO shape such as ``f64[1,2]{1,0}``."""
    return math.prod(int(d) for d in re.findall(r"\d+", shape.split("[")[1].split("]")[0]))


def test_burgers_gradient_wrt_a_viscosity_field_and_a_speed_is_the_hand_written_adjoint():
    # 3 devices, blocks 13, 12, 12: the params' cotangents cross blocks (one device: nothing
    # crosses, the state-only tests cover its frames)
    n, steps, c, devices = 37, 23, 0.2, 3
    rng = np.random.default_rng(devices)
    x0, w, nu0 = 0.5 + 0.3 * rng.random(n), rng.random(n), 0.05 + 0.1 * rng.random(n)
    mesh = pgas.make_mesh(("x",), devices=devices)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Keep())

    weight, u, nu = field(w), field(x0), field(nu0)
    want = numpy_gradient(x0, w, nu0, c, steps)
    for k in (1, "auto"):

        def loss(u, p, k=k):
            return pgas.sum(weight * pgas.run(burgers, u, steps, params=p, steps_per_exchange=k))

        plan = pgas.plan.plan(burgers, u, k, params={"nu": nu, "c": c})
        loop = program(burgers, plan.steps_per_exchange, plan.widths, None, None,
                       takes_params=True).inline  # fmt: skip
        rev = reverse_of(burgers, steps, plan, (), loop, u, {"nu": nu, "c": c}, True)
        assert isinstance(rev, Checkpointed) and rev.with_params
        grad = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(u, {"nu": nu, "c": c}).compile()
        gu, gp = grad(u, {"nu": nu, "c": c})
        np.testing.assert_allclose(gu.to_numpy(), want[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gp["nu"].to_numpy(), want[1], rtol=1e-12, atol=1e-14)
        assert float(gp["c"]) == pytest.approx(want[2], rel=1e-12)
        kinds = {(kind, shape) for shape, kind in COLLECTIVE.findall(grad.as_text())}
        assert not any(kind in ("all-gather", "all-to-all") for kind, _ in kinds), kinds
        sizes = [_cells(shape) for kind, shape in kinds if kind == "collective-permute"]
        # halo-sized: nu's frames, k + 1 cells forward and 3 reaches back
        assert sizes and max(sizes) <= max(3, plan.steps_per_exchange + 1), sizes
    # the speed's derivative against central differences, in float64, through the forward
    forward = jax.jit(lambda c: pgas.sum(weight * pgas.run(burgers, u, steps,
                                                           params={"nu": nu, "c": c})))  # fmt: skip
    eps = 1e-6
    central = (float(forward(c + eps)) - float(forward(c - eps))) / (2 * eps)
    assert float(gp["c"]) == pytest.approx(central, rel=1e-7)


def _reaction(s, p):
    """Two fields, periodic: diffusion, advection along x at the speed field ``a`` and a
    cubic reaction fed at the rate ``f`` (a number)."""
    u, v = s["u"], s["v"]
    a, f = p["a"], p["f"]

    def lap(x):
        return sum(pgas.shift(x, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * x

    uvv = u * v * v
    adv = a * (pgas.shift(u, 1, 1) - pgas.shift(u, -1, 1))
    return {"u": (u + 0.1 * lap(u) - 0.2 * adv - uvv + f * (1.0 - u)).to_array(),
            "v": (v + 0.05 * lap(v) + uvv - 0.1 * v).to_array()}  # fmt: skip


def _reaction_jnp(s, p):
    (u, v), (a, f) = s, p

    def lap(x):
        return sum(jnp.roll(x, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * x

    uvv = u * v * v
    adv = a * (jnp.roll(u, 1, 1) - jnp.roll(u, -1, 1))  # shift(u, 1, 1)[i, j] = u[i, j - 1]
    return (u + 0.1 * lap(u) - 0.2 * adv - uvv + f * (1.0 - u), v + 0.05 * lap(v) + uvv - 0.1 * v)


def test_two_fields_on_a_2x2_mesh_wrt_a_speed_field_and_a_rate_against_jax():
    shape, steps = (13, 11), 9  # uneven blocks: 7/6 by 6/5
    rng = np.random.default_rng(3)
    u0, v0, wu, wv, a0 = (rng.random(shape) for _ in range(5))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Periodic())

    weights = {"u": field(wu), "v": field(wv)}

    def loss(p, s):
        out = pgas.run(_reaction, s, steps, params=p)
        return pgas.sum(weights["u"] * out["u"]) + pgas.sum(weights["v"] * out["v"])

    def loss_jnp(p, s):
        s = jax.lax.fori_loop(0, steps, lambda _, s: _reaction_jnp(s, p), s)
        return jnp.sum(wu * s[0]) + jnp.sum(wv * s[1])

    p, s = {"a": field(a0), "f": 0.04}, {"u": field(u0), "v": field(v0)}
    grad = jax.jit(jax.grad(loss)).lower(p, s).compile()  # the params only: no state cotangent
    g = grad(p, s)
    want = jax.jit(jax.grad(loss_jnp))((jnp.asarray(a0), 0.04), (jnp.asarray(u0), jnp.asarray(v0)))
    np.testing.assert_allclose(g["a"].to_numpy(), want[0], rtol=1e-11, atol=1e-13)
    assert float(g["f"]) == pytest.approx(float(want[1]), rel=1e-11)
    kinds = {kind for _, kind in COLLECTIVE.findall(grad.as_text())}
    assert "collective-permute" in kinds and not kinds & {"all-gather", "all-to-all"}, kinds


def test_a_gradient_with_respect_to_some_leaves_only():
    """Leaves without a tangent (a Python number, a field not differentiated) are no linear
    arguments of the way back: each gradient is its leaves' part of the hand-written adjoint
    (a dense zero among them failed JAX's linear_call transpose)."""
    n, steps, c = 19, 7, 0.2
    rng = np.random.default_rng(5)
    x0, w, nu0 = 0.5 + 0.3 * rng.random(n), rng.random(n), 0.05 + 0.1 * rng.random(n)
    mesh = pgas.make_mesh(("x",), devices=2)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Keep())

    weight, u, nu = field(w), field(x0), field(nu0)
    want_u, want_nu, want_c = numpy_gradient(x0, w, nu0, c, steps)

    def loss(u, nu, c):
        return pgas.sum(weight * pgas.run(burgers, u, steps, params={"nu": nu, "c": c}))

    g_nu = jax.jit(jax.grad(lambda nu: loss(u, nu, c)))(nu)  # the speed a Python number
    np.testing.assert_allclose(g_nu.to_numpy(), want_nu, rtol=1e-12, atol=1e-14)
    g_u, g_c = jax.jit(jax.grad(loss, argnums=(0, 2)))(u, nu, c)  # nu not differentiated
    np.testing.assert_allclose(g_u.to_numpy(), want_u, rtol=1e-12, atol=1e-14)
    assert float(g_c) == pytest.approx(want_c, rel=1e-12)


def test_params_that_the_checkpointed_way_back_does_not_take():
    """An integer leaf (no cotangent) or a field with a Neumann face: JAX's derivative of the
    loop instead (``None``), and the state-only way back is unchanged."""
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.linspace(0.4, 0.6, 8), mesh, boundary=pgas.Keep())
    nu = pgas.from_numpy(np.full(8, 0.1), mesh, boundary=pgas.Keep())
    plan = pgas.plan.plan(burgers, u, 1, params={"nu": nu, "c": 0.2})
    loop = program(burgers, 1, plan.widths, None, None, takes_params=True).inline

    def how(p, with_params=True):
        return reverse_of(burgers, 4, plan, (), loop, u, p, with_params)

    assert how({"nu": nu, "c": 0.2}).with_params
    assert not how({"nu": nu, "c": 0.2}, False).with_params
    assert how({"nu": nu, "c": 1}) is None
    neumann = pgas.from_numpy(np.full(8, 0.1), mesh, boundary=pgas.Neumann())
    assert how({"nu": neumann, "c": 0.2}) is None
