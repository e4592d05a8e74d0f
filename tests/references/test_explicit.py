"""The explicit ppermute path: bitwise equal to the automatic path, same collectives."""

import sys

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stencils
from helpers import heat_numpy, life_numpy
from jax import shard_map
from problems import heat_kernel, heat_step, life_kernel, life_step

import pgas
from pgas.references import explicit

HEAT_REGION = (slice(1, -1),)
C = 0.1  # read by _heat_c below: a module-level number the compiled programs bake in
TOL = 1e-2  # read by _small and _small_state below
HERE = sys.modules[__name__]


# 1 device and uneven splits (1003 cells: 335 + 334 + 334, 3 x 251 + 250), each dtype; 2 and 8
# devices split the same way
@pytest.mark.parametrize("devices, dtype", [(1, np.float32), (3, np.float64), (4, np.float32)])
def test_heat_explicit_equals_numpy(devices, dtype):
    x0 = np.random.default_rng(devices).random(1003).astype(dtype)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=devices), boundary=pgas.Keep())
    # k = 4: two groups and three single steps (the default k, 16, is more than the 11 steps:
    # its group would be compiled and never run)
    out = explicit.run(heat_kernel, u, 11, halo=1, region=HEAT_REGION,
                       steps_per_exchange=4).to_numpy()  # fmt: skip
    np.testing.assert_array_equal(out, heat_numpy(x0, 11))


# either axis split alone (the other wrapped locally, as both are on one device); both split,
# unevenly (3x2; 2x4 is the same path); one device: test_heat_explicit_equals_numpy. k = 2:
# four groups on a halo two deep, corners included ("auto", 8, runs one group of 8 steps: the
# same loop, a longer body)
@pytest.mark.parametrize("mesh_shape", [(1, 2), (2, 1), (3, 2)])
def test_life_explicit_equals_numpy(mesh_shape):
    b0 = (np.random.default_rng(2).random((37, 53)) < 0.4).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    g = pgas.from_numpy(b0, mesh, boundary=pgas.Periodic())
    out = explicit.run(life_kernel, g, 8, steps_per_exchange=2).to_numpy()
    np.testing.assert_array_equal(out, life_numpy(b0, 8))


def _same_collectives(auto, expl):
    assert auto.count("collective-permute") == expl.count("collective-permute")
    assert auto.bytes("collective-permute") == expl.bytes("collective-permute")
    assert auto.gathers == expl.gathers == 0
    assert auto.ratio == expl.ratio == 1.0


def test_heat_same_hlo_collectives_as_auto():
    u = pgas.from_numpy(np.zeros(2**16, np.float32), pgas.make_mesh(("x",)), boundary=pgas.Keep())
    auto = pgas.comm_report(heat_step, u, steps_per_exchange=1)
    expl = explicit.comm_report(heat_kernel, u, 1, HEAT_REGION, steps_per_exchange=1)
    _same_collectives(auto, expl)
    assert expl.count("collective-permute") == 2 and expl.bytes() == 8


def test_life_same_hlo_collectives_as_auto():
    g = pgas.from_numpy(np.zeros((512, 512), np.uint8), pgas.make_mesh(("y", "x"), shape=(2, 4)))
    auto = pgas.comm_report(life_step, g, steps_per_exchange=1)
    expl = explicit.comm_report(life_kernel, g, steps_per_exchange=1)
    _same_collectives(auto, expl)
    assert expl.count("collective-permute") == 4


def test_exchange_halo_boundaries():
    x = np.arange(10.0)
    mesh = pgas.make_mesh(("x",), devices=3)
    # both reads under one jax.jit: one program per boundary (run eagerly, shard_map compiles
    # every operation)
    reads = jax.jit(lambda v: (explicit.step(lambda e: e[2:-2] * 0 + e[:-4], v, halo=2),
                               explicit.step(lambda e: e[4:], v, halo=2)))  # fmt: skip
    for bc, left, right in [(pgas.Dirichlet(-1.0), [-1.0, -1.0], [-1.0, -1.0]),
                            (pgas.Neumann(), [1.0, 0.0], [9.0, 8.0]),
                            (pgas.Periodic(), [8.0, 9.0], [0.0, 1.0])]:  # fmt: skip
        left_of, right_of = reads(pgas.from_numpy(x, mesh, boundary=bc))
        assert left_of.to_numpy()[:2].tolist() == left  # reads 2 to the left
        assert right_of.to_numpy()[-2:].tolist() == right  # reads 2 to the right


