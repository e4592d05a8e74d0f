"""pgas.layout: shapes, blocks, masks and the errors of make_layout (8 virtual CPU devices)."""

from __future__ import annotations

import numpy as np
import pytest

import pgas
from pgas.grid.layout import make_layout


@pytest.fixture(scope="module")
def mesh4():
    return pgas.make_mesh(("x",), devices=4)


def test_even_and_uneven_axes(mesh4):
    even = make_layout((12,), mesh4)
    assert even.even and even.physical_shape == (12,) and even.local_shape == (3,)
    odd = make_layout((10,), mesh4)  # blocks 3, 3, 2, 2 stored as 4 x 3
    assert not odd.even
    assert odd.physical_shape == (12,) and odd.local_shape == (3,)
    assert odd.axes[0].lengths == (3, 3, 2, 2)
    assert odd.blocks_shape == (4, 3)


def test_default_spec_and_replicated_axis():
    mesh = pgas.make_mesh(("y", "x"), shape=(2, 4))
    lay = make_layout((6, 8, 5), mesh)
    assert lay.spec == ("y", "x", None)
    assert lay.physical_shape == (6, 8, 5) and lay.local_shape == (3, 2, 5)
    assert make_layout((6, 8), mesh, spec=(None, "y")).local_shape == (6, 4)


def test_global_index_and_valid_in_blocks_form(mesh4):
    lay = make_layout((10,), mesh4)
    g = np.asarray(lay.global_index(0)).reshape(-1)
    valid = np.asarray(lay.valid(0)).reshape(-1)
    np.testing.assert_array_equal(g[valid], np.arange(10))
    assert valid.sum() == 10
    np.testing.assert_array_equal(np.flatnonzero(valid), lay.axes[0].physical_index())
    assert make_layout((12,), mesh4).valid(0) is None  # no padding, no mask


def test_window_mask_keeps_keep_cells(mesh4):
    lay = make_layout((10,), mesh4, boundary=pgas.Keep(), halo=1)
    mask = np.asarray(lay.window_mask((0,), (10,), (1,))).reshape(-1)
    g = np.asarray(lay.global_index(0)).reshape(-1)
    valid = np.asarray(lay.valid(0)).reshape(-1)
    want = valid & (g >= 1) & (g < 9)  # Keep: the outer halo cell of each face stays
    np.testing.assert_array_equal(mask, want)
    periodic = make_layout((12,), mesh4)
    assert periodic.window_mask((0,), (12,), (1,)) is None  # every cell
    part = np.asarray(periodic.window_mask((2,), (5,), (1,))).reshape(-1)
    np.testing.assert_array_equal(np.flatnonzero(part), np.arange(2, 7))


def test_check_halo(mesh4):
    lay = make_layout((10,), mesh4, halo=1)
    lay.check_halo(0, 1)
    with pytest.raises(pgas.HaloError, match="declares halo=1"):
        lay.check_halo(0, 2)
    with pytest.raises(pgas.HaloError, match="wider than the smallest local block"):
        make_layout((10,), mesh4).check_halo(0, 3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(shape=(2, 2, 2, 2)), pgas.LayoutError, "1 to 3 dimensions"),
        (dict(shape=(0,)), pgas.LayoutError, "every size must be >= 1"),
        (dict(shape=(8,), spec=("x", None)), pgas.LayoutError, "2 entries for a 1-D array"),
        (dict(shape=(8,), spec=("q",)), pgas.MeshError, "mesh axis 'q'"),
        (dict(shape=(8,), halo=-1), pgas.LayoutError, "halo = \\(-1,\\)"),
        (dict(shape=(3,)), pgas.LayoutError, "axis 0 has 3 cells but mesh axis 'x' has 4"),
        (dict(shape=(8,), halo=3), pgas.HaloError, "halo width 3 on axis 0"),
    ],
)
def test_errors(mesh4, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_layout(mesh=mesh4, **kwargs)


def test_same_grid(mesh4):
    a = make_layout((10,), mesh4)
    assert a.same_grid(make_layout((10,), mesh4, boundary=pgas.Keep()))
    assert not a.same_grid(make_layout((11,), mesh4))
