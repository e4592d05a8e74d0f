"""Scalars in the state of pgas.run: conjugate gradients against a NumPy CG written here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cg_steps_numpy
from stencils import cg

import pgas
from pgas.loop.report import parse_collectives
from pgas.loop.timeloop import compiled


def cg_state(b: np.ndarray, mesh):
    r = b.copy()
    r[0, :] = r[-1, :] = r[:, 0] = r[:, -1] = 0
    field = lambda a: pgas.from_numpy(a, mesh, spec=("y", "x"), boundary=pgas.Keep())  # noqa: E731
    return {"x": field(np.zeros_like(b)), "r": field(r), "p": field(r.copy()),
            "rr": jnp.asarray((r * r).sum())}  # fmt: skip


# 1 device and 2x2 (both axes split unevenly: the paths a 1x3 split took, on each axis)
@pytest.mark.parametrize("devices, shape", [(1, (1, 1)), (4, (2, 2))])
def test_cg_with_scalars_in_the_state_matches_numpy(devices, shape):
    b = np.random.default_rng(23).random((13, 11))  # uneven over every mesh
    mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
    out = pgas.run(cg, cg_state(b, mesh), 12)
    x, r, rr = cg_steps_numpy(b, 12)
    assert out["rr"].shape == () and out["rr"].dtype == np.float64
    # sums over the grid run in another order than NumPy's: close, not bitwise
    np.testing.assert_allclose(out["x"].to_numpy(), x, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(out["rr"]), rr, rtol=1e-7)


def test_reductions_run_at_one_step_per_exchange_and_are_counted():
    b = np.random.default_rng(5).random((13, 11))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    state = cg_state(b, mesh)
    how = pgas.plan.plan(cg, state)
    assert how.steps_per_exchange == 1 and not how.double
    assert "reduction" in how.note
    report = pgas.comm_report(cg, state, loop=True)
    assert report.count("all-reduce") == 2  # p.Ap and r.r: one all-reduce of a scalar each
    assert all(c.bytes == 8 for c in report.per_step if c.kind == "all-reduce")
    assert report.count("all-gather") == 0


def test_compiled_loop_has_one_all_reduce_per_reduction():
    b = np.random.default_rng(6).random((12, 12))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    state = cg_state(b, mesh)
    hlo = compiled(cg, state).as_text()  # the program pgas.run runs
    found = parse_collectives(hlo, loop=True)
    assert hlo.count(" while(") == 1  # k = 1: one loop, no remainder
    assert [c.per_step for c in found if c.kind == "all-reduce"] == [True, True]
    traced = jax.jit(lambda s, n: pgas.run(cg, s, n)).lower(state, 5).compile().as_text()
    assert traced.count(" all-reduce(") == 2 and traced.count(" while(") == 1


def test_a_state_leaf_that_is_not_a_field_nor_a_scalar_is_refused():
    u = pgas.from_numpy(np.zeros(6), pgas.make_mesh(devices=1))
    with pytest.raises(pgas.PgasError, match=r"state\[1\] is a float .*jnp.asarray"):
        pgas.run(lambda s: s, (u, 0.5), 1)
    with pytest.raises(pgas.PgasError, match=r"state\['c'\] is an array of shape \(2,\)"):
        pgas.run(lambda s: s, {"u": u, "c": jnp.zeros(2)}, 1)


@pytest.mark.filterwarnings("ignore::pgas.NonConvergenceWarning")  # never converges: chunks
def test_run_until_resumed_from_its_result_compiles_no_second_loop(compiles):
    """A scalar made on one device (``jnp.asarray``) is placed as the loop returns it, so the
    next chunk of a checkpointed run (its result given back) reuses the compiled loop."""
    b = np.random.default_rng(7).random((9, 10))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    state = cg_state(b, mesh)
    assert not state["rr"].sharding.is_fully_replicated or len(state["rr"].devices()) == 1
    never = lambda s: s["rr"] < 0  # noqa: E731
    first = pgas.run_until(cg, state, never, 3, check_every=1)
    before = len(compiles)
    second = pgas.run_until(cg, first.state, never, 3, check_every=1)
    assert len(compiles) == before, compiles[before:]  # the same program
    whole = pgas.run_until(cg, cg_state(b, mesh), never, 6, check_every=1)
    np.testing.assert_array_equal(second.state["x"].to_numpy(), whole.state["x"].to_numpy())
