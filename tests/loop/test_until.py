"""pgas.run_until against NumPy Jacobi and CG written here: iterations, bits, collectives."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cg_steps_numpy, jacobi_numpy
from loop.test_scalars import cg_state
from stencils import cg as cg_step

import pgas


def jacobi(u, f):
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1])
    return u


def small_residual(u, f):
    r = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1] - 4 * u[1:-1, 1:-1]
    return pgas.max(abs(r)) < 1e-6


def field(a, mesh):
    return pgas.from_numpy(a, mesh, spec=("y", "x"), boundary=pgas.Keep())


@pytest.mark.parametrize("devices, shape", [(1, (1, 1)), (3, (3, 1)), (4, (2, 2))])
def test_jacobi_until_converged_matches_numpy_bitwise(devices, shape):
    f = np.random.default_rng(1).random((15, 13)) / 14**2  # uneven over every mesh
    mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
    out = pgas.run_until(jacobi, field(np.zeros_like(f), mesh), small_residual, 2000,
                         check_every=8, params=field(f, mesh))  # fmt: skip
    want, steps = jacobi_numpy(f, 8, 2000)
    assert out.converged and out.finite and out.steps_taken == steps and steps % 8 == 0
    np.testing.assert_array_equal(out.state.to_numpy(), want)
    if devices == 4:  # pgas.run for steps_taken, bitwise (on the 2-D uneven mesh: one program)
        again = pgas.run(jacobi, field(np.zeros_like(f), mesh), steps, params=field(f, mesh))
        np.testing.assert_array_equal(again.to_numpy(), want)


def test_auto_check_every_and_max_steps_reached_warns():
    f = np.random.default_rng(2).random((12, 12)) / 11**2
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    with pytest.warns(pgas.NonConvergenceWarning, match="max_steps = 21"):
        out = pgas.run_until(jacobi, field(np.zeros_like(f), mesh), small_residual, 21,
                             params=field(f, mesh))  # fmt: skip
    k = out.plan.steps_per_exchange  # 6: the smallest block holds 6 cells
    assert not out.converged and out.steps_taken == 21 and out.check_every == 11 * k == 66
    assert f"check_every = {11 * k}" in out.note
    np.testing.assert_array_equal(out.state.to_numpy(), jacobi_numpy(f, 66, 21)[0])


def test_a_converged_made_anew_per_call_reuses_the_program(compiles):
    f = np.random.default_rng(4).random((14, 11)) / 13**2
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)

    def solve(tol):  # a time step of a flow solver would call this once per step
        def converged(u, f):
            r = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + f[1:-1, 1:-1] \
                - 4 * u[1:-1, 1:-1]  # fmt: skip
            return pgas.max(abs(r)) < tol

        return pgas.run_until(jacobi, field(np.zeros_like(f), mesh), converged, 4000,
                              check_every=8, params=field(f, mesh))  # fmt: skip

    tight = solve(1e-6)
    compiles.clear()
    again = solve(1e-6)
    assert compiles == []  # the same code and tolerance: the same program
    assert again.steps_taken == tight.steps_taken
    np.testing.assert_array_equal(again.state.to_numpy(), tight.state.to_numpy())
    loose = solve(1e-3)  # another tolerance: its own program, its own answer
    assert compiles
    for out, tol in ((tight, 1e-6), (loose, 1e-3)):
        want, steps = jacobi_numpy(f, 8, 4000, tol)
        assert out.converged and out.steps_taken == steps
        np.testing.assert_array_equal(out.state.to_numpy(), want)
    assert loose.steps_taken < tight.steps_taken

    from pgas.references import explicit  # the explicit path keys its programs the same way

    def kernel(e, f):
        return 0.25 * (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + f[1:-1, 1:-1])

    def local(tol):
        def converged(e, f, reduce):
            r = e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] + f[1:-1, 1:-1] \
                - 4 * e[1:-1, 1:-1]  # fmt: skip
            return reduce(abs(r), "max") < tol

        return explicit.run_until(kernel, field(np.zeros_like(f), mesh), converged, 4000,
                                  region=(slice(1, -1), slice(1, -1)), check_every=8,
                                  params=field(f, mesh))  # fmt: skip

    first = local(1e-6)
    compiles.clear()
    second = local(1e-6)
    assert compiles == []
    assert first.steps_taken == second.steps_taken == tight.steps_taken
    np.testing.assert_array_equal(second.state.to_numpy(), tight.state.to_numpy())


def test_same_code_compares_values_only_where_they_cannot_change():
    from pgas.loop.until import SameCode

    def closure(value):
        return lambda u: u < value

    u = pgas.from_numpy(np.zeros(4, np.float32), pgas.make_mesh(devices=1))
    same = [(1e-8, 1e-8), ((1, "a", None), (1, "a", None)), (np.float32(2), np.float32(2)),
            (max, max)]  # fmt: skip
    for a, b in same:
        assert SameCode(closure(a)) == SameCode(closure(b)), a
        assert hash(SameCode(closure(a))) == hash(SameCode(closure(b)))
    apart = [(1e-8, 1e-6), (1, 1.0), (np.float32(2), 2.0), (float("nan"), float("nan")),
             (u, u), (np.ones(2), np.ones(2)), (jnp.ones(2), jnp.ones(2))]  # fmt: skip
    for a, b in apart:  # an array (a GlobalArray compares cell by cell): the function's identity
        assert SameCode(closure(a)) != SameCode(closure(b)), a
    f = closure(u)
    assert SameCode(f) == SameCode(f)


# 1 device and 2x2 (both axes split unevenly: the paths a 1x3 split took, on each axis)
@pytest.mark.parametrize("devices, shape", [(1, (1, 1)), (4, (2, 2))])
def test_cg_until_converged_same_iterations_as_numpy(devices, shape):
    b = np.random.default_rng(3).random((13, 11))
    mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=devices)
    state = cg_state(b, mesh)
    tol = 1e-16 * float(state["rr"])  # relative residual 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pgas.run_until(cg_step, state, lambda s: s["rr"] < tol, 500)
    assert out.check_every == 1 and "reduction" in out.note
    n = next(i for i in range(1, 500) if cg_steps_numpy(b, i)[2] < tol)
    assert abs(out.steps_taken - n) <= 2  # sums in another order: within 2 iterations
    x = cg_steps_numpy(b, out.steps_taken)[0]
    np.testing.assert_allclose(out.state["x"].to_numpy(), x, rtol=1e-8, atol=1e-12)


def test_one_all_reduce_per_check_and_per_reduction_in_the_compiled_loop():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    f = field(np.ones((12, 12)), mesh)
    u = field(np.zeros((12, 12)), mesh)
    run = lambda u, f: pgas.run_until(jacobi, u, small_residual, 100, check_every=4, params=f)  # noqa: E731
    hlo = jax.jit(run).lower(u, f).compile().as_text()
    assert hlo.count(" all-reduce(") == 1 and hlo.count(" all-gather(") == 0
    state = cg_state(np.ones((12, 12)), mesh)
    cg = lambda s: pgas.run_until(cg_step, s, lambda s: s["rr"] < 1e-20, 50)  # noqa: E731
    hlo = jax.jit(cg).lower(state).compile().as_text()
    # p.Ap and r.r per iteration; the check reads r.r, already reduced: no collective of its own
    assert hlo.count(" all-reduce(") == 2 and hlo.count(" all-gather(") == 0


def test_bad_inputs_are_refused_with_the_fix():
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.zeros(8), mesh)
    done = lambda u: pgas.max(u) < 1  # noqa: E731
    step = lambda u: u  # noqa: E731
    with pytest.raises(pgas.PgasError, match=r"max_steps = 0: give a whole number >= 1"):
        pgas.run_until(step, u, done, 0)
    with pytest.raises(pgas.PgasError, match=r"check_every = 0: give a whole number >= 1"):
        pgas.run_until(step, u, done, 10, check_every=0)
    with pytest.raises(
        pgas.PgasError,
        match=r"check_every = 6 is not a multiple of "
        r"steps_per_exchange = 4.*check_every = 8",
    ):
        pgas.run_until(step, u, done, 10, check_every=6, steps_per_exchange=4)
    with pytest.raises(
        pgas.PgasError,
        match=r"converged returned float64\[\]; it must return "
        r"a scalar boolean",
    ):
        pgas.run_until(step, u, lambda u: pgas.max(u), 10)
    with pytest.raises(pgas.PgasError, match=r"state\[1\] is a str"):
        pgas.run_until(step, (u, "x"), lambda s: pgas.max(s[0]) < 1, 10)


def test_reverse_mode_says_it_is_not_supported():
    mesh = pgas.make_mesh(devices=1)
    u = pgas.from_numpy(np.ones(6), mesh, boundary=pgas.Keep())

    def loss(u):
        out = pgas.run_until(lambda u, f: jacobi1d(u), u, lambda u, f: pgas.max(u) < 0.5, 20,
                             params=jnp.float64(0))  # fmt: skip
        return pgas.sum(out.state)

    with pytest.raises(pgas.PgasError, match="reverse mode.*not supported"):
        jax.jit(jax.grad(loss))(u)  # refused while tracing (eagerly: after running the loop)


def jacobi1d(u):
    u[1:-1] = 0.5 * (u[:-2] + u[2:])
    return u


def test_the_callers_state_stays_usable_unless_donated():
    """As pgas.run: the loop works on a copy by default; donate=True hands it the buffers."""
    f = np.random.default_rng(9).random((15, 13)) / 14**2
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u, b = field(np.zeros_like(f), mesh), field(f, mesh)
    kept = pgas.run_until(jacobi, u, small_residual, 2000, check_every=8, params=b)
    np.testing.assert_array_equal(u.to_numpy(), np.zeros_like(f))  # still the caller's zeros
    given = pgas.run_until(jacobi, u, small_residual, 2000, check_every=8, params=b, donate=True)
    assert u.data.is_deleted() and given.steps_taken == kept.steps_taken
    np.testing.assert_array_equal(given.state.to_numpy(), kept.state.to_numpy())


def test_a_state_gone_non_finite_stops_at_that_check_and_says_so():
    """A NaN in the state, a step overflowing to inf, a scalar of the state gone inf: the loop
    stops at the first check that sees it (not at max_steps, nor "converged" on a max that
    dropped the NaN), .finite is False, a NonFiniteWarning names the step; the state is
    NumPy's after those steps."""
    mesh = pgas.make_mesh(devices=4)  # blocks of 4 cells
    a = np.random.default_rng(6).random(16)
    a[0] = a[-1] = 0.0
    a[9] = np.nan
    u = pgas.from_numpy(a, mesh, boundary=pgas.Keep())
    with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 8"):
        out = pgas.run_until(jacobi1d, u, lambda u: pgas.max(abs(u[1:-1])) < 1e-3, 5000,
                             check_every=8)  # fmt: skip
    assert (out.steps_taken, out.converged, out.finite) == (8, False, False)
    np.testing.assert_array_equal(out.state.to_numpy(), jacobi1d_steps(a, 8))

    def blow_up(u):  # 1e300 after 3 steps, inf after 4
        u[1:-1] = 1e100 * u[1:-1]
        return u

    v = pgas.from_numpy(np.ones(12), mesh, boundary=pgas.Keep())
    with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 4"):
        out = pgas.run_until(blow_up, v, lambda u: pgas.max(abs(u)) < 1e-3, 1000, check_every=2)
    assert (out.steps_taken, out.converged, out.finite) == (4, False, False)

    def grow(s):  # a scalar the test reads without reducing (CG's r.r): inf after 2 steps
        return {"u": s["u"], "rr": s["rr"] * 1e200}

    state = {"u": v, "rr": jnp.float64(1.0)}
    with pytest.warns(pgas.NonFiniteWarning, match="stopped at step 2"):
        out = pgas.run_until(grow, state, lambda s: s["rr"] < 1e-8, 1000, check_every=1)
    assert (out.steps_taken, out.finite) == (2, False) and np.isinf(float(out.state["rr"]))


