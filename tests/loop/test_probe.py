"""The reach of a step, measured on the widest deep-halo frames that hold it."""

import numpy as np

import pgas
from pgas.loop.probe import measure_reach


def _line(n: int = 32, devices: int = 2, **kw):
    return pgas.from_numpy(np.linspace(0.0, 1.0, n), pgas.make_mesh(("x",), devices=devices), **kw)


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def test_a_symmetric_stencil_on_the_widest_frame():
    widths, size, why, sides, fields = measure_reach(heat, _line(), (16,))
    assert (widths, size, why, sides) == ([1], (16,), "", None)  # symmetric: no sides
    assert fields == ((((1, 1),),), ())


def test_dependent_assignments_add_up_and_sides_are_kept_apart():
    def twice(u):
        return heat(heat(u))

    assert measure_reach(twice, _line(), (16,))[0] == [2]
    g = pgas.zeros((16, 16), pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4))

    def upwind_y(g):
        g[1:, :] = g[1:, :] - 0.5 * (g[1:, :] - g[:-1, :])
        return g

    widths, _, _, sides, fields = measure_reach(upwind_y, g, (8, 8))
    assert widths == [1, 0] and sides == ((1, 0), (0, 0))
    assert fields == ((((1, 0), (0, 0)),), ())


def test_each_field_and_parameter_by_its_own_reach():
    u, v, c = _line(), _line(), _line()

    def step(s, c):
        u, v = s
        v[...] = v + u  # v read at no offset
        u[1:] = u[1:] + c[:-1]  # c, a parameter, one cell below
        return u, v

    *_, fields = measure_reach(step, (u, v), (16,), c)
    assert fields == ((((0, 0),), ((0, 0),)), (((1, 0),),))


def test_a_constant_read_across_the_axis_narrows_the_frames_and_says_why():
    c = _line(64, 4)

    def step(u):
        u[...] = 0.5 * u + 0.25 * (pgas.shift(c, 1) + pgas.shift(c, -1))
        return u

    widths, size, why, _, _ = measure_reach(step, _line(64, 4), (16,))
    assert widths == [0] and size == (8,)  # the constant reads 1 + 8 cells of a 16-cell block
    assert "deep-halo frames would need 17 halo cells on axis 0" in why


def test_a_step_no_frame_holds():
    c = _line(boundary=pgas.Neumann())

    def step(u):
        u[...] = 0.5 * u + 0.25 * pgas.shift(c, 1) + 0.25 * pgas.shift(u, 1)
        u[...] = 0.5 * u + 0.25 * pgas.shift(u, -1)
        return u

    widths, size, why, sides, fields = measure_reach(step, _line(boundary=pgas.Periodic()), (16,))
    assert (widths, size, sides, fields) == (None, None, None, None)
    assert why.startswith("a periodic array reads a non-periodic one across axis 0")
