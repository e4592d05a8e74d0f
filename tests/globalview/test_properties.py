"""Property-based: random shapes, meshes, windows, boundaries and halo widths vs NumPy."""

import jax
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


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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

    def update(v):
        v[win] = 0.5 * v[win] + 0.25 * (v[left] - 2.0 * v[right])
        return v

    # under jax.jit: one program per example (run eagerly, each operation compiles on its own,
    # about 18 programs an example); the same pgas code traces it (powers of two: FMAs or
    # not, NumPy's bits)
    np.testing.assert_array_equal(jax.jit(update)(u).to_numpy(), ref)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    shifted = jax.jit(lambda v: (pgas.shift(v, k, axis) + 0.0).to_array())  # one program
    got = shifted(u).to_numpy()
    np.testing.assert_array_equal(got, expected)


@st.composite
def stencils(draw):
    """A random 1-D/2-D stencil: offsets within the halo along each axis, power-of-two
    weights around a centre weight of 1 minus their sum."""
    names, mesh_shape, shape, h, bc, seed = draw(problems())
    taps = []
    for axis in range(len(shape)):
        for offset in draw(st.lists(st.integers(-h, h).filter(bool), min_size=1, max_size=3,
                                    unique=True)):  # fmt: skip
            taps.append((axis, offset, 2.0 ** -draw(st.integers(2, 4))))
    k = draw(st.sampled_from([1, 2, 4, "auto"]))
    steps = draw(st.integers(1, 6))
    return names, mesh_shape, shape, h, bc, seed, taps, k, steps


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stencils())
def test_random_stencil_run_matches_numpy(case):
    """pgas.run of a random stencil (random shape, mesh, boundary, halo, k, steps) equals the
    same stencil written in NumPy with np.pad for the boundary."""
    names, mesh_shape, shape, h, bc, seed, taps, k, steps = case
    x = np.random.default_rng(seed).random(shape)
    mesh = pgas.make_mesh(names, shape=mesh_shape, devices=int(np.prod(mesh_shape)))
    u = pgas.from_numpy(x, mesh, boundary=bc)
    centre = 1.0 - sum(w for _, _, w in taps)

    def step(v):
        new = centre * v
        for axis, offset, w in taps:
            new = new + w * pgas.shift(v, offset, axis)
        v[...] = new
        return v

    kw = {"constant_values": 0.5} if isinstance(bc, pgas.Dirichlet) else {}
    ref = x.copy()
    for _ in range(steps):
        new = centre * ref
        for axis, offset, w in taps:
            widths = [(h, h) if i == axis else (0, 0) for i in range(len(shape))]
            p = np.pad(ref, widths, mode=PAD[type(bc)], **kw)
            new = new + w * np.take(p, np.arange(h - offset, h - offset + shape[axis]), axis=axis)
        ref = new
    got = pgas.run(step, u, steps, steps_per_exchange=k).to_numpy()
    # the centre weight is not a power of two: XLA's fused multiply-adds may differ from
    # NumPy in the last bit (see FACTS "Arithmetic and bitwise equality")
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13)
