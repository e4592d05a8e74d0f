"""Halo slabs of several fields in one message: the same cells as one message a field."""

import re

import jax
import numpy as np

import pgas
from pgas.globalview.halo import extend, global_transport
from pgas.globalview.messages import together


def _extending(arrays, axis, width):
    def run(i, move):
        g = arrays[i]
        lay = g.layout
        return extend(lay.to_blocks(g.data), axis, width, lay.axes[axis], lay.boundary[axis],
                      lay.block_iota(axis), move)  # fmt: skip

    return run


def test_fields_of_one_layout_travel_in_one_message_and_keep_their_own_faces():
    mesh = pgas.make_mesh(("x",), devices=3)  # blocks of 4, 4 and 3
    rng = np.random.default_rng(0)
    arrays = [pgas.from_numpy(rng.random(11), mesh, boundary=pgas.Dirichlet(7.0)),
              pgas.from_numpy(rng.random(11), mesh, boundary=pgas.Neumann()),
              pgas.from_numpy(rng.random(11).astype(np.float32), mesh)]  # fmt: skip
    run = _extending(arrays, 0, (2, 1))
    joined = jax.jit(lambda: together([0, 1, 2], [a.layout for a in arrays], 0, None, run))
    got = joined()
    for i, a in enumerate(arrays):  # each as extended alone, with its own ghosts
        np.testing.assert_array_equal(got[i], run(i, None), err_msg=str(i))
    # the two float64 fields: one message a side (2 + 2 cells below, 1 + 1 above); the
    # float32 one alone (2, 1)
    shapes = re.findall(r"= (\w+\[[\d,]*\])\S* collective-permute\(",
                        joined.lower().compile().as_text())  # fmt: skip
    assert sorted(shapes) == sorted(["f64[1,4]", "f64[1,2]", "f32[1,2]", "f32[1,1]"]), shapes


def test_a_field_alone_uses_the_transport_as_it_is_and_moves_are_asked_once_a_message():
    mesh = pgas.make_mesh(("x",), devices=2)
    arrays = [pgas.from_numpy(np.arange(8.0) + 10 * i, mesh) for i in range(3)]
    asked = []

    def moves(axis, periodic):
        asked.append((axis, periodic))
        return global_transport(2 * axis, periodic)

    out = together([0, 1, 2], [a.layout for a in arrays], 0, moves, _extending(arrays, 0, 1))
    assert asked == [(0, True)]  # three periodic float64 fields: one transport, 2 messages
    np.testing.assert_array_equal(out[2][1], [23.0, 24.0, 25.0, 26.0, 27.0, 20.0])
    alone = together([1], [arrays[1].layout], 0, moves, _extending(arrays, 0, 1))
    assert asked == [(0, True)] * 2
    np.testing.assert_array_equal(alone[1], out[1])
