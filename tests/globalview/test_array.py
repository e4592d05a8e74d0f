"""GlobalArray: construction, the pytree, functional updates, gathering."""

import jax
import numpy as np
import pytest

import pgas


def test_construction_and_description():
    mesh = pgas.make_mesh(("x",), devices=3)
    u = pgas.from_function(lambda i: i * 2, (10,), mesh, dtype="int32", halo=1)
    assert u.shape == (10,) and u.ndim == 1 and u.dtype == np.int32 and u.data.shape == (12,)
    np.testing.assert_array_equal(u.to_numpy(), np.arange(10) * 2)
    assert "mesh={'x': 3}" in repr(u)
    with pytest.raises(pgas.LayoutError, match="dtype = complex64"):
        pgas.zeros((4,), mesh, dtype="complex64")


def test_pytree_round_trip_keeps_the_layout():
    u = pgas.zeros((6,), pgas.make_mesh(devices=1), boundary=pgas.Neumann())
    leaves, tree = jax.tree.flatten(u)
    v = jax.tree.unflatten(tree, leaves)
    assert v.layout == u.layout and v.ext is None and len(leaves) == 1


def test_at_set_returns_a_new_array():
    u = pgas.from_numpy(np.zeros(5), pgas.make_mesh(devices=1))
    v = u.at[1:3].set(7.0)
    assert u.to_numpy().tolist() == [0, 0, 0, 0, 0] and v.to_numpy().tolist() == [0, 7, 7, 0, 0]


def test_stacked_snapshots_cannot_be_indexed():
    u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    _, snaps = pgas.run(lambda u: u, u, 2, snapshot_every=1)
    assert snaps.shape == (2, 4)
    with pytest.raises(pgas.IndexingError, match="stacked snapshots"):
        snaps[1:]