def test_explicit_errors():
    u = pgas.from_numpy(np.zeros(16, np.float32), pgas.make_mesh(("x",)))
    with pytest.raises(pgas.HaloError, match="wider than the smallest local block"):
        explicit.step(heat_kernel, u, halo=3)
    # under jax.jit: refused while tracing (run eagerly, each operation of the kernel before
    # the check compiled on its own, 29 programs)
    with pytest.raises(pgas.HaloError, match="kernel returned shape"):
        jax.jit(lambda v: explicit.step(lambda e: e, v, halo=1))(u)
    with pytest.raises(pgas.DTypeMismatchError, match="astype"):
        g = pgas.from_numpy(np.zeros((8, 8), np.uint8), pgas.make_mesh(("y", "x"), devices=4))
        jax.jit(lambda v: explicit.step(lambda e: 0.5 * e[1:-1, 1:-1], v))(g)


# ---- halos per side: kernels that read one side exchange one side ----
def _upwind_kernel(e):
    return e[1:] - 0.5 * (e[1:] - e[:-1])


def _downwind_kernel(e):
    return e[:-1] - 0.5 * (e[:-1] - e[1:])


def _two_below_kernel(e):
    return e[2:] - 0.5 * (e[1:-1] - e[:-2]) - 0.25 * (e[2:] - e[1:-1])


def _upwind2d_kernel(e):
    return e[1:, 1:] - 0.25 * (e[1:, 1:] - e[:-1, 1:]) - 0.25 * (e[1:, 1:] - e[1:, :-1])


ONE_SIDED = {  # kernel, halo, region, boundary, the same step in global view, NumPy
    "upwind": (_upwind_kernel, ((1, 0),), (slice(1, None),), pgas.Dirichlet(0.0),
               stencils.upwind, helpers.upwind_numpy),
    "downwind": (_downwind_kernel, ((0, 1),), (slice(None, -1),), pgas.Dirichlet(0.5),
                 stencils.downwind, helpers.downwind_numpy),
    "two_below": (_two_below_kernel, ((2, 0),), (slice(2, None),), pgas.Neumann(),
                  stencils.two_below, helpers.two_below_numpy),
}  # fmt: skip


# k = 1, an even k (4) and an odd one (3), and "auto" on 25 cells (7 + 6 + 6 + 6), capped at
# the smallest block (6; 3 for two_below); on 203 cells "auto" is 16, a longer group of the same
# loop as k = 4. The automatic path runs "auto" on 25 cells (6, even; 3, odd, for two_below),
# bitwise the explicit one's (and NumPy's; these steps at k = 1, 3 and "auto" on 4 devices
# against NumPy: tests/loop/test_sides.py)
@pytest.mark.parametrize("name", list(ONE_SIDED))
@pytest.mark.parametrize("n, devices, ks", [(203, 2, (1, 4)), (25, 4, (3, "auto"))])
def test_one_sided_explicit_equals_numpy_and_auto(name, n, devices, ks):
    kernel, halo, region, bc, step, reference = ONE_SIDED[name]
    x0 = np.random.default_rng(n).random(n)
    mesh = pgas.make_mesh(("x",), devices=devices)
    want = reference(x0, 23)
    for k in ks:
        u = pgas.from_numpy(x0, mesh, boundary=bc)
        out = explicit.run(kernel, u, 23, halo=halo, region=region, steps_per_exchange=k)
        np.testing.assert_array_equal(out.to_numpy(), want, err_msg=f"k = {k}")
    if n == 25:
        auto = pgas.run(step, pgas.from_numpy(x0, mesh, boundary=bc), 23, steps_per_exchange="auto")
        np.testing.assert_array_equal(auto.to_numpy(), want)


