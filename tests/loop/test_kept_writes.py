"""Under ``Keep()``, an edge written by hand (``u[0] = u[1]``) is written, with or without a
stencil in the step, before or after it, at every k (issue 32, item 5: it was dropped without
a word when the assignment read at an offset); one that reads the ghosts beyond the face is
refused."""

import numpy as np
import pytest

import pgas


def stencil_1d(x):
    x[1:-1] = 0.5 * (x[:-2] + x[2:])
    return x


def edges_1d(x):
    x[0] = x[1]
    x[-1] = x[-2]
    return x


def stencil_2d(x):
    x[1:-1, 1:-1] = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
    return x


def edges_2d(x):
    x[0, :] = x[1, :]
    x[-1, :] = x[-2, :]
    x[:, 0] = x[:, 1]
    x[:, -1] = x[:, -2]
    return x


STEPS = {
    (1, "after"): lambda u: edges_1d(stencil_1d(u)),
    (1, "before"): lambda u: stencil_1d(edges_1d(u)),
    (2, "after"): lambda u: edges_2d(stencil_2d(u)),
    (2, "before"): lambda u: stencil_2d(edges_2d(u)),
}
SHAPES = {1: (12,), 2: (12, 7)}


def numpy_run(ndim, order, x, steps):
    x = x.copy()
    for _ in range(steps):
        x = STEPS[ndim, order](x)  # NumPy's arrays: the same slices and arithmetic
    return x


def field(x, devices):
    names = ("x",) if x.ndim == 1 else ("y", "x")
    shape = (devices,) if x.ndim == 1 else (devices, 1)
    mesh = pgas.make_mesh(names, shape=shape, devices=devices)
    return pgas.from_numpy(x, mesh, spec=names, boundary=pgas.Keep())


# 1 device: every face local; 3 devices: edge blocks beside exchanged faces, and in 2-D
# (a 3 x 1 mesh) an unsplit axis whose faces are local (2-D on 1 device took those paths;
# on 1 device k = "auto" only: local faces at k = 1 are the 2-D case's unsplit axis)
@pytest.mark.parametrize("ndim, devices", [(1, 1), (1, 3), (2, 3)])
def test_edges_written_by_hand_match_numpy_bitwise_at_every_k(ndim, devices):
    x0 = np.random.default_rng(ndim).random(SHAPES[ndim])
    for order in ("after", "before"):
        want = numpy_run(ndim, order, x0, 7)
        assert want.flat[0] != x0.flat[0]  # the edge changed: the edges are written
        for k in (1, "auto") if devices > 1 else ("auto",):
            got = pgas.run(STEPS[ndim, order], field(x0, devices), 7, steps_per_exchange=k)
            np.testing.assert_array_equal(got.to_numpy(), want, err_msg=f"{order}, k = {k}")


def test_an_edge_written_alone_or_with_a_stencil_is_written_eagerly():
    x0 = np.arange(8.0) ** 2
    mesh = pgas.make_mesh(devices=1)
    alone = edges_1d(pgas.from_numpy(x0, mesh, boundary=pgas.Keep()))
    np.testing.assert_array_equal(alone.to_numpy(), edges_1d(x0.copy()))
    both = STEPS[1, "after"](pgas.from_numpy(x0, mesh, boundary=pgas.Keep()))
    np.testing.assert_array_equal(both.to_numpy(), STEPS[1, "after"](x0.copy()))
    declared = pgas.from_numpy(x0, mesh, boundary=pgas.Keep(), halo=1)
    declared[0] = 5.0  # inside the declared halo's kept cells: written by hand too
    assert declared.to_numpy()[0] == 5.0


def test_a_stencil_over_the_kept_cells_still_keeps_them():
    x0 = np.arange(8.0) ** 2
    u = pgas.from_numpy(x0, pgas.make_mesh(devices=1), boundary=pgas.Keep())
    u[:] = 0.5 * (pgas.shift(u, 1) + pgas.shift(u, -1))  # a window wider than the kept cells
    want = x0.copy()
    want[1:-1] = 0.5 * (x0[:-2] + x0[2:])
    np.testing.assert_array_equal(u.to_numpy(), want)


def test_an_edge_reading_the_ghosts_beyond_its_keep_face_is_refused():
    u = pgas.from_numpy(np.arange(8.0), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    with pytest.raises(pgas.PgasError, match=r"cells 0:1 of axis 0, inside the cells the Keep"):
        u[0:1] = 0.5 * (pgas.shift(u[0:1], 1) + u[1:2])
    with pytest.raises(pgas.PgasError, match=r"Keep\(\) high face keeps \(7:8\)"):
        u[-1:] = pgas.shift(u[-1:], -1)
