"""The cells a solve works on: unknowns per grid kind, masked fields, inner products."""

import numpy as np
import pytest

import pgas
from pgas.errors import PgasError
from pgas.solvers import fields


def test_unknowns_leave_out_keep_faces_and_products_count_only_them():
    mesh = pgas.make_mesh(("y", "x"), devices=3)
    a = np.arange(30.0).reshape(6, 5)
    u = pgas.from_numpy(a, mesh, boundary=(pgas.Keep(), pgas.Periodic()))
    assert fields.unknowns(u.layout) == (slice(1, -1), slice(None))
    assert fields.grid_kinds(u.layout) == ("keep", "periodic")
    assert float(fields.dot(u, u)) == float((a[1:-1] ** 2).sum())
    m = fields.masked(u, u).to_numpy()
    assert np.array_equal(m[1:-1], a[1:-1]) and not m[[0, -1]].any()
    up = fields.updated(u, 2.0, u).to_numpy()
    assert np.array_equal(up[1:-1], 3 * a[1:-1]) and np.array_equal(up[[0, -1]], a[[0, -1]])


def test_edges_the_solvers_cannot_take_are_named():
    mesh = pgas.make_mesh(devices=1)
    wide = pgas.zeros((9,), mesh, boundary=pgas.Keep(), halo=2).layout
    with pytest.raises(PgasError, match=r"axis 0 keeps 2 edge cells .*halo=None or 1"):
        fields.unknowns(wide)
    mixed = pgas.zeros((9,), mesh, boundary=((pgas.Keep(), pgas.Neumann()),)).layout
    with pytest.raises(PgasError, match=r"axis 0 has faces Keep\(\) and Neumann\(\)"):
        fields.grid_kinds(mixed)