def test_one_sided_explicit_frame_keeps_one_side():
    """The frame of ``halo=((1, 0),)`` keeps ``k`` cells below the block and none above."""
    import math
    import re

    kernel, halo, region, bc, _, reference = ONE_SIDED["upwind"]
    x0 = np.random.default_rng(5).random(4097)
    mesh = pgas.make_mesh(("x",), devices=2)
    for k in (1, "auto"):
        u = pgas.from_numpy(x0, mesh, boundary=bc)
        kk = explicit.choose(u, halo, k).steps_per_exchange
        assert (kk == 1) == (k == 1)
        prog = explicit.program(kernel, u.layout, halo, explicit.region_key(region), kk)
        compiled = prog.lower(u.data, jnp.int32(23)).compile()
        hlo = compiled.as_text()
        largest = max(math.prod(int(d) for d in dims.split(","))
                      for dims in re.findall(r"f64\[([\d,]+)\]", hlo))  # fmt: skip
        assert largest == 2049 + kk  # the padded block of 4097 cells on 2 devices, k below
        out = pgas.GlobalArray(compiled(u.data, jnp.int32(23)), u.layout)  # the program read
        np.testing.assert_array_equal(out.to_numpy(), reference(x0, 23), err_msg=f"k = {k}")


def test_one_sided_with_a_field_param_equals_auto():
    """A read-only field in params reaches the kernel with the state's one-sided halo."""
    mesh = pgas.make_mesh(("x",), devices=4)
    rng = np.random.default_rng(3)
    x0, v0 = rng.random(37), 0.2 + 0.5 * rng.random(37)

    def kernel(e, v):  # reads the field at the cell and two below it
        return e[2:] - v[2:] * (e[1:-1] - e[:-2]) * 0.5 - 0.1 * v[:-2] * (e[2:] - e[1:-1])

    def step(u, v):
        u[2:] = kernel(u, v)
        return u

    want = x0.copy()
    for _ in range(23):
        want[2:] = (want[2:] - v0[2:] * (want[1:-1] - want[:-2]) * 0.5
                    - 0.1 * v0[:-2] * (want[2:] - want[1:-1]))  # fmt: skip
    v = pgas.from_numpy(v0, mesh, boundary=pgas.Neumann())
    auto = pgas.run(step, pgas.from_numpy(x0, mesh, boundary=pgas.Neumann()), 23, params=v)
    np.testing.assert_allclose(auto.to_numpy(), want, rtol=1e-12)
    for k in (1, "auto"):  # "auto": 4, deep groups (3 took the same loop, a shorter body)
        u = pgas.from_numpy(x0, mesh, boundary=pgas.Neumann())
        out = explicit.run(kernel, u, 23, halo=((2, 0),), region=(slice(2, None),),
                           steps_per_exchange=k, params=v)  # fmt: skip
        np.testing.assert_array_equal(out.to_numpy(), auto.to_numpy(), err_msg=f"k = {k}")


@pytest.mark.parametrize("name", list(ONE_SIDED))
@pytest.mark.parametrize("k", [1, "auto"])
def test_one_sided_same_collectives_as_auto(name, k):
    kernel, halo, region, bc, step, _ = ONE_SIDED[name]
    # 32 cells: "auto" capped by the blocks of 8 (at 4 for two_below's halo of two); the
    # uncapped 16: test_one_sided_explicit_frame_keeps_one_side
    u = pgas.from_numpy(np.zeros(32), pgas.make_mesh(("x",), devices=4), boundary=bc)
    auto = pgas.comm_report(step, u, loop=True, steps_per_exchange=k)
    expl = explicit.comm_report(kernel, u, halo, region, steps_per_exchange=k, loop=True)
    assert auto.steps_per_exchange == expl.steps_per_exchange
    _same_collectives(auto, expl)
    assert expl.per_exchange("collective-permute") == 1  # one side
    assert expl.ideal_bytes == 8 * max(halo[0])


@pytest.mark.parametrize("shape, names, devices", [((61, 45), ("y", "x"), 4),
                                                   ((40, 33), ("y",), 2)])  # fmt: skip
