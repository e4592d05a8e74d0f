"""Shifts of expressions: collapsed into moved windows, bitwise equal to writing them out.

``pgas.shift(rows, 1, 0)`` of an expression is a ``Shifted`` node; the lowering
computes each use from windows moved by the shift. These tests run steps built
of shifted expressions at ``steps_per_exchange`` 1 and at 3 (odd: groups in pairs) or 8 (even;
lowered where the blocks are narrower), or 4 where 8 would fit (the same even loop, a
shorter body), and compare the bits with each other and with NumPy where it is easy. Each
case runs k = 1 and one deep k; each boundary kind, each 1-D and 2-D mesh and each 2-D step
meets both an odd and an even k somewhere in the file (the 3-D box: an even one).
"""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import life_numpy, load_example

import pgas
from pgas.loop.timeloop import program

STEPS = 11
KS = (1, 8)


def _numpy(state):
    if isinstance(state, dict):
        return {name: a.to_numpy() for name, a in state.items()}
    return {"": state.to_numpy()}


def _same_bits_every_way(step, make, steps=STEPS, ks=KS):
    """The final state at k = 1; every k in ``ks`` gives the same bits."""
    ref = _numpy(pgas.run(step, make(), steps, steps_per_exchange=1))
    for k in ks[1:]:
        out = _numpy(pgas.run(step, make(), steps, steps_per_exchange=k))
        for name in ref:
            np.testing.assert_array_equal(out[name], ref[name], err_msg=f"{name} k = {k}")
    return ref


# ---- steps --------------------------------------------------------------------------------
def separable_life(g):
    rows = g + pgas.shift(g, 1, 1) + pgas.shift(g, -1, 1)
    n = rows + pgas.shift(rows, 1, 0) + pgas.shift(rows, -1, 0) - g
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype(g.dtype)
    return g


def nested_1d(u):
    """An expression at three offsets, inside a shift of an expression; where and scalars."""
    a = 0.5 * u + 0.25 * pgas.shift(u, 1)
    b = pgas.shift(0.125 * a + pgas.shift(a, -1), 1) + 0.125 * pgas.shift(a, -1)
    u[...] = pgas.where(b > 0.45, b, 0.875 * b + 0.0625)
    return u


def windows_1d(u):
    """Shifted expressions of windows (``u[:-2] + u[2:]``), assigned to a window."""
    s = u[:-2] + u[2:]
    t = pgas.shift(s, 1) + pgas.shift(s, -1) - s
    u[1:-1] = 0.5 * u[1:-1] + 0.0625 * pgas.shift(t, -1) + 0.125 * s
    return u


def mixed_2d(state):
    """Two arrays, apply and where, a shifted expression used plainly inside another, windows."""
    u, w = state["u"], state["w"]
    rows = u + pgas.shift(u, 1, 1) + 0.5 * pgas.shift(w, -1, 1)
    damp = 0.125 * pgas.apply(jnp.tanh, rows)  # exact products only (module docstring)
    cols = pgas.shift(rows, 1, 0) + pgas.shift(rows, -1, 0) + pgas.shift(pgas.shift(damp, 1, 1),
                                                                         -1, 0)  # fmt: skip
    u[...] = pgas.where(cols > 1.5, 0.25 * cols, 0.5 * u + 0.125 * cols)
    inner = w[1:-1, :-2] + w[1:-1, 2:]
    moved = pgas.shift(inner, 1, 0) + pgas.shift(inner, -1, 0)
    w[1:-1, 1:-1] = 0.5 * w[1:-1, 1:-1] + 0.0625 * moved
    return {"u": u, "w": w}


def box_3d(u):
    """A separable 27-point mean of windows: a line sum, a plane sum of it, a box of that."""
    c = u[1:-1, 1:-1, 1:-1]
    line = c + pgas.shift(c, 1, 2) + pgas.shift(c, -1, 2)
    plane = line + pgas.shift(line, 1, 1) + pgas.shift(line, -1, 1)
    u[1:-1, 1:-1, 1:-1] = 0.25 * c + 0.03125 * (plane + pgas.shift(plane, 1, 0)
                                                + pgas.shift(plane, -1, 0))  # fmt: skip
    return u


# ---- structure ----------------------------------------------------------------------------
def test_a_shifted_expression_is_computed_from_moved_windows():
    shapes = []

    def record(x):
        if jnp.ndim(x):  # not the shape-only trace that makes the expression
            shapes.append(x.shape)
        return x + 1

    x0 = np.arange(12.0)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=2))
    v = pgas.apply(record, u)
    u[...] = v + pgas.shift(v, 1)  # each use computes v on its own moved window
    assert shapes == [(2, 6), (2, 6)]
    np.testing.assert_array_equal(u.to_numpy(), (x0 + 1) + (np.roll(x0, 1) + 1))


def test_separable_life_compiles_to_nine_moved_reads():
    g = pgas.from_numpy(np.zeros((64, 64), np.uint8), pgas.make_mesh(devices=1))
    text = program(separable_life, 1, (1, 1), None, None).advance.lower(g, 2).compile().as_text()
    counts = [len(re.findall(r"slice\(%param", c)) for c in text.split("\n\n")]
    assert max(counts) == 9  # one fusion reads 9 moved windows of the board
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    g = pgas.from_numpy(np.zeros((64, 64), np.uint8), mesh)
    for k, loop in ((1, False), (4, True)):
        report = pgas.comm_report(separable_life, g, steps_per_exchange=k, loop=loop)
        assert report.per_exchange("collective-permute") == 4 and report.gathers == 0
    assert pgas.plan.plan(separable_life, g).widths == (1, 1)


