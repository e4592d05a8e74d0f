"""How far assigned results reach per side, recorded while a step is traced."""

import numpy as np

import pgas
from pgas.globalview.reach import needs_of, reads_of, record, recording_sides, sides_of


def _mesh():
    return pgas.make_mesh(("x",), devices=2)


def test_the_reach_adds_up_per_side_over_dependent_assignments():
    u = pgas.from_numpy(np.arange(16.0), _mesh())
    with recording_sides():
        u[1:] = u[:-1]  # reads one cell below
        assert sides_of(u.data) == ((1, 0),)
        u[1:] = u[:-1]  # reads the result one cell below again
        assert sides_of(u.data) == ((2, 0),)
        u[:-1] = u[1:]  # and one above
        assert sides_of(u.data) == ((2, 1),)
    assert sides_of(u.data) is None  # the block ended: nothing recorded


def test_two_axes_and_a_window_assigned_pointwise():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    g = pgas.zeros((8, 8), mesh)
    h = pgas.zeros((8, 8), mesh)
    with recording_sides():
        g[1:-1, 1:-1] = g[:-2, 1:-1] + g[1:-1, 2:]
        assert sides_of(g.data) == ((1, 0), (0, 1))
        h[...] = 2.0 * h  # pointwise: no reach
        assert sides_of(h.data) == ((0, 0), (0, 0))


def test_reads_of_follows_results_back_to_the_data_given():
    u = pgas.from_numpy(np.arange(16.0), _mesh())
    v = pgas.from_numpy(np.zeros(16), _mesh())
    u0, v0 = u.data, v.data
    with recording_sides():
        u[1:] = u[:-1]  # u0 one cell below
        v[1:] = v[1:] + u[:-1]  # u's result one cell below: u0 two below
        reads = reads_of(v.data)
        assert reads[id(u0)] == (u0, ((2, 0),))
        assert reads[id(v0)] == (v0, ((0, 0),))
        assert reads[id(v.data)][1] == ((0, 0),)
        assert needs_of({id(u0): "u", id(v0): "v"}, 1) == {"u": ((2, 0),), "v": ((0, 0),)}
    plain = object()
    assert reads_of(plain) == {id(plain): (plain, None)}  # no assignment made it


def test_needs_of_counts_data_assigned_into_a_given_array_for_its_owner():
    u = pgas.from_numpy(np.arange(16.0), _mesh())
    w = pgas.from_numpy(np.zeros(16), _mesh())
    given = u.data
    owners = {id(given): "u", id(u): "u"}
    with recording_sides():
        u[...] = 2.0 * u  # u's new data stands for u from here on
        w[1:] = u[:-1]
        assert needs_of(owners, 1) == {"u": ((1, 0),)}


def test_record_does_nothing_outside_a_recording_block():
    u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    record(u, [], u.data)
    assert sides_of(u.data) is None