def jacobi1d_steps(a: np.ndarray, steps: int) -> np.ndarray:
    """``steps`` steps of 1-D Jacobi (walls kept) in NumPy."""
    u = a.copy()
    for _ in range(steps):
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
    return u


def jacobi1d_numpy(a: np.ndarray, every: int, max_steps: int, tol: float):
    """1-D Jacobi (walls kept) until max |u| < tol, checked every ``every`` steps."""
    u, n = a.copy(), 0
    while n < max_steps:
        for _ in range(min(every, max_steps - n)):
            u[1:-1] = 0.5 * (u[:-2] + u[2:])
            n += 1
        if abs(u[1:-1]).max() < tol:
            break
    return u, n


def test_max_steps_past_int32_runs_exactly(monkeypatch):
    """max_steps = 2**31 - 8 (the most one int32-counted loop checked every 8 steps takes),
    2**31, 2**32 + 64 or 10**12 ("until converged") converge at NumPy's steps (a run of more
    than 2**31 - 1 steps is several int32-counted loops, one after the other, the first of
    them the loop of 2**31 - 8), inside jax.jit too (an int64 counter); with the limit lowered
    to 40 steps, a run of 100 steps is exactly 100 steps, and one converging in a later piece
    takes the steps of one loop. Without 64-bit integers a count past 2**31 - 1 runs outside
    a trace and is refused inside one."""
    from pgas.loop import counts

    a = np.random.default_rng(7).random(16)
    a[0] = a[-1] = 0.0
    mesh = pgas.make_mesh(devices=2)
    done = lambda u: pgas.max(abs(u[1:-1])) < 1e-2  # noqa: E731

    def solve(max_steps):  # k = 2: 4 groups per check (auto's k = 8 on blocks of 8: one)
        u = pgas.from_numpy(a, mesh, boundary=pgas.Keep())
        return pgas.run_until(jacobi1d, u, done, max_steps, check_every=8, steps_per_exchange=2)

    want, steps = jacobi1d_numpy(a, 8, 2000, 1e-2)
    assert 40 < steps < 2000
    for max_steps in (2**31 - 8, 2**31, 2**32 + 64, 10**12):
        out = solve(max_steps)
        assert (out.steps_taken, out.converged, out.finite) == (steps, True, True), max_steps
        np.testing.assert_array_equal(out.state.to_numpy(), want)

    def until(u):  # inside jax.jit: an int64 counter
        return pgas.run_until(jacobi1d, u, done, 10**12, check_every=8, steps_per_exchange=2)

    out = jax.jit(until)(pgas.from_numpy(a, mesh, boundary=pgas.Keep()))
    assert (int(out.steps_taken), bool(out.converged)) == (steps, True)
    np.testing.assert_array_equal(out.state.to_numpy(), want)

    monkeypatch.setattr(counts, "INT32_STEPS", 40)
    with pytest.warns(pgas.NonConvergenceWarning, match="max_steps = 100"):
        out = solve(100)  # 40 + 40 + 20 steps, checked every 8 as one loop checks
    assert (out.steps_taken, out.converged) == (100, False)
    np.testing.assert_array_equal(out.state.to_numpy(), jacobi1d_numpy(a, 8, 100, 1e-2)[0])
    out = solve(2000)
    assert (out.steps_taken, out.converged) == (steps, True)
    np.testing.assert_array_equal(out.state.to_numpy(), want)
    monkeypatch.undo()

    with jax.enable_x64(False):
        u = pgas.from_numpy(np.array([0.0, 8.0, 0.0, 0.0], np.float32), pgas.make_mesh(devices=1),
                            boundary=pgas.Keep())  # fmt: skip
        out = pgas.run_until(jacobi1d, u, lambda u: pgas.max(abs(u)) < 1.0, 10**12, check_every=2)
        assert (out.steps_taken, out.converged) == (4, True)
        with pytest.raises(pgas.PgasError, match=r"max_steps = 2147483648 inside a trace.*"
                                                 r"jax_enable_x64"):  # fmt: skip
            jax.jit(lambda u: pgas.run_until(jacobi1d, u, done, 2**31).state)(u)


