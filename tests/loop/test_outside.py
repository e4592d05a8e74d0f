"""A step, ``converged`` or ``observe`` reading a number from outside (a module global of this
test module, a rebound closure variable) runs with its value at the call, not the value of
the first call (issue 32, item 4: the compiled program was cached with the old value baked in).
"""

import sys

import numpy as np
import pytest

import pgas
from pgas.loop.timeloop import program

C = 0.1  # read by heat below
TOL = 1e-2  # read by small below
W = 1  # read by upwind below: the reach of the step
SCALE = 1.0  # read by scaled below
HERE = sys.modules[__name__]


def heat(u):
    u[1:-1] = u[1:-1] + C * (u[:-2] - 2 * u[1:-1] + u[2:])
    return u


def jacobi(u):
    u[1:-1] = 0.5 * (u[:-2] + u[2:])
    return u


def small(u):
    return pgas.max(abs(u)) < TOL


def upwind(u):
    u[W:] = u[W:] - 0.5 * (u[W:] - u[:-W])
    return u


def scaled(u):
    return pgas.sum(u) * SCALE


def heat_numpy(x, c, steps):
    x = x.copy()
    for _ in range(steps):
        x[1:-1] = x[1:-1] + c * (x[:-2] - 2 * x[1:-1] + x[2:])
    return x


def upwind_numpy(x, w, steps):
    x = x.copy()
    for _ in range(steps):
        x[w:] = x[w:] - 0.5 * (x[w:] - x[:-w])
    return x


def jacobi_steps(x, tol, every, max_steps):
    """Steps ``run_until(jacobi, ..., check_every=every)`` takes, in NumPy."""
    n = 0
    while n < max_steps:
        for _ in range(every):
            x[1:-1] = 0.5 * (x[:-2] + x[2:])
        n += every
        if np.abs(x).max() < tol:
            break
    return n


X0 = np.sin(np.linspace(0, np.pi, 24)) ** 2


def field(x, devices=1):
    return pgas.from_numpy(x, pgas.make_mesh(devices=devices), boundary=pgas.Keep())


def close(got, want):
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("kind", [float, np.float64])
def test_run_follows_a_global_number(monkeypatch, kind):
    for c in (0.1, 0.3, 0.1):
        monkeypatch.setattr(HERE, "C", kind(c))
        close(pgas.run(heat, field(X0, 2), 12), heat_numpy(X0, c, 12))


def test_run_reuses_the_program_while_the_global_is_unchanged(monkeypatch):
    monkeypatch.setattr(HERE, "C", 0.2)
    pgas.run(heat, field(X0), 4, steps_per_exchange=1)
    misses = program.cache_info().misses
    close(pgas.run(heat, field(X0), 4, steps_per_exchange=1), heat_numpy(X0, 0.2, 4))
    assert program.cache_info().misses == misses  # no new program
    monkeypatch.setattr(HERE, "C", 0.25)
    close(pgas.run(heat, field(X0), 4, steps_per_exchange=1), heat_numpy(X0, 0.25, 4))
    assert program.cache_info().misses == misses + 1


def test_run_follows_a_rebound_closure_variable():
    c = 0.1

    def step(u):
        u[1:-1] = u[1:-1] + c * (u[:-2] - 2 * u[1:-1] + u[2:])
        return u

    for value in (0.1, 0.35):
        c = value  # noqa: F841 - read by step through its closure cell
        close(pgas.run(step, field(X0), 10, steps_per_exchange=1), heat_numpy(X0, value, 10))


def test_run_follows_a_global_a_helper_reads(monkeypatch):
    def step(u):
        return heat(u)  # heat reads C: one function down

    for c in (0.1, 0.2):
        monkeypatch.setattr(HERE, "C", c)
        close(pgas.run(step, field(X0), 6, steps_per_exchange=1), heat_numpy(X0, c, 6))


def test_observe_follows_a_global(monkeypatch):
    for s in (1.0, 3.0):
        monkeypatch.setattr(HERE, "SCALE", s)
        _, snaps = pgas.run(jacobi, field(X0), 4, snapshot_every=2, observe=scaled)
        x = X0.copy()
        for _ in range(2):  # the first snapshot: after 2 steps
            x[1:-1] = 0.5 * (x[:-2] + x[2:])
        np.testing.assert_allclose(np.asarray(snaps)[0], x.sum() * s, rtol=1e-13)


