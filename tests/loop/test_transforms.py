"""pgas.run inside JAX: grad, jvp and vmap; params; reductions of expressions (jit:
test_traced.py).

Gradients are checked against adjoints written here by hand (the transposed
stencil) for linear stencils, and against central differences in float64 for
nonlinear ones; the gradient program's collectives are read from its HLO.
"""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import heat_adjoint, heat_numpy
from stencils import heat

import pgas
from pgas.errors import PgasError

ROOT = Path(__file__).resolve().parents[2]
COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")


def collectives(hlo: str) -> set[tuple[str, str]]:
    """(kind, operand shape) of every collective in compiled HLO text."""
    return {(kind, shape) for shape, kind in COLLECTIVE.findall(hlo)}


def shifted_heat(u, c=0.125):
    """A whole-array 5-point (2-D) or 3-point (1-D) stencil that reads across every face."""
    s = sum(pgas.shift(u, o, a) for a in range(u.ndim) for o in (1, -1))
    u[...] = (1 - 2 * u.ndim * c) * u + c * s
    return u


def shift_adjoint(g: np.ndarray, offset: int, axis: int, bc) -> np.ndarray:
    """The transpose of ``pgas.shift(., offset, axis)`` (offset +-1) under boundary ``bc``."""
    g = np.moveaxis(g, axis, 0)
    out = np.zeros_like(g)
    if offset == 1:  # reads u[i - 1]; cell 0 reads the low ghost
        out[:-1] = g[1:]
        edge, ghost_of = g[0], -1 if isinstance(bc, pgas.Periodic) else 0
    else:
        out[1:] = g[:-1]
        edge, ghost_of = g[-1], 0 if isinstance(bc, pgas.Periodic) else -1
    if not isinstance(bc, pgas.Dirichlet):  # Dirichlet ghosts are constants
        out[ghost_of] += edge
    return np.moveaxis(out, 0, axis)


def shifted_heat_adjoint(g: np.ndarray, bc, steps: int, c=0.125) -> np.ndarray:
    for _ in range(steps):
        s = sum(shift_adjoint(g, o, a, bc) for a in range(g.ndim) for o in (1, -1))
        g = (1 - 2 * g.ndim * c) * g + c * s
    return g


# ---- 1. reverse mode ---------------------------------------------------------------------
CASES = [  # shape, mesh shape, boundary, deep-halo k (each kind and each class of mesh; Neumann
    # on 17 cells over 3 devices took the paths of Dirichlet there and of Neumann on 2 x 2)
    ((17,), (1,), pgas.Periodic(), "auto"),
    # blocks 6, 6, 5: an odd k, groups in pairs (auto's is 5)
    ((17,), (3,), pgas.Dirichlet(1.0), 3),
    # blocks 7 or 6 by 6: an even k (auto's is 6)
    ((13, 12), (2, 2), pgas.Periodic(), 2),
    ((13, 12), (2, 2), pgas.Neumann(), 2),
]


@pytest.mark.parametrize("shape,parts,bc,deep", CASES, ids=str)
def test_gradient_is_the_transposed_stencil(shape, parts, bc, deep):
    names = ("y", "x")[-len(shape) :]
    mesh = pgas.make_mesh(names, shape=parts, devices=math.prod(parts))
    rng = np.random.default_rng(1)
    x0, w = rng.random(shape), rng.random(shape)
    weight = pgas.from_numpy(w, mesh, boundary=bc)
    want = shifted_heat_adjoint(w, bc, 13)
    for k, remat in ((1, 2), (deep, "auto")):  # k = 1 in segments of 2 steps; deep halos

        def loss(u, k=k, remat=remat):
            out = pgas.run(shifted_heat, u, 13, steps_per_exchange=k, remat_every=remat)
            return pgas.sum(weight * out)

        u = pgas.from_numpy(x0, mesh, boundary=bc)
        grad = jax.jit(jax.grad(loss)).lower(u).compile()
        np.testing.assert_allclose(grad(u).to_numpy(), want, rtol=1e-12, atol=1e-14)
        hlo = grad.as_text()
        kinds = collectives(hlo)
        assert not any(kind in ("all-gather", "all-to-all") for kind, _ in kinds), kinds
        assert all(shape.split("[")[1] == "]" for kind, shape in kinds if kind == "all-reduce")
        if math.prod(parts) > 1:
            assert any(kind == "collective-permute" for kind, _ in kinds)