def test_upwind_2d_explicit(shape, names, devices):
    x0 = np.random.default_rng(5).random(shape)
    mesh = pgas.make_mesh(names, devices=devices)
    halo, region = ((1, 0), (1, 0)), (slice(1, None), slice(1, None))
    want = helpers.upwind2d_numpy(x0, 19)
    for k in (1, 2):  # k > 1: groups of k steps, then single ones ("auto", 8: the same loop)
        u = pgas.from_numpy(x0, mesh, boundary=pgas.Dirichlet(1.0))
        out = explicit.run(_upwind2d_kernel, u, 19, halo=halo, region=region,
                           steps_per_exchange=k)  # fmt: skip
        np.testing.assert_array_equal(out.to_numpy(), want, err_msg=f"k = {k}")
    u = pgas.from_numpy(np.zeros((256, 256)), mesh, boundary=pgas.Dirichlet(1.0))
    for k in (1, 2):  # 2: a deep-halo group as "auto" (8 here) runs, shorter
        auto = pgas.comm_report(stencils.upwind2d, u, loop=True, steps_per_exchange=k)
        expl = explicit.comm_report(_upwind2d_kernel, u, halo, region, steps_per_exchange=k,
                                    loop=True)  # fmt: skip
        _same_collectives(auto, expl)
        assert expl.per_exchange("collective-permute") == len(names)


def test_exchange_halo_per_side():
    x0 = np.arange(12.0)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=3), boundary=pgas.Dirichlet(-1.0))
    spec = u.layout.sharding.spec
    f = shard_map(lambda b: explicit.exchange_halo(b, u.layout, ((2, 1),)), mesh=u.mesh,
                  in_specs=spec, out_specs=spec)  # fmt: skip
    got = np.asarray(jax.jit(f)(u.data)).reshape(3, 7)  # one program, not one per operation
    assert got.tolist() == [[-1, -1, 0, 1, 2, 3, 4], [2, 3, 4, 5, 6, 7, 8],
                            [6, 7, 8, 9, 10, 11, -1]]  # fmt: skip


@pytest.mark.parametrize("halo", [((1, -1),), ((1, 0, 2),), (1.5,), ((1, 0), (1, 0))])
def test_bad_halo_per_side(halo):
    u = pgas.from_numpy(np.zeros(16), pgas.make_mesh(("x",), devices=2))
    with pytest.raises(pgas.errors.HaloError, match=r"halo = .*\(below, above\)"):
        explicit.plan(u, halo)


# ---- numbers read from outside key the programs (issue 32, item 4) ----
def _heat_c(e):
    return e[1:-1] + C * (e[:-2] - 2 * e[1:-1] + e[2:])


def _heat_c_state(e, reduce):
    return {"u": _heat_c(e["u"]), "n": e["n"] + 1}


def _jacobi(e):
    return 0.5 * (e[:-2] + e[2:])


def _jacobi_state(e, reduce):
    u = _jacobi(e["u"])
    return {"u": u, "top": reduce(abs(u), "max")}


def _small(e, reduce):
    return reduce(abs(e[1:-1]), "max") < TOL


def _small_state(e, reduce):
    return e["top"] < TOL


X0 = np.sin(np.linspace(0, np.pi, 24)) ** 2


def _heat_numpy(x, c, steps):
    x = x.copy()
    for _ in range(steps):
        x[1:-1] = x[1:-1] + c * (x[:-2] - 2 * x[1:-1] + x[2:])
    return x


def _jacobi_steps(x, tol, every, max_steps):
    """The steps NumPy's Jacobi iteration takes until max |x[1:-1]| < tol, checked every
    ``every`` steps."""
    x, n = x.copy(), 0
    while n < max_steps:
        for _ in range(every):
            x[1:-1] = 0.5 * (x[:-2] + x[2:])
        n += every
        if np.abs(x[1:-1]).max() < tol:
            break
    return n


def test_run_follows_a_module_level_number(monkeypatch, compiles):
    """A kernel reading a module global runs with its value at the call (it ran with the value
    of the first call: the program was cached per kernel); the same value, the same program.
    k = 1 ("auto" would be one group of all 12 steps: blocks of 12 cells)."""
    mesh = pgas.make_mesh(("x",), devices=2)
    for c in (0.1, 0.3):
        monkeypatch.setattr(HERE, "C", c)
        u = pgas.from_numpy(X0, mesh, boundary=pgas.Keep())
        out = explicit.run(_heat_c, u, 12, steps_per_exchange=1)
        np.testing.assert_allclose(out.to_numpy(), _heat_numpy(X0, c, 12), rtol=1e-13)
        state = {"u": pgas.from_numpy(X0, mesh, boundary=pgas.Keep()), "n": 0}
        out = explicit.run(_heat_c_state, state, 12)
        np.testing.assert_allclose(out["u"].to_numpy(), _heat_numpy(X0, c, 12), rtol=1e-13)
        assert int(out["n"]) == 12
    compiles.clear()
    u = pgas.from_numpy(X0, mesh, boundary=pgas.Keep())
    explicit.run(_heat_c, u, 12, steps_per_exchange=1).to_numpy()
    assert compiles == []  # C unchanged: the program of the last call