# ---- values -------------------------------------------------------------------------------
# every boundary kind on the uneven 1-D split, two at an even k (nested_1d: 8, lowered to 4)
# and two at an odd one (windows_1d: 3; 8 is lowered to 3 there, the same program); each kind
# meets the other parity on the 2-D meshes below (mixed_2d: all four kinds at k = 3 and 4)
@pytest.mark.parametrize("step, ks, bc", [
    (nested_1d, (1, 8), pgas.Periodic()),
    (nested_1d, (1, 8), pgas.Keep()),
    (windows_1d, (1, 3), pgas.Dirichlet(0.5)),
    (windows_1d, (1, 3), pgas.Neumann()),
], ids=["nested_1d-Periodic", "nested_1d-Keep", "windows_1d-Dirichlet",
        "windows_1d-Neumann"])  # fmt: skip
def test_1d_uneven_every_boundary(step, ks, bc):
    x0 = np.random.default_rng(1).random(37).astype(np.float32)  # 37 cells on 4 devices
    mesh = pgas.make_mesh(("x",), devices=4)
    make = lambda: pgas.from_numpy(x0, mesh, boundary=bc, halo=3)  # noqa: E731
    ref = _same_bits_every_way(step, make, ks=ks)
    if step is nested_1d and isinstance(bc, pgas.Periodic):
        u, roll = x0.copy(), np.roll
        for _ in range(STEPS):
            a = np.float32(0.5) * u + np.float32(0.25) * roll(u, 1)
            b = roll(np.float32(0.125) * a + roll(a, -1), 1) + np.float32(0.125) * roll(a, -1)
            u = np.where(b > 0.45, b, np.float32(0.875) * b + np.float32(0.0625))
        np.testing.assert_array_equal(ref[""], u)


# 2x2: an odd k (3; 8 would be 5); 1x4: an even one (4, lowered to 2 there, as 3 and 8 are)
@pytest.mark.parametrize("mesh_shape, ks", [((2, 2), (1, 3)), ((1, 4), (1, 4))])
def test_2d_two_arrays_where_apply_windows(mesh_shape, ks):
    rng = np.random.default_rng(2)
    u0, w0 = rng.random((19, 23)), rng.random((19, 23))
    mesh = pgas.make_mesh(("y", "x"), shape=mesh_shape, devices=4)

    def make():
        return {"u": pgas.from_numpy(u0, mesh, boundary=[pgas.Neumann(), pgas.Keep()], halo=2),
                "w": pgas.from_numpy(w0, mesh, boundary=[pgas.Dirichlet(0.25), pgas.Periodic()],
                                     halo=2)}  # fmt: skip

    _same_bits_every_way(mixed_2d, make, steps=7, ks=ks)


@pytest.mark.parametrize("mixed", [False, True], ids=["keep", "mixed"])
def test_3d_box_of_windows(mixed):
    x0 = np.random.default_rng(4).random((11, 13, 9))
    mesh = pgas.make_mesh(("z", "y", "x"), shape=(2, 2, 2))
    bcs = [pgas.Keep(), (pgas.Dirichlet(0.5), pgas.Neumann()), pgas.Periodic()] if mixed else (
        pgas.Keep())  # fmt: skip
    # k = 8 is lowered to 4 (blocks of 4 cells along x): a group and a single step, on the
    # mixed faces (Keep among them); odd k (3: groups in pairs, 6 steps) is run by the 1-D and
    # 2-D cases; the Keep box checks k = 1 against NumPy
    ref = _same_bits_every_way(box_3d, lambda: pgas.from_numpy(x0, mesh, boundary=bcs), steps=5,
                               ks=(1, 8) if mixed else (1,))  # fmt: skip
    if not mixed:  # the windows read inside the domain only
        u = x0.copy()
        for _ in range(5):
            line = u[:, :, 1:-1] + u[:, :, :-2] + u[:, :, 2:]
            plane = line[:, 1:-1] + line[:, :-2] + line[:, 2:]
            box = plane[1:-1] + plane[:-2] + plane[2:]
            u[1:-1, 1:-1, 1:-1] = 0.25 * u[1:-1, 1:-1, 1:-1] + 0.03125 * box
        np.testing.assert_array_equal(ref[""], u)


# 2x2: an even k (4); 1x4: an odd one (3), the other way round from the two arrays above
@pytest.mark.parametrize("mesh_shape, bc, ks", [((2, 2), pgas.Periodic(), (1, 4)),
                                                ((1, 4), pgas.Dirichlet(0), (1, 3))],
                         ids=["torus-2x2", "dead_edge-1x4"])  # fmt: skip
def test_separable_life_equals_the_example(mesh_shape, bc, ks):
    life = load_example("life").life  # the 8 shifted boards, summed
    b0 = (np.random.default_rng(3).random((37, 53)) < 0.35).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=mesh_shape, devices=4)
    make = lambda: pgas.from_numpy(b0, mesh, boundary=bc)  # noqa: E731
    steps = 40
    ref = _same_bits_every_way(separable_life, make, steps=steps, ks=ks)
    example = pgas.run(life, make(), steps, steps_per_exchange=1).to_numpy()
    np.testing.assert_array_equal(ref[""], example)
    if isinstance(bc, pgas.Periodic):
        np.testing.assert_array_equal(ref[""], life_numpy(b0, steps))
