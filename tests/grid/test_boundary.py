"""What a read beyond the edge sees: shift against np.pad, on uneven layouts too."""

import numpy as np
import pytest

import pgas

PAD = {"periodic": ("wrap", {}), "dirichlet": ("constant", {"constant_values": 2.5}),
       "neumann": ("symmetric", {})}  # fmt: skip
BC = {"periodic": pgas.Periodic(), "dirichlet": pgas.Dirichlet(2.5), "neumann": pgas.Neumann()}


def shifted_numpy(x, k, axis, kind):
    mode, kw = PAD[kind]
    h = abs(k)
    widths = [(h, h) if a == axis else (0, 0) for a in range(x.ndim)]
    p = np.pad(x, widths, mode=mode, **kw)
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(h - k, h - k + x.shape[axis])
    return p[tuple(sl)]


@pytest.mark.parametrize("kind", list(BC))
@pytest.mark.parametrize("n, devices, k", [(37, 4, 1), (37, 4, -2), (40, 8, 3), (9, 1, -1)])
def test_shift_1d(kind, n, devices, k):
    x = np.random.default_rng(n).random(n)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=devices), boundary=BC[kind])
    got = pgas.shift(u, k).to_array().to_numpy()
    np.testing.assert_array_equal(got, shifted_numpy(x, k, 0, kind))


@pytest.mark.parametrize("kind", list(BC))
def test_shift_2d_per_face(kind):
    x = np.random.default_rng(9).random((13, 22))
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 4))
    u = pgas.from_numpy(x, mesh, boundary=[BC[kind], pgas.Periodic()])
    got = pgas.shift(pgas.shift(u, -1, 0), 2, 1).to_array().to_numpy()
    expected = shifted_numpy(shifted_numpy(x, -1, 0, kind), 2, 1, "periodic")
    np.testing.assert_array_equal(got, expected)


def test_mixed_faces():
    x = np.arange(8.0)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=2),
                        boundary=[(pgas.Dirichlet(-1.0), pgas.Neumann())])  # fmt: skip
    left = pgas.shift(u, 1).to_array().to_numpy()
    right = pgas.shift(u, -1).to_array().to_numpy()
    assert left[0] == -1.0 and right[-1] == 7.0


def test_keep_holds_outer_halo_cells():
    x = np.random.default_rng(10).random(20)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=4), boundary=pgas.Keep(), halo=2)
    u[...] = 0 * u  # a whole-array write: the Keep faces hold 2 cells each
    out = u.to_numpy()
    np.testing.assert_array_equal(out[:2], x[:2])
    np.testing.assert_array_equal(out[-2:], x[-2:])
    assert not out[2:-2].any()


def test_periodic_needs_both_faces():
    with pytest.raises(pgas.LayoutError, match="periodic face needs a periodic partner"):
        pgas.zeros((8,), pgas.make_mesh(devices=1), boundary=[(pgas.Periodic(), pgas.Keep())])


@pytest.mark.parametrize("bc", [pgas.Dirichlet(2.5), pgas.Neumann(), pgas.Keep()])
def test_one_ghost_rule_for_jax_and_numpy(bc):
    """The JAX halo and the MPI halo ask the condition itself: the same ghosts from either."""
    import jax.numpy as jnp

    edge = np.arange(6.0).reshape(2, 3)  # 3 edge cells of a face across axis 1
    want = np.full_like(edge, 2.5) if isinstance(bc, pgas.Dirichlet) else edge[:, ::-1]
    np.testing.assert_array_equal(bc.ghost(edge, 1, np), want)
    np.testing.assert_array_equal(np.asarray(bc.ghost(jnp.asarray(edge), 1, jnp)), want)


def test_rules_live_with_the_conditions():
    rules = {
        type(bc).__name__: (bc.periodic, bc.keeps, bc.refreshed)
        for bc in (pgas.Periodic(), pgas.Dirichlet(), pgas.Neumann(), pgas.Keep())
    }
    assert rules == {
        "Periodic": (True, False, False),
        "Dirichlet": (False, False, False),
        "Neumann": (False, False, True),
        "Keep": (False, True, False),
    }
    with pytest.raises(pgas.LayoutError, match="no ghost cells of its own"):
        pgas.Periodic().ghost(np.zeros(2), 0, np)
