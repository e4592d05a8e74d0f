"""pgas.run inside a caller's trace (pgas.loop.traced): the standalone loop's bits and
collectives under jax.jit, snapshots and a traced step count; only the derivative's loop
cut into rematerialised segments; what cannot run inside a trace."""

import re

import jax
import numpy as np
import pytest
from helpers import heat_numpy
from stencils import heat

import pgas
from pgas.errors import PgasError
from pgas.loop.traced import run_traced

COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")


def collectives(hlo: str) -> set[tuple[str, str]]:
    """(kind, operand shape) of every collective in compiled HLO text."""
    return {(kind, shape) for shape, kind in COLLECTIVE.findall(hlo)}


def _nonlinear(u, p):
    u[1:-1] = u[1:-1] + p["c"] * (u[:-2] + u[2:] - 2 * u[1:-1]) - 0.1 * u[1:-1] ** 3
    return u


def test_jit_of_run_is_the_standalone_run_bitwise_with_the_same_collectives():
    x0 = np.random.default_rng(0).random(101)
    mesh = pgas.make_mesh(("x",), devices=3)

    def make():
        return pgas.from_numpy(x0, mesh, boundary=pgas.Keep())

    # auto: k = 16, the double-buffered loop; 36 steps (2 groups and 4 single steps): an even
    # count, whose standalone program pgas.loop.compiled gives below (37 compiled the odd one too)
    for k in (1, "auto"):
        want = pgas.run(heat, make(), 36, steps_per_exchange=k).to_numpy()
        f = jax.jit(lambda u, k=k: pgas.run(heat, u, 36, steps_per_exchange=k))
        np.testing.assert_array_equal(f(make()).to_numpy(), want)
        np.testing.assert_array_equal(want, heat_numpy(x0, 36))
        mine = collectives(f.lower(make()).compile().as_text())
        alone = collectives(pgas.loop.compiled(heat, make(), k).as_text())
        assert mine == alone and {kind for kind, _ in mine} == {"collective-permute"}
    state, snaps = pgas.run(heat, make(), 36, snapshot_every=12)
    s2, n2 = jax.jit(lambda u: pgas.run(heat, u, 36, snapshot_every=12))(make())
    np.testing.assert_array_equal(n2.to_numpy(), snaps.to_numpy())
    np.testing.assert_array_equal(s2.to_numpy(), state.to_numpy())
    _, totals = jax.jit(lambda u: pgas.run(heat, u, 36, snapshot_every=12, observe=pgas.sum))(
        make()
    )
    np.testing.assert_allclose(totals, [heat_numpy(x0, t).sum() for t in (12, 24, 36)])
    # a traced step count (forward only) and lax.scan around run
    g = jax.jit(lambda u, n: pgas.run(heat, u, n))
    np.testing.assert_array_equal(g(make(), 37).to_numpy(), heat_numpy(x0, 37))
    np.testing.assert_array_equal(g(make(), 5).to_numpy(), heat_numpy(x0, 5))
    out, _ = jax.lax.scan(lambda u, _: (pgas.run(heat, u, 4), None), make(), None, length=3)
    np.testing.assert_array_equal(out.to_numpy(), heat_numpy(x0, 12))


def test_the_forward_under_jit_is_not_cut_into_rematerialised_segments():
    """Only the derivative's loop is differentiated, so only it carries segments under
    jax.checkpoint; the forward loop of a jitted run is the standalone one (segments slowed
    the forward, and each made a fresh spare buffer)."""
    u = pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(("x",), devices=2),
                        boundary=pgas.Keep())  # fmt: skip
    # 16 steps: where a derivative's loop is cut, segments of sqrt(16) = 4 steps (100 steps
    # traced the same segments, of 10, at twice the cost)
    forward = str(jax.make_jaxpr(lambda u: pgas.run(heat, u, 16))(u))
    assert "checkpoint" not in forward and "remat" not in forward
    # a state with a Neumann face: JAX's derivative of the loop, in rematerialised segments
    n = pgas.from_numpy(np.zeros(64, np.float32), u.layout.mesh, boundary=pgas.Neumann())
    of_n = lambda u: pgas.sum(pgas.run(_nonlinear, u, 16, params={"c": 0.1}))  # noqa: E731
    derivative = str(jax.make_jaxpr(jax.grad(of_n))(n))
    assert "checkpoint" in derivative or "remat" in derivative
    assert "linear_call" not in derivative
    # with respect to the state or the params: pgas's checkpointed segments (pgas.loop.reverse)
    of_c = lambda c: pgas.sum(pgas.run(_nonlinear, u, 16, params={"c": c}))  # noqa: E731
    assert "linear_call" in str(jax.make_jaxpr(jax.grad(of_c))(0.1))
    assert "linear_call" in str(jax.make_jaxpr(jax.grad(of_n))(u))


def test_what_cannot_run_inside_a_trace():
    """Python between chunks, and a double-buffered plan for a traced count (its parity
    decides the program): refused, naming the way out; zero steps return the state."""
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.zeros(4096, np.float32), mesh, boundary=pgas.Keep())
    with pytest.raises(PgasError, match="chunk and callback cannot run inside a trace"):
        jax.jit(lambda u: pgas.run(heat, u, 4, chunk=2, callback=print))(u)
    with pytest.raises(PgasError, match="use snapshot_every"):
        jax.jit(lambda u: run_traced(heat, u, 4, chunk=2))(u)
    double = pgas.plan.plan(heat, u)
    assert double.double  # CPU, a large block: k > 1, two buffers
    with pytest.raises(PgasError, match=r"plan is double-buffered, but steps is traced .*"
                                        r"double=False"):  # fmt: skip
        jax.jit(lambda u, n: pgas.run(heat, u, n, plan=double))(u, 8)
    same, snaps = run_traced(heat, u, 0, every=2)
    assert same is u and snaps is None