def test_gradient_of_the_seed_heat_step_with_keep_ends_and_deep_halos():
    x0 = np.random.default_rng(2).random(203)
    mesh = pgas.make_mesh(("x",), devices=4)
    # deep halos at k = 4: 10 groups (an even k, as auto's k = 16 on blocks of 51 and 50)
    loss = lambda u: pgas.sum(pgas.run(heat, u, 40, steps_per_exchange=4) ** 2)  # noqa: E731
    # under jax.jit: one program (an eager gradient: tests/loop/test_derivative.py)
    g = jax.jit(jax.grad(loss))(pgas.from_numpy(x0, mesh, boundary=pgas.Keep())).to_numpy()
    np.testing.assert_allclose(g, heat_adjoint(2 * heat_numpy(x0, 40), 40), rtol=1e-12)


def _nonlinear(u, p):
    u[1:-1] = u[1:-1] + p["c"] * (u[:-2] + u[2:] - 2 * u[1:-1]) - 0.1 * u[1:-1] ** 3
    return u


def test_gradient_of_a_nonlinear_step_against_central_differences():
    """With respect to the state and to params (a scalar), 1-D on 3 devices, Neumann faces."""
    rng = np.random.default_rng(3)
    x0, d = rng.random(13), rng.standard_normal(13)  # blocks 5, 4, 4
    mesh = pgas.make_mesh(("x",), devices=3)

    def field(x):
        return pgas.from_numpy(x, mesh, boundary=pgas.Neumann())

    for k in (1, 2):  # k = 2: 8 groups and a step (an even k, as auto's k = 4 here)

        @jax.jit
        def loss(u, c, k=k):
            out = pgas.run(_nonlinear, u, 17, params={"c": c}, steps_per_exchange=k)
            return pgas.sum(out * out)

        gu, gc = jax.jit(jax.grad(loss, argnums=(0, 1)))(field(x0), 0.2)
        eps = 1e-6
        value = lambda x, c: float(loss(field(x), c))  # noqa: E731  (differenced on the host)
        fd = (value(x0 + eps * d, 0.2) - value(x0 - eps * d, 0.2)) / (2 * eps)
        np.testing.assert_allclose(np.sum(gu.to_numpy() * d), fd, rtol=1e-7)
        fd_c = (value(x0, 0.2 + eps) - value(x0, 0.2 - eps)) / (2 * eps)
        np.testing.assert_allclose(gc, fd_c, rtol=1e-7)


def _variable(u, kappa):
    n = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    u[1:-1, 1:-1] = u[1:-1, 1:-1] + kappa[1:-1, 1:-1] * n - 0.05 * u[1:-1, 1:-1] ** 2
    return u


def test_gradient_with_respect_to_a_coefficient_field():
    rng = np.random.default_rng(4)
    x0, k0, d = rng.random((14, 13)), 0.05 + 0.1 * rng.random((14, 13)), rng.random((14, 13))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())

    @jax.jit
    def loss(kappa):  # inside jit, run inlines its loop and donates nothing
        # deep halos at k = 2: 4 groups and a step (an even k, as auto's k = 6 here)
        return pgas.sum(pgas.run(_variable, u, 9, params=kappa, steps_per_exchange=2) ** 2)

    g = jax.jit(jax.grad(loss))(pgas.from_numpy(k0, mesh)).to_numpy()
    eps = 1e-6
    value = lambda k: float(loss(pgas.from_numpy(k, mesh)))  # noqa: E731  (differenced on the host)
    fd = value(k0 + eps * d) - value(k0 - eps * d)
    np.testing.assert_allclose(np.sum(g * d), fd / (2 * eps), rtol=1e-7)


# ---- 2. forward mode and vmap ------------------------------------------------------------
def test_jvp_and_vmap_over_params():
    x0 = np.random.default_rng(5).random(50)
    mesh = pgas.make_mesh(("x",), devices=2)

    def make():
        return pgas.from_numpy(x0, mesh, boundary=pgas.Keep())

    _, tangent = jax.jvp(lambda u: pgas.run(heat, u, 9), (make(),), (make(),))
    np.testing.assert_array_equal(tangent.to_numpy(), heat_numpy(x0, 9))  # linear: A t = A x0

    def step(u, c):
        u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
        return u

    cs = jnp.array([0.05, 0.1, 0.2, 0.25])
    # under jit: one program (eagerly, every batched operation compiles; the subprocess below
    # runs it eagerly)
    batch = jax.jit(jax.vmap(lambda c: pgas.run(step, make(), 11, params=c).data))(cs)
    # the call alone at k = 1 (auto's k = 16 on blocks of 25 exceeds the 11 steps: its group
    # would be compiled and never run; any k gives k = 1's bits)
    for i, c in enumerate(cs):  # XLA contracts another multiply-add when batched: an ulp
        alone = pgas.run(step, make(), 11, params=c, steps_per_exchange=1)
        np.testing.assert_allclose(batch[i], alone.data, rtol=4e-16, atol=0)
    with pytest.raises(PgasError, match=r"vmap over a GlobalArray's axes .*spec=\(None, 'x'\)"):
        jax.vmap(lambda u: pgas.run(heat, u, 3))(make())


