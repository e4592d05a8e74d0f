"""Multigrid solves against a dense NumPy solve (tests/poisson_numpy.py): every grid kind,
2-D and 3-D, constant and variable coefficients, null spaces; cycles that do not grow with
the grid; the compiled program's collectives; a solve inside a step; clear errors."""

import importlib
import re

import numpy as np
import poisson_numpy as ref
import pytest

import pgas
from pgas.errors import PgasError
from pgas.solvers import outer

FACES = {"keep": pgas.Keep(), "periodic": pgas.Periodic(), "neumann": pgas.Neumann()}
COLLECTIVE = re.compile(r"= (\S+) (collective-permute|all-gather|all-reduce|all-to-all)\(")
SPEC = ("z", "y", "x")


def field(a, kinds, devices):
    mesh = pgas.make_mesh(SPEC[-a.ndim :], devices=devices)
    return pgas.from_numpy(a, mesh, boundary=tuple(FACES[k] for k in kinds))


def problem(shape, kinds, coefficient, seed=0):
    """``b``, the coefficient and ``x0`` (boundary values on Keep faces, zero inside)."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(shape)
    if "keep" not in kinds:
        b -= b.mean()  # a consistent right-hand side
    a = 1 + rng.random(shape) if coefficient else None
    x0 = np.zeros(shape)
    edges = np.ones(shape, bool)
    edges[ref.unknowns(kinds)] = False
    x0[edges] = rng.random(edges.sum())
    return b, a, x0


def check_solve(kinds, shape, devices, coefficient, fmg=False):
    """A multigrid solve to 1e-9 against NumPy's dense solve; its cycles."""
    b, a, x0 = problem(shape, kinds, coefficient)
    h = 1.0 / (shape[0] - 1)
    op = pgas.solvers.Poisson(h=h, coefficient=None if a is None else field(a, kinds, devices))
    sol = pgas.solvers.multigrid(op, field(b, kinds, devices), field(x0, kinds, devices),
                                 tol=1e-9, fmg=fmg)  # fmt: skip
    want = ref.solve(b, kinds, h, a, x0)
    x = sol.x.to_numpy()
    assert bool(sol.converged) and float(sol.residual) <= 1e-9
    r = (b - ref.apply(x, kinds, h, a))[ref.unknowns(kinds)]
    assert np.linalg.norm(r) / np.linalg.norm(b[ref.unknowns(kinds)]) == pytest.approx(
        float(sol.residual), rel=1e-4
    )  # what it reports is what NumPy measures
    np.testing.assert_allclose(x, want, atol=1e-7 * abs(want).max())
    edges = np.ones(shape, bool)
    edges[ref.unknowns(kinds)] = False
    assert np.array_equal(x[edges], x0[edges])  # boundary values kept, bit for bit
    return int(sol.iterations)


# the most V-cycles to 1e-9 from a random right-hand side: weighted Jacobi smooths by a factor
# of about 0.23 per V(2, 2) cycle in 2-D and 0.3 in 3-D (docs/solvers.rst). Each grid keeps
# split levels above replicated ones on its mesh: 3-D Keep faces with a coefficient (5 x 5 x 5
# split, 3 x 3 x 3 replicated); periodic and Neumann (the null space) with a coefficient, split
# unevenly on 3 devices ((16, 12) and (8, 6) split, (4, 3) replicated); Neumann and Keep by full
# multigrid on 2 devices ((4, 5) split, (2, 3) replicated). Keep faces without a coefficient on
# a 2 x 2 mesh, on two grids with two and three split levels: the test below. The small grids
# compile smaller programs (a program per level); split-to-split transfers of every grid kind
# meet NumPy in tests/solvers/test_cycle.py too.
@pytest.mark.parametrize("kinds, shape, devices, coefficient, fmg, most", [
    (("keep", "keep", "keep"), (5, 5, 5), 2, True, False, 18),
    (("periodic", "neumann"), (16, 12), 3, True, False, 15),
    (("neumann", "keep"), (4, 5), 2, False, True, 15),
])  # fmt: skip
def test_multigrid_solves_as_numpy_does(kinds, shape, devices, coefficient, fmg, most):
    assert check_solve(kinds, shape, devices, coefficient, fmg) <= most


