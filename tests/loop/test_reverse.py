"""Reverse mode of a step that is not affine: checkpointed segments run back one adjoint step
at a time (pgas.loop.reverse).

Each gradient is checked against an adjoint written here: by hand in NumPy for a 1-D
Burgers step (the transposed Jacobian at every stored state), and for 2-D and 3-D steps
against JAX's reverse mode of the same arithmetic written with ``jnp.roll`` on the whole
array; one against central differences in float64.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.loop.adjoint import qualifies
from pgas.loop.derivative import reverse_of
from pgas.loop.programs import program
from pgas.loop.reverse import Checkpointed, Schedule, fits, schedule

A, D = 0.2, 0.1
COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")


def burgers(u):
    u[1:-1] = u[1:-1] - A * u[1:-1] * (u[2:] - u[:-2]) + D * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u


def burgers_numpy(u):
    v = u.copy()
    v[1:-1] = u[1:-1] - A * u[1:-1] * (u[2:] - u[:-2]) + D * (u[2:] - 2 * u[1:-1] + u[:-2])
    return v


def burgers_adjoint(u, w):
    """The transposed Jacobian of one step at ``u`` applied to ``w`` (Keep ends: identity)."""
    g = np.zeros_like(w)
    g[0], g[-1] = w[0], w[-1]
    inner = w[1:-1]
    g[1:-1] += (1 - A * (u[2:] - u[:-2]) - 2 * D) * inner
    g[2:] += (-A * u[1:-1] + D) * inner
    g[:-2] += (A * u[1:-1] + D) * inner
    return g


def numpy_gradient(u0, w, steps):
    states = [u0]
    for _ in range(steps - 1):
        states.append(burgers_numpy(states[-1]))
    g = w
    for u in reversed(states):
        g = burgers_adjoint(u, g)
    return g


@pytest.mark.parametrize("devices", [1, 3])
def test_burgers_gradient_is_the_hand_written_adjoint(devices):
    n, steps = 13, 23  # 3 devices: blocks 5, 4, 4 (the automatic k: 4)
    rng = np.random.default_rng(devices)
    x0, w = 0.5 + 0.3 * rng.random(n), rng.random(n)
    mesh = pgas.make_mesh(("x",), devices=devices)
    weight = pgas.from_numpy(w, mesh, boundary=pgas.Keep())
    want = numpy_gradient(x0, w, steps)
    for k in (1, "auto") if devices > 1 else (1,):  # 1 device: the unsplit path, at k = 1

        def loss(u, k=k):
            return pgas.sum(weight * pgas.run(burgers, u, steps, steps_per_exchange=k))

        u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
        plan = pgas.plan.plan(burgers, u, k)
        loop = program(burgers, plan.steps_per_exchange, plan.widths, None, None).inline
        assert isinstance(reverse_of(burgers, steps, plan, (), loop, u, None), Checkpointed)
        grad = jax.jit(jax.grad(loss)).lower(u).compile()
        np.testing.assert_allclose(grad(u).to_numpy(), want, rtol=1e-12, atol=1e-14)
        kinds = {(kind, shape) for shape, kind in COLLECTIVE.findall(grad.as_text())}
        assert not any(kind in ("all-gather", "all-to-all") for kind, _ in kinds), kinds
        sizes = [_cells(shape) for kind, shape in kinds if kind == "collective-permute"]
        if devices > 1:  # halo-sized slabs only: the forward's k cells, the adjoint's 1 or 2
            assert sizes and max(sizes) <= max(2, plan.steps_per_exchange), sizes
            assert {1, 2} <= set(sizes), sizes


def _cells(shape: str) -> int:
    """Cells in an HLO shape such as ``f64[1,2]{1,0}``."""
    return math.prod(int(d) for d in re.findall(r"\d+", shape.split("[")[1].split("]")[0]))


def test_value_and_grad_agree_with_central_differences():
    n, steps, eps = 9, 17, 1e-6  # blocks 5 and 4 (the automatic k: 4)
    rng = np.random.default_rng(5)
    x0, v = 0.5 + 0.3 * rng.random(n), rng.standard_normal(n)
    mesh = pgas.make_mesh(("x",), devices=2)

    # under jax.jit: one program each (eagerly, every operation compiles; an eager gradient:
    # tests/loop/test_derivative.py)
    run_loss = jax.jit(lambda u: pgas.sum(pgas.run(burgers, u, steps) ** 2))

    def loss(x):
        return run_loss(pgas.from_numpy(x, mesh, boundary=pgas.Keep()))

    value, grad = jax.jit(jax.value_and_grad(run_loss))(
        pgas.from_numpy(x0, mesh, boundary=pgas.Keep()))  # fmt: skip
    assert float(value) == float(loss(x0))  # the checkpointed forward: the same bits
    central = (float(loss(x0 + eps * v)) - float(loss(x0 - eps * v))) / (2 * eps)
    assert float(np.dot(grad.to_numpy(), v)) == pytest.approx(central, rel=1e-7)


def _gray_scott(s, params):
    """Two fields, periodic, 5-point diffusion and a cubic reaction (params: feed, kill)."""
    u, v = s["u"], s["v"]
    f, k = params

    def lap(a):
        return sum(pgas.shift(a, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * a

    uvv = u * v * v
    return {"u": (u + 0.1 * lap(u) - uvv + f * (1.0 - u)).to_array(),
            "v": (v + 0.05 * lap(v) + uvv - (f + k) * v).to_array()}  # fmt: skip


def _gray_scott_jnp(s, params):
    u, v = s
    f, k = params

    def lap(a):
        return sum(jnp.roll(a, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * a

    uvv = u * v * v
    return (u + 0.1 * lap(u) - uvv + f * (1.0 - u), v + 0.05 * lap(v) + uvv - (f + k) * v)


def test_two_fields_on_a_2x2_mesh_with_params_against_jax_on_the_whole_array():
    shape, steps, params = (13, 11), 9, (0.04, 0.06)  # uneven blocks: 7/6 by 6/5
    rng = np.random.default_rng(3)
    u0, v0, wu, wv = (rng.random(shape) for _ in range(4))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Periodic())

    weights = {"u": field(wu), "v": field(wv)}

    def loss(s):
        out = pgas.run(_gray_scott, s, steps, params=params)
        return pgas.sum(weights["u"] * out["u"]) + pgas.sum(weights["v"] * out["v"])

    def loss_jnp(s):
        s = jax.lax.fori_loop(0, steps, lambda _, s: _gray_scott_jnp(s, params), s)
        return jnp.sum(wu * s[0]) + jnp.sum(wv * s[1])

    g = jax.jit(jax.grad(loss))({"u": field(u0), "v": field(v0)})
    want = jax.jit(jax.grad(loss_jnp))((jnp.asarray(u0), jnp.asarray(v0)))  # one program
    np.testing.assert_allclose(g["u"].to_numpy(), want[0], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(g["v"].to_numpy(), want[1], rtol=1e-11, atol=1e-13)


def test_a_3d_step_reading_a_captured_coefficient_field():
    shape, steps = (7, 6, 5), 5
    rng = np.random.default_rng(4)
    x0, c0, w = rng.random(shape), 0.05 + 0.05 * rng.random(shape), rng.random(shape)
    mesh = pgas.make_mesh(("z", "y", "x"), shape=(2, 1, 1), devices=2)
    c = pgas.from_numpy(c0, mesh, boundary=pgas.Dirichlet(0.0))

    def step(u):  # nonlinear diffusion, coefficient captured from the enclosing scope
        lap = sum(pgas.shift(u, o, ax) for ax in range(3) for o in (1, -1)) - 6.0 * u
        u[...] = u + c * (1.0 + u * u) * lap
        return u

    def step_jnp(u):
        p = jnp.pad(u, 1)  # Dirichlet(0) ghosts
        lap = sum(jnp.roll(p, o, ax)[1:-1, 1:-1, 1:-1] for ax in range(3) for o in (1, -1))
        return u + c0 * (1.0 + u * u) * (lap - 6.0 * u)

    def loss_jnp(u):
        return jnp.sum(w * jax.lax.fori_loop(0, steps, lambda _, u: step_jnp(u), u))

    weight = pgas.from_numpy(w, mesh)
    g = jax.jit(jax.grad(lambda u: pgas.sum(weight * pgas.run(step, u, steps))))(
        pgas.from_numpy(x0, mesh, boundary=pgas.Dirichlet(0.0)))  # fmt: skip
    want = jax.jit(jax.grad(loss_jnp))(jnp.asarray(x0))  # one program, not one per operation
    np.testing.assert_allclose(g.to_numpy(), want, rtol=1e-11, atol=1e-13)


def test_gradient_memory_stays_within_the_checkpointing_bound():
    n, steps = 2**12, 100  # 2 devices: blocks of 2**11 float64 cells
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.linspace(0.4, 0.6, n), mesh, boundary=pgas.Keep())
    # k = 2: the bound holds for any k (auto's 16 compiles a longer body)
    loss = lambda u: pgas.sum(pgas.run(burgers, u, steps, steps_per_exchange=2) ** 2)  # noqa: E731
    m = jax.jit(jax.grad(loss)).lower(u).compile().memory_analysis()
    peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            - m.alias_size_in_bytes)  # fmt: skip
    assert peak / (n // 2 * 8) <= 2.5 * math.sqrt(steps) + 10


def test_schedule_fits_and_qualifies():
    assert schedule(1000, 16) == Schedule(1000, 16, 32)
    for steps, k in ((1, 1), (7, 3), (100, 4), (10000, 16)):
        s = schedule(steps, k)
        assert s.segment % k == 0 and s.stored <= 2.5 * math.sqrt(steps) + k + 2
    assert fits(((1, 1),), (2,), False) and not fits(((1, 1),), (2,), True)
    mesh = pgas.make_mesh(devices=1)
    assert qualifies(pgas.from_numpy(np.zeros(4), mesh))
    assert not qualifies(pgas.from_numpy(np.zeros(4), mesh, boundary=pgas.Neumann()))
    assert not qualifies(pgas.from_numpy(np.zeros(4, np.int32), mesh))
