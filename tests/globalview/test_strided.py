"""Strided reads and writes of global arrays against NumPy, what they send, and their errors."""

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgas
from pgas.globalview.strided import recording_transfers, take

MESHES = {1: [(1,), (2,), (3,)], 2: [(3, 2), (2, 3), (1, 3), (2, 1)],
          3: [(3, 2, 1), (1, 2, 3), (2, 1, 1)]}  # fmt: skip
NAMES = {1: ("x",), 2: ("y", "x"), 3: ("z", "y", "x")}
BCS = [pgas.Dirichlet(0.5), pgas.Neumann(), pgas.Keep()]


def _mesh(shape):
    return pgas.make_mesh(NAMES[len(shape)], shape=shape, devices=int(np.prod(shape)))


@st.composite
def strided(draw):
    """A mesh, a shape (odd and even, uneven blocks) and a strided index of it: any start,
    stop (None, negative or positive) and step from 1 to 3, at least one step above 1, and
    at least one picked cell per device."""
    ndim = draw(st.integers(1, 3))
    mesh = draw(st.sampled_from(MESHES[ndim]))
    top, strided_axis = (13 if ndim < 3 else 7), draw(st.integers(0, ndim - 1))
    shape, key = [], []
    for axis, parts in enumerate(mesh):
        step = draw(st.integers(2 if axis == strided_axis else 1, min(3, top // parts)))
        n = draw(st.integers(max(parts * step, 2), top))
        first = draw(st.integers(0, n - 1 - step * (parts - 1)))
        end = draw(st.integers(first + step * (parts - 1) + 1, n))
        start = draw(st.sampled_from([first, first - n] if first else [None, 0, -n]))
        stop = draw(st.sampled_from([end, end - n] if end < n else [None, n, 99]))
        shape.append(n)
        key.append(slice(start, stop, step))
    return mesh, tuple(shape), tuple(key), draw(st.sampled_from(BCS)), draw(st.integers(0, 99))


@settings(max_examples=7, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided())
def test_strided_reads_and_writes_match_numpy(case):
    mesh_shape, shape, key, bc, seed = case
    rng = np.random.default_rng(seed)
    x, y = rng.random(shape), rng.random(shape)
    mesh = _mesh(mesh_shape)
    c = pgas.from_numpy(x, mesh, boundary=bc)[key]  # a read: a new array
    assert isinstance(c, pgas.GlobalArray) and c.layout.mesh is mesh
    np.testing.assert_array_equal(c.to_numpy(), x[key])
    g = pgas.from_numpy(y, mesh, boundary=bc)
    g[key] = -1.5  # a scalar
    ref = y.copy()
    ref[key] = -1.5
    np.testing.assert_array_equal(g.to_numpy(), ref)
    g[key] = c  # an array of the picked shape
    ref[key] = x[key]
    np.testing.assert_array_equal(g.to_numpy(), ref)


@pytest.mark.parametrize("shape, mesh_shape", [((13, 12), (3, 2)), ((9, 10), (2, 3))])
def test_restriction_and_prolongation_match_numpy(shape, mesh_shape):
    """The transfers of a two-grid cycle, written as NumPy writes them, bitwise (compiled, as
    in a solver: one program)."""
    x = np.random.default_rng(1).random(shape)
    mesh = _mesh(mesh_shape)
    k, j = x[1::2, ::2].shape[0], (shape[1] - 1) // 2  # odd columns with two neighbours

    def cycle(f, fine):
        c = f[::2, ::2]
        fine[::2, ::2] = c
        fine[1::2, ::2] = 0.5 * (c[:k, :] + c[1 : k + 1, :])
        fine[:, 1 : 2 * j : 2] = 0.5 * (fine[:, 0 : 2 * j : 2] + fine[:, 2 : 2 * j + 1 : 2])
        f[1:-1:3, 1::1] = 2.0 * f[1:-1:3, 1:]  # another step, and a unit step beside
        return f, fine, c

    f = pgas.from_numpy(x, mesh, boundary=pgas.Dirichlet(0.0))
    fine = pgas.zeros(shape, mesh, dtype=np.float64, boundary=pgas.Dirichlet(0.0))
    f, fine, c = jax.jit(cycle)(f, fine)
    assert c.layout.boundary == f.layout.boundary
    xc = x[::2, ::2]
    ref = np.zeros(shape)
    ref[::2, ::2] = xc
    ref[1::2, ::2] = 0.5 * (xc[:k, :] + xc[1 : k + 1, :])
    ref[:, 1 : 2 * j : 2] = 0.5 * (ref[:, 0 : 2 * j : 2] + ref[:, 2 : 2 * j + 1 : 2])
    np.testing.assert_array_equal(fine.to_numpy(), ref)
    x[1:-1:3, 1::1] = 2.0 * x[1:-1:3, 1:]
    np.testing.assert_array_equal(f.to_numpy(), x)


def _permutes(hlo: str) -> list[tuple[str, str]]:
    """``(operand type, pairs)`` of every collective-permute; no whole-array collective."""
    assert " all-gather(" not in hlo and "all-gather-start" not in hlo
    assert " all-to-all(" not in hlo and " reduce-scatter(" not in hlo
    return [(line.split("=")[1].split()[0], line.split("source_target_pairs=")[1].split("}},")[0])
            for line in hlo.splitlines() if " collective-permute(" in line]  # fmt: skip


def _hlo(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def test_restriction_sends_the_cells_that_change_block_only():
    """10 cells on 3 devices (4, 3, 3): u[1::2] picks 2, 1, 2 cells, the coarse array holds
    2, 2, 1: one cell moves, from block 2 to block 1. On 2x3 blocks of a 9x9 field u[::2,
    ::2] moves one coarse column of 3 cells along x, nothing along y; the prolongation back
    the same column the other way. A part of the axis moves only its cells, farther."""
    u = pgas.from_numpy(np.arange(10.0), _mesh((3,)), boundary=pgas.Keep())
    assert _permutes(_hlo(lambda u: u[1::2], u)) == [("f64[1]{0}", "{{2,1")]
    f = pgas.from_numpy(np.zeros((9, 9)), _mesh((2, 3)), boundary=pgas.Keep())
    assert _permutes(_hlo(lambda f: f[::2, ::2], f)) == [("f64[3,1]{1,0}", "{{2,1},{5,4")]

    def prolong(f, c):
        f[::2, ::2] = c
        return f

    assert _permutes(_hlo(prolong, f, f[::2, ::2])) == [("f64[3,1]{1,0}", "{{1,2},{4,5")]
    u = pgas.from_numpy(np.arange(24.0), _mesh((3,)), boundary=pgas.Keep())
    sent = _permutes(_hlo(lambda u: u[0:8:2], u))  # 4 cells all in block 0: to blocks 1, 2
    assert sorted(sent) == [("f64[1]{0}", "{{0,1"), ("f64[1]{0}", "{{0,2")]


def test_comm_report_of_restriction_and_prolongation_steps_is_halo_sized():
    f = pgas.from_numpy(np.zeros((9, 9)), _mesh((2, 3)), boundary=pgas.Dirichlet(0.0))

    def restrict(state):
        fine, coarse = state
        return fine, fine[::2, ::2]

    report = pgas.comm_report(restrict, (f, f[::2, ::2]))
    assert report.gathers == 0 and report.count("collective-permute") == 1
    assert report.ideal_bytes == 3 * 8 == report.bytes("collective-permute")  # a column of 3
    assert report.ratio == 1.0 and "(0+1)x3x8B (axis 1)" in str(report)
    with recording_transfers() as moved:
        f[::2, ::2]
    assert [(t.axis, t.sides, t.face) for t in moved] == [(1, (0, 1), 3)]

    def prolong(state):
        fine, coarse = state
        fine[::2, ::2] = coarse
        return fine, coarse

    report = pgas.comm_report(prolong, (f, f[::2, ::2]))  # the same column, back
    assert report.gathers == 0 and report.count("collective-permute") == 1
    assert report.ideal_bytes == 24 == report.bytes("collective-permute") and report.ratio == 1


def test_a_step_with_strided_slices_runs_without_frames():
    """pgas.run plans k = 1 and no frames (a strided slice of a framed array is a FrameError
    the plan catches), and runs the step bitwise as NumPy does."""
    x = np.random.default_rng(2).random(13)
    mesh = _mesh((3,))
    f = pgas.from_numpy(x, mesh, boundary=pgas.Keep())

    def two_grid(state):
        f, c = state
        f[1:-1] = 0.5 * f[1:-1] + 0.25 * (f[:-2] + f[2:])
        c[:] = f[::2]
        f[1::2] = 0.5 * (c[:-1] + c[1:])
        return f, c

    plan = pgas.plan.plan(two_grid, (f, f[::2]), steps_per_exchange=4)
    assert plan.widths is None and plan.steps_per_exchange == 1
    assert "strided slice" in plan.note and "without frames" in plan.note
    fine, coarse = pgas.run(two_grid, (f, f[::2]), steps=3, steps_per_exchange=4)
    for _ in range(3):
        x[1:-1] = 0.5 * x[1:-1] + 0.25 * (x[:-2] + x[2:])
        xc = x[::2].copy()
        x[1::2] = 0.5 * (xc[:-1] + xc[1:])
    np.testing.assert_array_equal(fine.to_numpy(), x)
    np.testing.assert_array_equal(coarse.to_numpy(), xc)


def test_coarse_arrays_carry_the_conditions():
    mesh = _mesh((2,))
    x = np.arange(10.0)
    for bc, ghost in [(pgas.Dirichlet(7.0), 7.0), (pgas.Neumann(), 0.0), (pgas.Periodic(), 8.0)]:
        c = pgas.from_numpy(x, mesh, boundary=bc)[::2]  # 0 2 4 6 8
        assert c.layout.boundary[0] == (bc, bc)
        assert pgas.shift(c, 1).to_array().to_numpy()[0] == ghost  # the coarse ghost cell
    with pytest.raises(pgas.IndexingError, match="periodic with 10 cells.*boundary="):
        pgas.from_numpy(x, mesh)[1:-1:2]
    c = take(pgas.from_numpy(x, mesh), slice(1, -1, 2), boundary=pgas.Dirichlet(-1.0))
    assert c.to_numpy().tolist() == [1, 3, 5, 7] and c.layout.boundary[0][1] == pgas.Dirichlet(-1)
    f = pgas.from_numpy(x, mesh, boundary=pgas.Neumann())
    f[1:-1:2] = pgas.shift(c, 1)  # a read across the coarse array's edge: its ghost cell
    assert f.to_numpy().tolist() == [0, -1, 2, 1, 4, 3, 6, 5, 8, 9]


def test_strided_writes_keep_the_kept_cells():
    """A Keep face's outer halo cells are not written (as by any assignment), unless every
    picked cell lies in them."""
    mesh = _mesh((2,))
    u = pgas.from_numpy(np.zeros(9), mesh, boundary=pgas.Keep(), halo=1)
    u[::2] = 5.0
    u[:1:4] = 3.0
    assert u.to_numpy().tolist() == [3, 0, 5, 0, 5, 0, 5, 0, 0]


def test_strided_slices_say_what_cannot_be_done():
    mesh = _mesh((3,))
    u = pgas.from_numpy(np.zeros((12, 4)), mesh, boundary=pgas.Neumann())
    with pytest.raises(pgas.IndexingError, match="step = -1: pgas slices with steps >= 1"):
        u[::-1]
    with pytest.raises(pgas.IndexingError, match="step = 0: give a step >= 1"):
        u[::0]
    with pytest.raises(pgas.IndexingError, match=r"step = 1.5 \(float\): give a static Python"):
        u[::1.5] = 0.0
    with pytest.raises(pgas.IndexingError, match="index 0 on axis 1 beside a strided.*0:1"):
        u[::2, 0]
    with pytest.raises(pgas.LayoutError, match="picks 2 cell.*fewer than the 3 devices"):
        u[::6]
    with pytest.raises(pgas.ShapeMismatchError, match=r"shape \(5, 4\) to the \(6, 4\) cells"):
        u[::2] = u[1::2][:-1]
    with pytest.raises(pgas.DTypeMismatchError, match="float64 values to a int64 array"):
        pgas.zeros((12,), mesh, dtype=np.int64)[::2] = 0.5 * u[::2, 0:1][:, 0]
    other = pgas.from_numpy(np.zeros((6, 4)), _mesh((3, 1)), boundary=pgas.Neumann())
    with pytest.raises(pgas.LayoutError, match="same mesh and spec"):
        u[::2] = other
