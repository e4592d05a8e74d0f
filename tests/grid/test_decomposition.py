import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pgas
from pgas import BlockAxis, DeviceCountError, dims_create
from pgas.grid.decomposition import halo_sides, halo_widths


@pytest.mark.parametrize(
    "count, ndims, expected",
    [(1, 1, (1,)), (8, 1, (8,)), (8, 2, (4, 2)), (8, 3, (2, 2, 2)), (6, 2, (3, 2)),
     (12, 3, (3, 2, 2)), (7, 2, (7, 1)), (16, 2, (4, 4))],
)  # fmt: skip
def test_dims_create_matches_mpi(count, ndims, expected):
    assert dims_create(count, ndims) == expected


@given(st.integers(1, 64), st.integers(1, 3))
def test_dims_create_product(count, ndims):
    dims = dims_create(count, ndims)
    assert math.prod(dims) == count and list(dims) == sorted(dims, reverse=True)


def test_dims_create_errors():
    with pytest.raises(DeviceCountError, match="count = 0"):
        dims_create(0, 1)


@given(st.integers(1, 500), st.integers(1, 9))
def test_block_axis_covers_every_cell_once(size, parts):
    if size < parts:
        return
    ax = BlockAxis(size, parts)
    assert sum(ax.lengths) == size
    assert max(ax.lengths) - min(ax.lengths) <= 1
    assert ax.offsets[0] == 0 and all(
        o + n == nxt for o, n, nxt in zip(ax.offsets, ax.lengths, ax.offsets[1:])
    )
    p = ax.physical_index()
    assert len(np.unique(p)) == size and p.max() < ax.padded


@pytest.mark.parametrize("size,parts", [(10, 4), (4, 3), (7, 7), (9, 1), (1001, 8)])
def test_global_index_inverts_physical_index(size, parts):
    ax = BlockAxis(size, parts)
    g, valid = ax.global_index(np.arange(ax.padded))
    assert valid.sum() == size
    np.testing.assert_array_equal(g[valid], np.arange(size))
    np.testing.assert_array_equal(np.flatnonzero(valid), ax.physical_index())


def test_halo_widths():
    assert halo_widths(2, 3) == (2, 2, 2)
    assert halo_widths([1, 0], 2) == (1, 0)
    assert halo_widths(np.int64(1), 1) == (1,)
    for bad in (-1, (1,), (1, 2, 3), (1, -1), 1.5, "1", True, None):
        with pytest.raises(pgas.HaloError, match=r"halo = .* for a 2-D array: give one whole"):
            halo_widths(bad, 2)
    with pytest.raises(pgas.HaloError, match=r"width = -1 for a 1-D array"):
        halo_widths(-1, 1, name="width")


def test_halo_sides():
    assert halo_sides(2, 2) == ((2, 2), (2, 2))
    assert halo_sides([1, 0], 2) == ((1, 1), (0, 0))
    assert halo_sides(((1, 0),), 1) == ((1, 0),)
    assert halo_sides([[0, 2], 1], 2) == ((0, 2), (1, 1))
    assert halo_sides((np.int64(1), (np.int64(2), 0)), 2) == ((1, 1), (2, 0))
    bad_ones = (-1, (1,), ((1, 0),), ((1, -1), 1), ((1, 0, 1), 1), ((1.5, 0), 1), (True, 1),
                None, "1")  # fmt: skip
    for bad in bad_ones:
        with pytest.raises(pgas.HaloError, match=r"halo = .* 2-D array: .*\(below, above\) pairs"):
            halo_sides(bad, 2)
