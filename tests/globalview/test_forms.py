"""An array's forms: blocks, physical and extended blocks, against NumPy reshapes and slices."""

import jax
import numpy as np

import pgas
from pgas.globalview.forms import anchor_of, blocks_of, crop, narrowed, physical_of, sides_kept
from pgas.loop.frames import frames


def _periodic_frames(x: np.ndarray, devices: int, e: int) -> np.ndarray:
    """Each block of a periodic 1-D array with ``e`` cells of its neighbours on each side."""
    b = x.size // devices
    return np.stack([x[np.arange(i * b - e, (i + 1) * b + e) % x.size] for i in range(devices)])


def test_blocks_of_a_physical_array_is_its_reshape():
    x = np.arange(64.0).reshape(8, 8)
    g = pgas.from_numpy(x, pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4))
    data, sides = blocks_of(g)
    assert sides == ((0, 0), (0, 0)) == sides_kept(g)
    np.testing.assert_array_equal(np.asarray(data), x.reshape(2, 4, 2, 4))
    assert physical_of(g) is g.data


def test_extended_blocks_hold_the_neighbours_and_their_own_cells_come_back():
    x = np.arange(12.0)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=3))  # periodic by default
    f = frames(u, (2,))
    data, sides = blocks_of(f)
    assert sides == ((2, 2),) == sides_kept(f)
    np.testing.assert_array_equal(np.asarray(data), _periodic_frames(x, 3, 2))
    np.testing.assert_array_equal(np.asarray(physical_of(f)), x)  # bit for bit


def test_narrowed_and_crop_cut_each_side_like_numpy_slices():
    x = np.arange(12.0)
    data = frames(pgas.from_numpy(x, pgas.make_mesh(("x",), devices=3)), (2,)).data
    want = _periodic_frames(x, 3, 2)
    np.testing.assert_array_equal(np.asarray(narrowed(data, ((2, 2),), ((1, 0),))),
                                  want[:, 1:-2])  # fmt: skip
    np.testing.assert_array_equal(np.asarray(narrowed(data, ((2, 2),), ((2, 2),))), want)
    two = np.arange(2 * 5 * 3 * 6).reshape(2, 5, 3, 6)
    np.testing.assert_array_equal(np.asarray(crop(two, [1, 0], [2, 3])), two[:, 1:-2, :, :-3])
    assert crop(np.float32(2.5), [1], [1]) == np.float32(2.5)  # no window: as it is


def test_anchor_is_zero_for_every_counter_also_when_traced():
    for counter in (0, 1, 12345, 2**31 - 1):
        assert int(anchor_of(np.int32(counter))) == 0
    out = jax.jit(lambda i: anchor_of(i) + i)(np.int32(7))
    assert int(out) == 7 and out.dtype == np.int32
