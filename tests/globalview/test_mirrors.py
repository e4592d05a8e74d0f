"""Ghost cells beyond a Neumann face: re-filled at once, or deferred and re-filled on read."""

import numpy as np

import pgas
from pgas.globalview.mirrors import Mirrors, deferring_mirrors, fresh, mirror, mirror_or_defer


def _case(width: int):
    """A Neumann array of 8 cells over 2 devices, its blocks extended by ``width`` cells
    of 99 on each side (stale ghosts and halo cells), and the NumPy answer: ghost cell
    ``-1 - j`` beyond a face is cell ``j`` again; the halo cells between blocks stay."""
    x = np.arange(8.0)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=2), boundary=pgas.Neumann())
    stale = np.pad(x.reshape(2, 4), ((0, 0), (width, width)), constant_values=99.0)
    want = stale.copy()
    want[0, :width] = x[:width][::-1]
    want[1, -width:] = x[-width:][::-1]
    return u.layout, stale, want


def test_mirror_refills_only_the_ghosts_beyond_the_faces():
    for width in (1, 2):
        layout, stale, want = _case(width)
        got = mirror(stale, layout, ((width, width),))
        np.testing.assert_array_equal(np.asarray(got), want)
    layout, stale, want = _case(2)
    low_only = want.copy()
    low_only[1, -2:] = 99.0  # no cells above: the high face's ghosts are not in the domain
    np.testing.assert_array_equal(np.asarray(mirror(stale, layout, ((2, 0),))), low_only)


def test_outside_a_deferring_block_the_ghosts_are_refilled_at_once():
    layout, stale, want = _case(1)
    np.testing.assert_array_equal(np.asarray(mirror_or_defer(stale, layout, ((1, 1),))), want)
    assert fresh(stale) is stale  # nothing waits


def test_deferred_ghosts_wait_and_a_read_sees_them_refilled_once():
    layout, stale, want = _case(2)
    data = np.asarray(stale)
    with deferring_mirrors() as mirrors:
        assert isinstance(mirrors, Mirrors)
        assert mirror_or_defer(data, layout, ((2, 2),)) is data  # left as it was
        assert mirrors.waiting(data) == (layout, ((2, 2),))
        assert mirrors.waiting(data.copy()) is None  # keyed by the object itself
        first = fresh(data)
        np.testing.assert_array_equal(np.asarray(first), want)
        assert fresh(data) is first  # computed once
    assert fresh(data) is data  # the block ended: nothing waits


def test_place_refills_the_ghosts_in_the_buffer_by_slabs():
    layout, stale, want = _case(1)
    buffer = np.full((2, 8), -1.0)
    buffer[:, 1:7] = stale  # data written at index (0, 1) of a wider buffer
    with deferring_mirrors() as mirrors:
        mirror_or_defer(stale, layout, ((1, 1),))
        placed = np.asarray(mirrors.place(stale, buffer, [0, 1]))
        assert mirrors.place(stale.copy(), buffer, [0, 1]) is buffer  # nothing waits for it
    np.testing.assert_array_equal(placed[:, 1:7], want)
    np.testing.assert_array_equal(placed[:, [0, 7]], -1.0)  # the rest of the buffer as it was