def test_plan_run_and_comm_report_follow_a_global_reach(monkeypatch):
    for w in (1, 2):
        monkeypatch.setattr(HERE, "W", w)
        u = pgas.from_numpy(X0, pgas.make_mesh(devices=2), boundary=pgas.Dirichlet(0.0))
        assert pgas.loop.plan.plan(upwind, u, steps_per_exchange=1).sides == ((w, 0),)
        report = pgas.comm_report(upwind, u, steps_per_exchange=1)
        assert {e.below_above for e in report.exchanges} == {(w, 0)}
        # k = 2: two groups and a step (auto's k, 12 and 6 on blocks of 12, exceeds the 5
        # steps: its group would be compiled and never run)
        close(pgas.run(upwind, u, 5, steps_per_exchange=2), upwind_numpy(X0, w, 5))


def test_run_until_follows_a_global_tolerance(monkeypatch):
    seen = []
    for tol in (1e-1, 1e-3):
        monkeypatch.setattr(HERE, "TOL", tol)
        out = pgas.run_until(jacobi, field(X0, 2), small, 5000, check_every=4)
        assert out.converged
        assert out.steps_taken == jacobi_steps(X0.copy(), tol, 4, 5000)
        seen.append(out.steps_taken)
    assert seen[0] < seen[1]


def test_run_until_follows_rebound_closure_variables():
    tol, c = 1e-1, 0.5

    def step(u):
        u[1:-1] = c * (u[:-2] + u[2:])
        return u

    def converged(u):
        return pgas.max(abs(u)) < tol

    for tol, c in ((1e-1, 0.5), (1e-3, 0.5), (1e-3, 0.45)):  # noqa: B007 - read by the closures
        out = pgas.run_until(step, field(X0), converged, 5000, check_every=4)
        x, n = X0.copy(), 0
        while n < 5000:
            for _ in range(4):
                x[1:-1] = c * (x[:-2] + x[2:])
            n += 4
            if np.abs(x).max() < tol:
                break
        assert out.steps_taken == n
        close(out.state, x)


def test_numbers_read_keys_what_counts_and_leaves_out_the_rest():
    """The cache key's rules, without compiling: kinds, bits, small arrays by value (a change
    in place counts), large arrays, partials, bound methods, functions found two levels down."""
    import functools

    from pgas.loop.outside import SMALL, names_of, numbers_read

    def reads(value):
        return numbers_read(lambda u: u * value)

    assert reads(1) != reads(1.0) and reads(0.0) != reads(-0.0) and reads(np.nan) == reads(np.nan)
    assert reads(np.float32(2)) != reads(np.float64(2)) and reads("text") == ()
    small = np.zeros(SMALL)
    before = reads(small)
    small[3] = 1.0  # in place
    assert reads(small) != before
    assert reads(np.zeros(SMALL + 1)) == () and reads([1, "a", 2.5]) == reads([1, "b", 2.5])

    def inner(u):
        return u * SCALE

    def middle(u):
        return inner(u)

    def outer(u):
        return middle(u)

    def too_deep(u):
        return outer(u)

    class Stepper:
        def step(self, u):
            return inner(u)

    assert numbers_read(outer) == numbers_read(functools.partial(inner, 1.0)) != ()
    assert numbers_read(Stepper().step) == numbers_read(inner) and numbers_read(too_deep) == ()
    assert names_of(outer.__code__) == () and names_of(inner.__code__) == ("SCALE",)


def test_captured_keys_the_arrays_of_the_enclosing_scope_by_identity():
    """Without compiling: a field and a JAX array found through closures and a partial,
    ``depth`` levels down; equal keys for the same arrays, another for a rebound one."""
    import functools

    import jax.numpy as jnp

    from pgas.loop.outside import Same, captured

    mesh = pgas.make_mesh(("x",), devices=2)

    def make(field, plain):
        def inner(u):
            return u * field

        def step(u):
            return inner(u) * plain[0]

        return step

    field, plain = pgas.from_numpy(np.ones(8), mesh), jnp.ones(3)
    keys = captured(make(field, plain))
    assert {id(k.obj) for k in keys} == {id(field.data), id(plain)}
    assert [k.field for k in keys if k.obj is field.data] == [field]  # a field a loop extends
    assert [k.field for k in keys if k.obj is plain] == [None]
    assert captured(make(field, plain)) == keys and hash(captured(make(field, plain))) == hash(keys)
    rebound = pgas.from_numpy(np.ones(8), mesh)
    assert captured(make(rebound, plain)) != keys
    assert [k.obj for k in captured(make(field, plain), depth=1)] == [plain]  # inner not followed
    assert captured(functools.partial(lambda u, k: u * k, k=field)) == (Same(field.data),)