def test_cycles_do_not_grow_with_the_grid_and_the_solve_sends_halo_sized_permutes():
    """Keep faces on a 2 x 2 mesh, 9 x 9 and 17 x 17 points (3 and 4 levels, the last split
    one 5 x 5 on both): as NumPy solves, in as many cycles give or take one; the compiled
    program of the 17 x 17 solve (the same program, from the solve's own cache) sends
    halo-sized permutes and gathers only the coarse level."""
    cycles = [check_solve(("keep", "keep"), (n, n), 4, False) for n in (9, 17)]
    assert max(cycles) <= 15 and max(cycles) - min(cycles) <= 1, cycles  # grid-independent
    mg = importlib.import_module("pgas.solvers.multigrid")
    b = field(np.zeros((17, 17)), ("keep", "keep"), 4)
    op = pgas.solvers.Poisson(h=1.0 / 16)
    program = outer._compiled(mg._multigrid, (100, False))  # what multigrid() calls
    text = program.lower(op, b, b, 1e-9).compile().as_text()
    found = COLLECTIVE.findall(text)
    kinds = {kind for _, kind in found}
    assert kinds <= {"collective-permute", "all-reduce", "all-gather"}, kinds
    gathers = 0
    for shape, kind in found:
        dims = [int(d) for d in re.findall(r"\d+", shape.split("[")[1].split("]")[0])]
        if kind != "collective-permute":  # scalars, or the last split level (5 x 5) made
            assert np.prod(dims) <= 25, f"{kind} of {shape}: more than the 5 x 5 level"
            gathers += np.prod(dims) > 4  # whole on every device (XLA: an all-reduce)
        else:
            assert min(dims) <= 2, f"a permute of {shape}: more than a halo"
    assert gathers >= 1  # the levels below 5 x 5 run replicated


def test_a_solve_inside_a_step_is_one_program_equal_to_a_python_loop(compiles):
    n = 9  # the eager solves: the program of the 9 x 9 solve above
    mesh = pgas.make_mesh(("y", "x"), devices=4)
    b, _, x0 = problem((n, n), ("keep", "keep"), False, seed=3)
    op = pgas.solvers.Poisson(h=1 / (n - 1))
    bf = pgas.from_numpy(b, mesh, boundary=pgas.Keep())

    def step(x, b):
        x = pgas.solvers.multigrid(op, b, x, tol=1e-6).x
        x[1:-1, 1:-1] = 0.5 * x[1:-1, 1:-1] + 0.1 * b[1:-1, 1:-1]
        return x

    ran = pgas.run(step, pgas.from_numpy(x0, mesh, boundary=pgas.Keep()), 3, params=bf)
    x = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    for i in range(3):
        x = step(x, bf)
        if i == 0:
            compiles.clear()
    assert compiles == []  # the eager solves compiled once
    np.testing.assert_allclose(ran.to_numpy(), x.to_numpy(), rtol=1e-12, atol=1e-14)
    plan = pgas.plan.plan(step, x, params=bf)
    assert plan.steps_per_exchange == 1 and "loop" in plan.note


def test_a_singular_problem_wants_a_consistent_right_hand_side():
    b = field(np.ones((8, 8)), ("periodic", "periodic"), 1)
    with pytest.raises(PgasError, match=r"b sums to 64 .*null space.*subtract its mean"):
        pgas.solvers.multigrid(pgas.solvers.Poisson(), b)


@pytest.mark.parametrize("call, match", [
    (lambda b: pgas.solvers.multigrid(lambda u: u, b), r"op is a function: multigrid solves"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(), b.to_numpy()),
     r"b is a ndarray: give"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(), b, max_cycles=0),
     r"max_cycles = 0: give a whole number >= 1"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(), b, tol=2),
     r"tol = 2: give the relative residual"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(), b, fmg=1), r"fmg = 1: give True"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(h=(1.0,)), b),
     r"h = \(1.0,\) gives 1 spacings for a 2-D field"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(), pgas.from_numpy(
        np.zeros((9, 9)), b.layout.mesh, boundary=pgas.Dirichlet(1.0))),
     r"axis 0 has faces Dirichlet\(value=1.0\).*write the value into its edge cells"),
    (lambda b: pgas.solvers.multigrid(pgas.solvers.Poisson(coefficient=b[::2, ::2]), b),
     r"coefficient has .*give the coefficient as a GlobalArray of the field's layout"),
])  # fmt: skip
def test_bad_inputs_say_what_to_do(call, match):
    b = pgas.from_numpy(np.zeros((9, 9)), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    with pytest.raises(PgasError, match=match):
        call(b)


@pytest.mark.parametrize("kwargs, match", [
    ({"h": 0}, r"h = 0: give the grid spacing"),
    ({"sweeps": (0, 0)}, r"sweeps = \(0, 0\): give"),
    ({"levels": 0}, r"levels = 0: give a whole number >= 1"),
])  # fmt: skip
def test_bad_settings_say_what_to_do(kwargs, match):
    with pytest.raises(PgasError, match=match):
        pgas.solvers.Poisson(**kwargs)


def test_more_levels_than_the_grid_has_are_refused():
    b = pgas.zeros((17, 17), pgas.make_mesh(("y", "x"), devices=4), dtype=np.float64,
                   boundary=pgas.Keep())  # fmt: skip
    with pytest.raises(PgasError, match=r"levels = 5: the grid has only 4 level\(s\) "
                                        r"\(17 x 17 -> 9 x 9 -> 5 x 5 -> 3 x 3;"):  # fmt: skip
        pgas.solvers.multigrid(pgas.solvers.Poisson(levels=5), b)
