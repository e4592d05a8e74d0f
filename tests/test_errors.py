"""Every bad input: a clear error naming the parameter, the value and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pgas


@pytest.fixture
def u():
    return pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(("x",)))


def test_unknown_mesh_axis():
    with pytest.raises(pgas.MeshError, match="'data'.*mesh has axes \\('x',\\)"):
        pgas.zeros((8,), pgas.make_mesh(("x",)), spec=("data",))


def test_halo_wider_than_block():
    u = pgas.from_numpy(np.zeros(16, np.float32), pgas.make_mesh(("x",)))  # 2 cells a block

    def wide(u):
        u[3:-3] = u[:-6] + u[6:]
        return u

    with pytest.raises(pgas.HaloError, match="halo width 3 on axis 0 is wider than the smallest"):
        pgas.comm_report(wide, u)
    with pytest.raises(pgas.HaloError, match="wider than the smallest local block"):
        pgas.zeros((16,), pgas.make_mesh(("x",)), halo=3)


def test_stencil_wider_than_declared_halo():
    u = pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(("x",)), halo=1)
    with pytest.raises(pgas.HaloError, match="declares halo=1.*declare halo=2"):
        u[2:-2] = u[:-4] + u[4:]


def test_step_slices(u):  # positive steps read and write: tests/globalview/test_strided.py
    with pytest.raises(pgas.IndexingError, match="step = -2: pgas slices with steps >= 1"):
        u[::-2]


def test_dynamic_bounds(u):
    def step(u, i):
        return u[i:]

    with pytest.raises(pgas.IndexingError, match="static Python integers"):
        jax.jit(step)(u, 3)


def test_fancy_indexing(u):
    with pytest.raises(pgas.IndexingError, match="index arrays"):
        u[np.array([1, 2])]
    with pytest.raises(pgas.IndexingError, match="index arrays"):
        u[[1, 2]]


def test_dtype_mismatch():
    g = pgas.zeros((8, 8), pgas.make_mesh(("y", "x"), devices=4), dtype=np.uint8)
    with pytest.raises(pgas.DTypeMismatchError, match="float(32|64) values to a uint8.*astype"):
        g[1:-1, 1:-1] = 0.5 * g[1:-1, 1:-1]

    def fits(g):  # Python ints fit: fine
        g[1:-1, 1:-1] = pgas.where(g[1:-1, 1:-1] > 0, 1, 0)
        return g

    # under jax.jit, one program (run eagerly, every operation compiled on its own: 30)
    assert jax.jit(fits)(g).dtype == np.uint8


def test_shape_mismatch(u):
    with pytest.raises(pgas.ShapeMismatchError, match="\\(62,\\) and \\(63,\\)"):
        u[1:-1] + u[1:]
    with pytest.raises(
        pgas.ShapeMismatchError, match="shape \\(63,\\) to a window of shape \\(62,\\)"
    ):
        u[1:-1] = u[1:]


def test_layout_mismatch(u):
    w = pgas.from_numpy(np.zeros(64, np.float32), pgas.make_mesh(("x",), devices=4))
    with pytest.raises(pgas.LayoutError, match="use arrays of one layout"):
        u[1:-1] = w[1:-1]


def test_float64_without_x64_is_explained():
    with jax.enable_x64(False):
        with pytest.raises(pgas.LayoutError, match="jax_enable_x64"):
            pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))


def test_bad_dtype_and_shapes():
    mesh = pgas.make_mesh(("x",))
    with pytest.raises(pgas.LayoutError, match="dtype = complex64"):
        pgas.zeros((8,), mesh, dtype=np.complex64)
    with pytest.raises(pgas.LayoutError, match="every device needs at least one cell"):
        pgas.zeros((5,), mesh)
    with pytest.raises(pgas.LayoutError, match="1 to 3 dimensions"):
        pgas.zeros((2, 2, 2, 2), mesh)


def test_views_are_not_numpy(u):
    with pytest.raises(pgas.ConversionError, match="cannot become a NumPy array"):
        np.asarray(u[1:])
    with pytest.raises(pgas.IndexingError, match="cannot combine"):
        u[1:] + jnp.ones(63)


def test_step_returning_none(u):
    def forgot(u):
        u[1:-1] = u[:-2]

    with pytest.raises(pgas.PgasError, match="returned None"):
        pgas.run(forgot, u, 1)


def test_run_arguments(u):
    with pytest.raises(pgas.PgasError, match="snapshot_every = 3 does not divide steps = 10"):
        pgas.run(lambda u: u, u, 10, snapshot_every=3)
    with pytest.raises(pgas.PgasError, match="steps = -1"):
        pgas.run(lambda u: u, u, -1)
