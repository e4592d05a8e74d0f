"""2-D nine-point stencils: Game of Life on a torus and with fixed edges."""

import numpy as np
import pytest
from helpers import life_numpy
from stencils import life, life_torus

import pgas


# even blocks (32x16) and uneven ones (19/18 rows, 8/7 columns)
@pytest.mark.parametrize("shape", [(64, 64), (37, 29)])
def test_life_torus_2x4_mesh(shape):
    b0 = (np.random.default_rng(3).random(shape) < 0.35).astype(np.uint8)
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 4))
    g = pgas.from_numpy(b0, mesh, boundary=pgas.Periodic())
    report = pgas.comm_report(life_torus, g)
    assert report.count("all-gather") == 0 and report.gathers == 0
    assert report.per_exchange("collective-permute") == 4  # two-phase: rows, then columns
    assert report.ratio == 1.0
    np.testing.assert_array_equal(pgas.run(life_torus, g, 12).to_numpy(), life_numpy(b0, 12))


def test_life_slices_with_fixed_edges():
    b0 = (np.random.default_rng(4).random((24, 30)) < 0.4).astype(np.uint8)  # blocks of 6x15
    ref = b0.copy()
    for _ in range(9):
        n = sum(ref[1 + dy : 23 + dy, 1 + dx : 29 + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                if (dy, dx) != (0, 0))  # fmt: skip
        c = ref[1:-1, 1:-1]
        ref[1:-1, 1:-1] = ((n == 3) | ((c == 1) & (n == 2))).astype(np.uint8)
    g = pgas.from_numpy(b0, pgas.make_mesh(("y", "x"), shape=(4, 2)))
    np.testing.assert_array_equal(pgas.run(life, g, 9).to_numpy(), ref)
    assert pgas.comm_report(life, g).per_exchange("collective-permute") == 4


@pytest.mark.parametrize("mesh_shape, spec", [((8,), ("x", None)), ((8,), (None, "x")),
                                              ((1, 2), None), ((2, 1), None)])  # fmt: skip
def test_life_on_1d_meshes_and_small_periodic_axes(mesh_shape, spec):
    b0 = (np.random.default_rng(5).random((40, 36)) < 0.4).astype(np.uint8)
    names = ("x",) if len(mesh_shape) == 1 else ("y", "x")
    mesh = pgas.make_mesh(names, shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    g = pgas.from_numpy(b0, mesh, spec=spec)
    np.testing.assert_array_equal(pgas.run(life_torus, g, 6).to_numpy(), life_numpy(b0, 6))
    assert pgas.comm_report(life_torus, g).gathers == 0


def test_population_is_one_all_reduce():
    b0 = (np.random.default_rng(6).random((301, 257)) < 0.5).astype(np.uint8)
    g = pgas.from_numpy(b0, pgas.make_mesh(("y", "x"), shape=(2, 4)))
    assert int(pgas.sum(g)) == int(b0.sum())
    report = pgas.comm_report(pgas.sum, g)
    assert report.count("all-reduce") == 1 and report.gathers == 0
    assert report.bytes("all-reduce") <= 8