def test_forward_mode_runs_the_tangent_through_the_same_loop():
    """jax.jvp through run_until: the primal is run_until's, the tangent the same steps of the
    (linear) step on the tangent (reverse mode: test_reverse_mode_says_it_is_not_supported)."""
    rng = np.random.default_rng(8)
    mesh = pgas.make_mesh(devices=3)  # blocks 3, 2, 2: k = 2
    a, da = rng.random(7), rng.random(7)
    a[0] = a[-1] = 0.0
    u = pgas.from_numpy(a, mesh, boundary=pgas.Keep())
    du = pgas.from_numpy(da, mesh, boundary=pgas.Keep())

    def solve(u):
        return pgas.run_until(jacobi1d, u, lambda u: pgas.max(abs(u)) < 0.1, 500, check_every=4)

    n = solve(u).steps_taken
    out, tangent = jax.jvp(lambda u: solve(u).state, (u,), (du,))
    np.testing.assert_array_equal(out.to_numpy(), jacobi1d_steps(a, n))
    np.testing.assert_allclose(tangent.to_numpy(), jacobi1d_steps(da, n), rtol=1e-13, atol=1e-15)


@pytest.mark.filterwarnings("ignore::pgas.NonConvergenceWarning")  # fixed counts, by design
def test_a_loop_inside_a_step_compiles_into_one_program_as_a_python_loop_runs():
    """run_until (params a GlobalArray, or a closure) and run inside a step of run/run_until:
    the outer step runs without frames, each inner loop as a standalone call."""
    mesh = pgas.make_mesh(("x",), devices=3)
    b = pgas.from_numpy(np.linspace(0.0, 1.0, 11), mesh, boundary=pgas.Keep())

    def jacobi(u, b):
        u[1:-1] = 0.5 * (u[:-2] + u[2:]) + 0.1 * b[1:-1]
        return u

    def small(u, b):
        return pgas.max(abs(u)) > 1e9  # never: max_steps sweeps

    def with_params(u, b):
        inner, _ = pgas.run_until(jacobi, u, small, 5, params=b, check_every=1)
        inner[1:-1] = inner[1:-1] * 0.5
        return inner

    def inner_step(v):  # a closure over b
        return jacobi(v, b)

    def with_closure(u):
        return pgas.run(inner_step, u, 3)

    u0 = pgas.from_numpy(np.arange(11.0), mesh, boundary=pgas.Keep())
    want_p, want_c = u0, u0
    for _ in range(3):
        want_p, want_c = with_params(want_p, b), with_closure(want_c)
    got_p = pgas.run(with_params, u0, 3, params=b)
    got_c, steps = pgas.run_until(with_closure, u0, lambda u: pgas.max(u) < -1, 3)
    assert steps == 3
    assert np.array_equal(got_p.to_numpy(), want_p.to_numpy())
    assert np.array_equal(got_c.to_numpy(), want_c.to_numpy())
    note = pgas.plan.plan(with_params, u0, params=b).note
    assert "k = 1, no deep halos" in note and "the step calls a loop" in note