VMAP_WITHOUT_FMA = """
import jax, jax.numpy as jnp, numpy as np, pgas
pgas.use_cpu_devices(2)
jax.config.update("jax_enable_x64", True)
x0 = np.random.default_rng(5).random(50)
u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=2), boundary=pgas.Keep())

def step(u, c):
    u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
    return u

cs = jnp.array([0.05, 0.1, 0.2, 0.25])
batch = jax.vmap(lambda c: pgas.run(step, u, 11, params=c).data)(cs)
one = jax.jit(lambda c: pgas.run(step, u, 11, params=c).data)
for i, c in enumerate(np.asarray(cs)):
    want = x0.copy()
    for _ in range(11):
        want[1:-1] = (1 - 2 * c) * want[1:-1] + c * (want[:-2] + want[2:])
    for got in (batch[i], one(c), pgas.run(step, u, 11, params=c).data):
        np.testing.assert_array_equal(np.asarray(got), want)
"""


@pytest.mark.one_process
def test_vmap_over_params_is_a_loop_bitwise_without_fused_multiply_adds():
    """The ulp above is XLA's CPU backend contracting a multiply-add (FMA) in one program
    and another in the next: with FMA instructions off (``--xla_cpu_max_isa=AVX``), vmap,
    jit and the standalone call all give NumPy's bits."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS="--xla_cpu_max_isa=AVX", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", VMAP_WITHOUT_FMA], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


# ---- 3. params ---------------------------------------------------------------------------
def test_new_params_reuse_the_compiled_program(compiles):
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    rng = np.random.default_rng(6)
    x0, k0 = rng.random((14, 11)), 0.05 + 0.1 * rng.random((14, 11))

    def numpy_run(k, steps):
        u = x0.copy()
        for _ in range(steps):
            n = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
            u[1:-1, 1:-1] = u[1:-1, 1:-1] + k[1:-1, 1:-1] * n - 0.05 * u[1:-1, 1:-1] ** 2
        return u

    def run(k):  # deep halos at k = 3: groups in pairs (an odd k, as auto's k = 5 here)
        u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
        kappa = pgas.from_numpy(k, mesh)
        return pgas.run(_variable, u, 12, params=kappa, steps_per_exchange=3).to_numpy()

    first = run(k0)
    compiles.clear()
    second = run(0.5 * k0)
    assert compiles == []  # from_numpy, the loop, to_numpy: nothing compiled
    np.testing.assert_allclose(first, numpy_run(k0, 12), rtol=1e-13)
    np.testing.assert_allclose(second, numpy_run(0.5 * k0, 12), rtol=1e-13)
    # the same field from the enclosing scope, bitwise params':
    # test_a_field_of_the_enclosing_scope_is_exchanged_once_like_a_param
    kappa = pgas.from_numpy(k0, mesh)
    report = pgas.comm_report(_variable, pgas.from_numpy(x0, mesh), params=kappa)
    assert round(report.ratio, 2) == 1.0 and report.count("all-gather") == 0


def test_a_rebound_array_of_the_enclosing_scope_is_never_stale():
    mesh = pgas.make_mesh(("x",), devices=2)
    x0 = np.random.default_rng(7).random(40)
    kappa = pgas.from_numpy(np.full(40, 0.1), mesh)

    def diffuse(u):
        u[1:-1] = u[1:-1] + kappa[1:-1] * (u[:-2] + u[2:] - 2 * u[1:-1])
        return u

    def numpy_run(k):
        u = x0.copy()
        for _ in range(6):
            u[1:-1] = u[1:-1] + k * (u[:-2] + u[2:] - 2 * u[1:-1])
        return u

    # deep halos at k = 2: 3 groups (auto's k = 16 on blocks of 20 exceeds the 6 steps)
    first = pgas.run(diffuse, pgas.from_numpy(x0, mesh), 6, steps_per_exchange=2).to_numpy()
    kappa = pgas.from_numpy(np.full(40, 0.2), mesh)
    second = pgas.run(diffuse, pgas.from_numpy(x0, mesh), 6, steps_per_exchange=2).to_numpy()
    np.testing.assert_allclose(first, numpy_run(0.1), rtol=1e-13)
    np.testing.assert_allclose(second, numpy_run(0.2), rtol=1e-13)


def test_bad_inputs_under_a_trace_and_in_params():
    mesh = pgas.make_mesh(("x",), devices=2)
    u = pgas.from_numpy(np.zeros(16), mesh)
    with pytest.raises(PgasError, match=r"params\['dt'\] is a str \('0.1'\).*functools.partial"):
        pgas.run(lambda u, p: u, u, 2, params={"dt": "0.1"})
    with pytest.raises(PgasError, match="remat_every = 0: give a whole number >= 1"):
        pgas.run(heat, u, 2, remat_every=0)
    with pytest.raises(PgasError, match="steps is a traced value; snapshot_every and chunk"):
        jax.jit(lambda u, n: pgas.run(heat, u, n, snapshot_every=2))(u, 4)


# ---- 4. reductions of expressions --------------------------------------------------------
def test_reductions_of_expressions_are_one_scalar_all_reduce():
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((13, 7)), rng.standard_normal((13, 7))
    mesh = pgas.make_mesh(("y", "x"), shape=(4, 2), devices=8)
    u = pgas.from_numpy(x, mesh, boundary=pgas.Keep())
    v = pgas.from_numpy(y, mesh)
    np.testing.assert_allclose(float(pgas.sum(u * u)), np.sum(x * x), rtol=1e-12)  # eagerly
    diff = np.abs(x[1:-1] - y[1:-1])
    high = jax.jit(lambda u, v: pgas.max(abs(u[1:-1] - v[1:-1]))).lower(u, v).compile()
    assert float(high(u, v)) == diff.max()

    def others(u, v):  # under jax.jit: one program (eagerly, every operation compiles)
        return (pgas.min(abs(u[1:-1] - v[1:-1])), pgas.mean(u[:, 2:] - u[:, :-2]),
                pgas.sum(pgas.shift(u, 1, 0) * v))  # fmt: skip

    low, mean, shifted = jax.jit(others)(u, v)
    assert float(low) == diff.min()
    np.testing.assert_allclose(float(mean), np.mean(x[:, 2:] - x[:, :-2]), rtol=1e-12)
    # a Keep array read across its face: the ghost row mirrors row 0
    np.testing.assert_allclose(float(shifted), np.sum(np.vstack([x[:1], x[:-1]]) * y), rtol=1e-12)
    hlo = high.as_text()
    kinds = collectives(hlo)
    assert [kind for kind, _ in kinds] == ["all-reduce"] and hlo.count("all-reduce(") == 1


def permutes_per_computation(hlo: str) -> dict[str, int]:
    """Collective-permutes in each computation of compiled HLO text (``ENTRY``: outside loops)."""
    counts = {}
    for comp in hlo.split("\n\n"):
        head = comp.strip().split("\n")[0].split(" (")[0]
        n = len(re.findall(r"= \S+ collective-permute\(", comp))
        if n:
            counts["ENTRY" if head.startswith("ENTRY") else head] = n
    return counts


def test_explicit_run_takes_the_params_of_run_until_without_compiling(compiles):
    """A scalar and a read-only field: bitwise the automatic path's, the field's halo
    exchanged once per run (outside the loop), a new value runs the compiled program."""
    from pgas.references import explicit

    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    rng = np.random.default_rng(9)
    # blocks 7 by 4 or 3: auto is k = 3, odd (the automatic path's groups run in pairs)
    x0, k0 = rng.random((14, 7)), 0.05 + 0.1 * rng.random((14, 7))
    inner = (slice(1, -1), slice(1, -1))

    def kernel(e, p):
        n = e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:] - 4 * e[1:-1, 1:-1]
        return e[1:-1, 1:-1] + p["k"][1:-1, 1:-1] * n - p["c"] * e[1:-1, 1:-1] ** 2

    def step(u, p):
        u[inner] = kernel(u, p)
        return u

    def numpy_run(k, c, steps=12):
        u = x0.copy()
        for _ in range(steps):
            n = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
            u[1:-1, 1:-1] = u[1:-1, 1:-1] + k[1:-1, 1:-1] * n - c * u[1:-1, 1:-1] ** 2
        return u

    def make():
        return pgas.from_numpy(x0, mesh, boundary=pgas.Keep())

    for k in (1, 3, "auto"):
        p = {"c": 0.05, "k": pgas.from_numpy(k0, mesh)}
        out = explicit.run(kernel, make(), 12, region=inner, steps_per_exchange=k, params=p)
        auto = pgas.run(step, make(), 12, params=p).to_numpy()
        np.testing.assert_array_equal(out.to_numpy(), auto)
        np.testing.assert_allclose(auto, numpy_run(k0, 0.05), rtol=1e-13)
    compiles.clear()
    p = {"c": 0.02, "k": pgas.from_numpy(0.5 * k0, mesh)}
    out = explicit.run(kernel, make(), 12, region=inner, params=p).to_numpy()
    assert compiles == []  # from_numpy, the loop, to_numpy: nothing compiled
    np.testing.assert_allclose(out, numpy_run(0.5 * k0, 0.02), rtol=1e-13)

    u, key = make(), explicit.region_key(inner)
    tree, leaves, fields = explicit.params.split_params(p, u.layout)
    # k = 3: the program run above (auto chose it too; the kernel reads no outside numbers)
    hlo = explicit.program(kernel, u.layout, (1, 1), key, 3, tree, fields, reads=()).lower(
        u.data, jnp.int32(12), *leaves).compile().as_text()  # fmt: skip
    tree, leaves, fields = explicit.params.split_params(
        {"c": 0.05, "k": jnp.full((3, 3), 0.1)}, u.layout
    )
    scalars = explicit.program(kernel, u.layout, (1, 1), key, 3, tree, fields).lower(
        u.data, jnp.int32(12), *leaves).compile().as_text()  # fmt: skip
    field, alone = permutes_per_computation(hlo), permutes_per_computation(scalars)
    assert field.pop("ENTRY") == 4  # the field: one exchange, 2 axes x 2 directions, once
    assert sorted(field.values()) == sorted(alone.values()) and "ENTRY" not in alone
    other = pgas.from_numpy(k0, pgas.make_mesh(("y", "x"), shape=(4, 1), devices=4))
    with pytest.raises(PgasError, match=r"params\['k'\] has shape .* split like the state"):
        explicit.run(kernel, make(), 2, params={"c": 0.1, "k": other})


def test_a_field_of_the_enclosing_scope_is_exchanged_once_like_a_param():
    """run_until's while loop and run's loop hold the same collectives whether the step takes
    its coefficient field from params or from the enclosing scope: both are extended once,
    before the loop (the closure's field was extended again at every check)."""
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    rng = np.random.default_rng(8)
    x0, k0 = rng.random((11, 10)), 0.05 + 0.1 * rng.random((11, 10))  # blocks 6 or 5 by 5
    kappa = pgas.from_numpy(k0, mesh)

    def make():
        return pgas.from_numpy(x0, mesh, boundary=pgas.Keep())

    def converged(u, *_):
        return pgas.max(abs(u)) < -1.0  # never: the loop runs max_steps

    def programs(step, params):  # deep halos at k = 2 (double-buffered)
        def until(u):
            return pgas.run_until(step, u, converged, 16, check_every=8, params=params,
                                  steps_per_exchange=2).state.data  # fmt: skip

        def run(u):
            return pgas.run(step, u, 16, params=params, steps_per_exchange=2).data

        return [jax.jit(f).lower(make()).compile() for f in (until, run)]

    closure = programs(lambda u: _variable(u, kappa), None)
    given = programs(_variable, kappa)
    count = re.compile(r"= \S+ collective-permute\(")
    for a, b in zip(closure, given):
        assert len(count.findall(a.as_text())) == len(count.findall(b.as_text()))
    # the programs' answers: the closure's, bitwise the params' (a closure run eagerly:
    # test_a_rebound_array_of_the_enclosing_scope_is_never_stale, tests/loop/test_outside.py)
    want = np.asarray(given[1](make()))
    for prog in (*closure, given[0]):
        np.testing.assert_array_equal(np.asarray(prog(make())), want)


def test_a_step_may_capture_stacked_snapshots():
    """Only plain fields of the enclosing scope are extended for the loop: a step that reads
    the shape of stacked snapshots (not a field to extend) runs as it did."""
    mesh = pgas.make_mesh(("x",), devices=2)
    x0 = np.arange(16.0, dtype=np.float32)
    _, snaps = pgas.run(heat, pgas.from_numpy(x0, mesh), 4, snapshot_every=2)

    def step(u):
        return heat(u) if snaps.shape[0] == 2 else u

    out = pgas.run(step, pgas.from_numpy(x0, mesh), 4, steps_per_exchange=2)
    np.testing.assert_array_equal(out.to_numpy(), heat_numpy(x0, 4))
