"""The derivative of a loop inside JAX (pgas.loop.derivative): the custom_jvp's primal is
the forward loop and its derivative the derivative's loop (or, for an affine step, the
transposed loop through a linear_call); what a gradient program stores and exchanges."""

import math
import re

import jax
import numpy as np
import pytest
from helpers import heat_adjoint, heat_numpy
from stencils import heat

import pgas
from pgas.loop.derivative import Transposed, differentiable

PERMUTE = re.compile(r"= \S+\[([\d,]+)\]\S* collective-permute\(")


def _times(base: float):
    """A toy loop: the state times ``base`` per step; records each call's ``tied``."""
    calls = []

    def loop(s, steps, p, tied=True, scan=True):
        calls.append(tied)
        return s * base**steps

    return loop, calls


def test_the_primal_is_the_forward_and_the_derivative_the_derivatives_loop():
    """Told apart by giving them different numbers: the value is the forward's (tied masks),
    every tangent the derivative's (untied), in forward and reverse mode; the rule's primal
    is the derivative's loop (for a real loop, the same bits as the forward's)."""
    forward, tied = _times(2.0)
    derivative, untied = _times(3.0)
    f = lambda x: differentiable(forward, derivative, x, 3, None)  # noqa: E731
    assert float(f(1.5)) == 12.0
    assert float(jax.grad(f)(1.5)) == 27.0
    assert jax.jvp(f, (1.5,), (1.0,)) == (40.5, 27.0)
    assert set(tied) == {True} and untied and set(untied) == {False}


def test_a_transposed_loop_is_the_transpose_where_only_the_state_has_a_tangent():
    """``adjoint_of`` gives the transpose reverse mode runs (a linear_call's), made once per
    kind and only where reverse mode asks for it: of the state, or (``with_params``) of the
    state and the params, ``(ct, params' ct)``; where it gives none, JAX transposes the
    derivative's loop."""
    forward, _ = _times(2.0)
    derivative, _ = _times(3.0)
    made = []

    def adjoint_of(s, p, with_params):
        made.append(with_params)
        back = (lambda ct, n, p, segment: (ct * 5.0, ct * 7.0)) if with_params else (
            lambda ct, n, p, segment: ct * 5.0)  # fmt: skip
        return Transposed(lambda s, n, p, segment, **kw: forward(s, n, p, **kw), back, 3)

    def f(x, p):
        return differentiable(forward, derivative, x, 3, p, adjoint_of)

    assert float(f(1.0, 0.5)) == 8.0 and made == []  # the forward alone makes none
    assert float(jax.grad(f)(1.0, 0.5)) == 5.0 and made == [False]
    assert float(jax.grad(f, argnums=1)(1.0, 0.5)) == 7.0 and made == [False, True]
    assert float(jax.grad(lambda x: f(x, x))(1.0)) == 12.0 and len(made) == 3  # 5 + 7
    none = lambda s, p, with_params: None  # noqa: E731  (a run neither path takes back)
    g = jax.grad(lambda x: differentiable(forward, derivative, x, 3, x, none))
    assert float(g(1.0)) == 27.0
    g = jax.grad(lambda x: differentiable(forward, derivative, x, 3, 0.5, none))
    assert float(g(1.0)) == 27.0


def test_gradient_memory_grows_as_the_square_root_of_steps():
    """XLA's memory analysis of the gradient program: at most 2.5 sqrt(steps) + 10 blocks."""
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.zeros(2**12, np.float32), mesh, boundary=pgas.Keep())
    block = 2**11 * 4
    for steps in (100, 1000):  # k = 2: the bound is for any k (auto: 16, a longer body)
        loss = lambda u, n=steps: pgas.sum(pgas.run(heat, u, n, steps_per_exchange=2))  # noqa: E731
        m = jax.jit(jax.grad(loss)).lower(u).compile().memory_analysis()
        peak = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
        assert (peak - m.alias_size_in_bytes) / block <= 2.5 * math.sqrt(steps) + 10