def test_run_until_follows_a_module_level_tol(monkeypatch):
    mesh = pgas.make_mesh(("x",), devices=3)
    seen = set()
    for tol in (1e-1, 1e-3):
        monkeypatch.setattr(HERE, "TOL", tol)
        want = _jacobi_steps(X0, tol, 4, 2000)
        u = pgas.from_numpy(X0, mesh, boundary=pgas.Keep())
        out = explicit.run_until(_jacobi, u, _small, 2000, check_every=4, steps_per_exchange=1)
        assert out.converged and out.steps_taken == want, tol
        state = {"u": pgas.from_numpy(X0, mesh, boundary=pgas.Keep()), "top": 1.0}
        out = explicit.run_until(_jacobi_state, state, _small_state, 2000, check_every=4)
        assert out.converged and out.steps_taken == want, tol
        seen.add(want)
    assert len(seen) == 2  # the two tolerances stop at different steps


# ---- one buffer twice among what a program consumes (issue 32) ----
def _halve_both(e, reduce):
    return {"r": 0.5 * e["r"][1:-1], "p": e["p"][1:-1] + 1.0}


def _never(e, reduce):
    return reduce(e["r"][1:-1]) < -1.0


@pytest.mark.parametrize("twice", ["same", "copy"])
def test_a_state_holding_one_array_twice_runs(twice):
    """``{"r": b, "p": b}`` (or ``b.copy()``, the same buffer) made XLA refuse to donate one
    buffer twice, and the process crash; the repeat is copied before donating."""
    x0 = np.arange(8.0)
    mesh = pgas.make_mesh(("x",), devices=2)
    b = pgas.from_numpy(x0, mesh, boundary=pgas.Periodic())
    other = b if twice == "same" else b.copy()
    out = explicit.run(_halve_both, {"r": b, "p": other}, 3)
    np.testing.assert_array_equal(out["r"].to_numpy(), x0 / 8)
    np.testing.assert_array_equal(out["p"].to_numpy(), x0 + 3)
    b = pgas.from_numpy(x0, mesh, boundary=pgas.Periodic())
    other = b if twice == "same" else b.copy()
    with pytest.warns(pgas.NonConvergenceWarning):
        out = explicit.run_until(_halve_both, {"r": b, "p": other}, _never, 3)
    np.testing.assert_array_equal(out.state["r"].to_numpy(), x0 / 8)
    np.testing.assert_array_equal(out.state["p"].to_numpy(), x0 + 3)
    s = jnp.asarray(2.0)  # a scalar twice
    out = explicit.run(lambda e, reduce: {"u": e["u"][1:-1], "a": e["a"] + 1, "b": e["b"] * 2},
                       {"u": pgas.from_numpy(x0, mesh), "a": s, "b": s}, 2)  # fmt: skip
    assert (float(out["a"]), float(out["b"])) == (4.0, 8.0)


def test_a_field_that_is_also_a_param_runs():
    """The donated field given again in params (read, not consumed) crashed the same way.
    One step per exchange and per check ("auto", 4 and 64, would compile a group and a loop
    body that 3 steps never reach)."""
    x0 = np.arange(8.0)
    mesh = pgas.make_mesh(("x",), devices=2)
    b = pgas.from_numpy(x0, mesh, boundary=pgas.Periodic())
    out = explicit.run(lambda e, p: e[1:-1] + p[1:-1], b, 3, steps_per_exchange=1, params=b)
    np.testing.assert_array_equal(out.to_numpy(), 4 * x0)
    b = pgas.from_numpy(x0, mesh, boundary=pgas.Periodic())
    with pytest.warns(pgas.NonConvergenceWarning):
        out = explicit.run_until(lambda e, p: e[1:-1] + p[1:-1], b,
                                 lambda e, p, reduce: reduce(e[1:-1]) < 0, 3, check_every=1,
                                 params=b)  # fmt: skip
    np.testing.assert_array_equal(out.state.to_numpy(), 4 * x0)
    np.testing.assert_array_equal(b.to_numpy(), x0)  # the param is left as it was
