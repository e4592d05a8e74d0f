"""The lowering's phases: collect, sources, evaluate and write, and their errors."""

import numpy as np
import pytest

import pgas
from pgas.globalview.forms import physical_of
from pgas.globalview.lower import check_dtype, collect
from pgas.globalview.view import normalize_index


def test_collect_takes_the_widest_offset_per_array_and_axis():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    g = pgas.zeros((8, 8), mesh)
    h = pgas.zeros((8, 8), mesh)
    value = g[:-2, 1:-1] + g[2:, 2:] + h[1:-1, 1:-1]
    reads = collect(g, normalize_index((slice(1, -1), slice(1, -1)), (8, 8)), value)
    assert [r.widths for r in reads] == [(1, 1), (0, 0)]


def test_layouts_and_integer_axes_must_match():
    u = pgas.zeros((8,), pgas.make_mesh(("x",), devices=2))
    v = pgas.zeros((8,), pgas.make_mesh(("x",), devices=4))
    with pytest.raises(pgas.LayoutError, match="use arrays of one layout"):
        u[1:-1] = v[1:-1]
    g = pgas.zeros((4, 4), pgas.make_mesh(("y",), devices=1))
    with pytest.raises(pgas.IndexingError, match="integer indices must sit on the same axes"):
        g[0, :] = g[:, 0]


def test_dtype_rules():
    check_dtype(np.dtype("int32"), np.dtype("float32"), False)
    check_dtype(np.dtype("float64"), np.dtype("float32"), True)  # a Python float
    with pytest.raises(pgas.DTypeMismatchError, match="astype"):
        check_dtype(np.dtype("float32"), np.dtype("int32"), False)


def test_assignment_on_extended_blocks_shrinks_the_domain():
    x0 = np.arange(12.0, dtype=np.float32)
    mesh = pgas.make_mesh(("x",), devices=3)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    from pgas.loop.frames import cores, frames

    f = frames(u, (2,))
    assert f.ext == (2,) and f.data.shape == (3, 8)
    f[1:-1] = 0.5 * f[1:-1] + 0.25 * (f[:-2] + f[2:])  # one step: the domain loses 1 cell a side
    assert f.ext == (1,)
    f[1:-1] = 0.5 * f[1:-1] + 0.25 * (f[:-2] + f[2:])
    assert f.ext == (0,)
    ref = x0.copy()
    for _ in range(2):
        ref[1:-1] = 0.5 * ref[1:-1] + 0.25 * (ref[:-2] + ref[2:])
    np.testing.assert_array_equal(np.asarray(physical_of(cores(f))), ref)
    with pytest.raises(pgas.HaloError, match="farther across axis 0 than the halo"):
        f[1:-1] = f[:-2]