@pytest.mark.parametrize("k", [1, 2])
def test_a_linear_steps_gradient_stores_nothing_per_step(k):
    """Without rematerialisation the gradient of a linear step needs no forward value, and
    its update masks are loop-invariant: XLA's temporaries do not grow with the steps. A mask
    stored per step as a residual (the counter-tied masks of the standalone loop) would add a
    quarter block (a byte per float32 cell) per step: 24 blocks from 32 to 128 steps."""
    u = pgas.from_numpy(np.zeros(2**12, np.float32), pgas.make_mesh(("x",), devices=2),
                        boundary=pgas.Keep())  # fmt: skip
    block = 2**11 * 4
    temps = []
    for steps in (32, 128):
        loss = lambda u, n=steps: pgas.sum(pgas.run(heat, u, n, steps_per_exchange=k,  # noqa: E731
                                                    remat_every=None) ** 2)  # fmt: skip
        compiled = jax.jit(jax.grad(loss)).lower(u).compile()
        temps.append(compiled.memory_analysis().temp_size_in_bytes)
    assert temps[1] - temps[0] < block, [t / block for t in temps]


def test_the_reverse_pass_of_an_affine_step_exchanges_deep_halos():
    """JAX's transpose of the loop exchanges one cell per step; the transposed step runs
    through the deep-halo loop: every collective-permute of the gradient carries at least
    two cells (the forward's k = 2 cells, the adjoint's 2k), and none gathers."""
    x0 = np.random.default_rng(9).random(4096)
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    loss = lambda u: pgas.sum(pgas.run(heat, u, 64, steps_per_exchange=2) ** 2)  # noqa: E731
    grad = jax.jit(jax.grad(loss)).lower(u).compile()  # k = 2: auto's 16, a longer body
    hlo = grad.as_text()
    widths = [int(s.split(",")[-1]) for s in PERMUTE.findall(hlo)]
    assert widths and min(widths) >= 2, widths
    assert "all-gather" not in hlo and "all-to-all" not in hlo
    np.testing.assert_allclose(grad(u).to_numpy(), heat_adjoint(2 * heat_numpy(x0, 64), 64),
                               rtol=1e-12)  # fmt: skip


def _leapfrog(s):
    u, v = s["u"], s["v"]
    v[1:-1] = 2 * u[1:-1] - v[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
    return {"u": v, "v": u}


def _squares(u):
    u[1:-1] = u[1:-1] + 0.1 * (u[:-2] * u[:-2] - u[2:] * u[2:])
    return u


@pytest.mark.parametrize("step", [_leapfrog, _squares])
def test_an_eager_gradient_compiles_the_forward_and_the_way_back_once(step, compiles,
                                                                       lowerings):  # fmt: skip
    """An eager ``jax.grad`` (no ``jit``) of a loss calling ``pgas.run`` (an affine leapfrog on
    two fields: the transposed loop; a nonlinear step: checkpointed segments) compiles two
    programs for the run, not one per primitive (107 and 26 before, at k = 7): its forward,
    which runs before the cotangent exists, and its way back; a second one lowers and compiles
    nothing (3 and 6 before); both give the bits of the jitted gradient. The loss's own eager
    operations are compiled first, by the same gradient without the run."""
    rng = np.random.default_rng(3)
    mesh = pgas.make_mesh(("x",), devices=3)  # blocks 4, 4, 3: the automatic k is 3 (odd)
    field = lambda: pgas.from_numpy(rng.random(11), mesh, boundary=pgas.Keep())  # noqa: E731
    w = field()
    state = {"u": field(), "v": field()} if step is _leapfrog else field()

    def loss(s, run=pgas.run):
        out = run(step, s, 9)
        return sum(pgas.sum(w * x) for x in (out.values() if isinstance(out, dict) else [out]))

    jax.grad(lambda s: loss(s, lambda step, s, n: s))(state)
    compiles.clear()
    eager = jax.grad(loss)(state)
    first, lowered = len(compiles), len(lowerings)
    assert first <= 2, first
    again = jax.grad(loss)(state)
    assert len(compiles) == first and len(lowerings) == lowered, (
        len(compiles) - first, len(lowerings) - lowered)  # fmt: skip
    jitted = jax.jit(jax.grad(loss))(state)
    for g in (eager, again):
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(jitted)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
