"""Views: windows, expression shapes and dtypes, shift, and what cannot be a halo exchange."""

import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.globalview.lower import collect
from pgas.globalview.view import Leaf, Op, Shifted, View, normalize_index


def _array(n=8, devices=1, **kw):
    x = np.arange(n, dtype=np.float32)
    return pgas.from_numpy(x, pgas.make_mesh(("x",), devices=devices), **kw)


def test_normalize_index_windows():
    w = normalize_index((slice(1, -1), 2), (6, 5))
    assert (w.start, w.extent, w.kept, w.shape) == ((1, 2), (4, 1), (True, False), (4,))
    w = normalize_index(..., (3, 4))
    assert (w.start, w.extent) == ((0, 0), (3, 4))
    assert normalize_index((-1,), (5,)).start == (4,)


@pytest.mark.parametrize("key, match", [
    (slice(None, None, -1), "step = -1"), (np.array([1, 2]), "not supported"),
    (slice(jnp.int32(1), None), "static Python integers"), ((Ellipsis, Ellipsis), "more than one"),
    (7, "out of bounds"), (slice(3, 3), "selects no cells"), ((0, 0), "2 entries for a 1-D"),
])  # fmt: skip
def test_bad_indices_say_why(key, match):  # a step of 2 reads: tests/globalview/test_strided.py
    with pytest.raises(pgas.IndexingError, match=match):
        _array(5)[key]


def test_expressions_keep_shape_and_dtype():
    u = _array()
    v = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    assert isinstance(v, Op) and isinstance(u[1:], Leaf) and v.shape == (6,)
    assert v.dtype == np.float32 and (u[1:] > 2).dtype == np.bool_
    assert (2 * u).weak is False and len(v.leaves()) == 3
    with pytest.raises(pgas.ShapeMismatchError, match="shapes"):
        u[1:] + u[2:]
    with pytest.raises(pgas.IndexingError, match="slice the array, not an expression"):
        (u + u)[1:]
    with pytest.raises(pgas.ConversionError, match="cannot become a NumPy array"):
        np.asarray(u[1:])


def test_shift_composes_and_reads_the_boundary():
    u = _array(6, boundary=pgas.Dirichlet(-1.0))
    np.testing.assert_array_equal(pgas.shift(u, 2).to_array().to_numpy(),
                                  [-1, -1, 0, 1, 2, 3])  # fmt: skip
    s = pgas.shift(pgas.shift(u, 1), -1)
    assert isinstance(s, Leaf) and s.window.start == (0,)
    with pytest.raises(pgas.IndexingError, match="out of range"):
        pgas.shift(u, 1, axis=1)
    with pytest.raises(pgas.IndexingError, match="GlobalArray or View"):
        pgas.shift(np.zeros(3), 1)


def test_shift_of_an_expression_keeps_it_whole():
    g = pgas.zeros((6, 8), pgas.make_mesh(("y", "x"), shape=(1, 2), devices=2))
    rows = g + pgas.shift(g, 1, 1) + pgas.shift(g, -1, 1)
    up = pgas.shift(rows, 1, 0)
    assert isinstance(up, Shifted) and up.inner is rows and up.offsets == (1, 0)
    diagonal = pgas.shift(up, -2, 1)
    assert diagonal.inner is rows and diagonal.offsets == (1, -2) and up.offsets == (1, 0)
    assert pgas.shift(up, -1, 0) is rows and pgas.shift(up, 0, 1) is up
    assert isinstance(pgas.shift(g, 1, 0), Leaf) and up.operands() == (rows,)
    assert [leaf.window.start for leaf in diagonal.leaves()] == [(-1, 2), (-1, 1), (-1, 3)]
    n = rows + up + pgas.shift(rows, -1, 0) - g  # the halo it needs: the 8 neighbours'
    whole = normalize_index(..., (6, 8))
    neighbours = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1) for dy in (-1, 0, 1)
                     for dx in (-1, 0, 1) if (dy, dx) != (0, 0))  # fmt: skip
    assert [r.widths for r in collect(g, whole, n)] == [(1, 1)]
    assert [r.widths for r in collect(g, whole, neighbours)] == [(1, 1)]
    assert (up.shape, up.dtype, up.weak) == (rows.shape, rows.dtype, rows.weak)


def test_where_apply_astype_and_operands():
    u = _array(5)
    u[...] = pgas.where(u > 2, pgas.apply(jnp.sqrt, u * 4), u.astype("float32"))
    expected = np.where(np.arange(5) > 2, np.sqrt(np.arange(5, dtype=np.float32) * 4), np.arange(5))
    np.testing.assert_array_equal(u.to_numpy(), expected.astype(np.float32))
    with pytest.raises(pgas.IndexingError, match="cannot combine a pgas view with ndarray"):
        u + np.ones(5)
    assert isinstance(u.as_view(), View) and repr(u[1:]) == "View(shape=(4,), dtype=float32)"
