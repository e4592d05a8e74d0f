"""Property-based: random shapes, meshes, windows, boundaries and halo widths vs NumPy."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgas

BCS = [pgas.Periodic(), pgas.Dirichlet(0.5), pgas.Neumann(), pgas.Keep()]
PAD = {pgas.Periodic: "wrap", pgas.Dirichlet: "constant", pgas.Neumann: "symmetric",
       pgas.Keep: "symmetric"}  # fmt: skip


@st.composite
def problems(draw):
    ndim = draw(st.integers(1, 2))
    devices = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    names = ("x",) if ndim == 1 else ("y", "x")
    mesh_shape = pgas.dims_create(devices, ndim)
    h = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(max(h * p, 2 * h + 1), 40)) for p in mesh_shape)
    bc = draw(st.sampled_from(BCS[:3]))
    return names, mesh_shape, shape, h, bc, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.data())
def test_window_update_matches_numpy(problem, data):
    names, mesh_shape, shape, h, bc, seed = problem
    x = np.random.default_rng(seed).random(shape)
    mesh = pgas.make_mesh(names, shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    u = pgas.from_numpy(x, mesh, boundary=bc)
    # a window [lo, n - hi) written from two views shifted by -a and +b (|a|, |b| <= h)
    lo = tuple(data.draw(st.integers(0, h)) for _ in shape)
    hi = tuple(data.draw(st.integers(0, h)) for _ in shape)
    a = tuple(data.draw(st.integers(0, low)) for low in lo)
    b = tuple(data.draw(st.integers(0, high)) for high in hi)
    win = tuple(slice(a0, n - r) for a0, r, n in zip(lo, hi, shape))
    left = tuple(slice(a0 - k, n - r - k) for a0, r, n, k in zip(lo, hi, shape, a))
    right = tuple(slice(a0 + k, n - r + k) for a0, r, n, k in zip(lo, hi, shape, b))
    ref = x.copy()
    ref[win] = 0.5 * ref[win] + 0.25 * (ref[left] - 2.0 * ref[right])
    u[win] = 0.5 * u[win] + 0.25 * (u[left] - 2.0 * u[right])
    np.testing.assert_array_equal(u.to_numpy(), ref)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.data())
def test_shift_matches_np_pad(problem, data):
    names, mesh_shape, shape, h, bc, seed = problem
    x = np.random.default_rng(seed).random(shape)
    mesh = pgas.make_mesh(names, shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    u = pgas.from_numpy(x, mesh, boundary=bc)
    axis = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(-h, h))
    kw = {"constant_values": 0.5} if isinstance(bc, pgas.Dirichlet) else {}
    widths = [(h, h) if i == axis else (0, 0) for i in range(len(shape))]
    p = np.pad(x, widths, mode=PAD[type(bc)], **kw)
    expected = np.take(p, np.arange(h - k, h - k + shape[axis]), axis=axis)
    got = (pgas.shift(u, k, axis) + 0.0).to_array().to_numpy()
    np.testing.assert_array_equal(got, expected)
