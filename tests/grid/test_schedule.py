"""pgas.schedule: the checks of snapshot_every / chunk and where a loop stops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pgas.errors import PgasError
from pgas.grid.schedule import check_schedule, check_steps, groups, segments


def test_check_schedule_defaults_and_values():
    assert check_schedule(0) == (None, None)
    assert check_schedule(12, 3) == (3, 3)  # chunk defaults to snapshot_every
    assert check_schedule(12, 3, 6) == (3, 6)
    assert check_schedule(12, None, 5) == (None, 5)  # chunk alone need not divide steps
    assert check_schedule(np.int64(12), np.int32(4)) == (4, 4)  # any integral value
    with pytest.raises(PgasError, match="not a float"):  # operator.index: no whole floats
        check_schedule(12, 4.0)


@pytest.mark.parametrize(
    "args, match",
    [
        ((-1,), r"steps = -1: give a whole number >= 0"),
        ((2.5,), r"steps = 2.5: give a whole number >= 0"),
        ((10, 0), r"snapshot_every = 0: give a whole number >= 1"),
        ((10, True), r"snapshot_every = True: give a whole number >= 1"),
        ((10, None, -2), r"chunk = -2: give a whole number >= 1"),
        ((10, 3), r"snapshot_every = 3 does not divide steps = 10; .* steps = 12"),
        ((12, 4, 6), r"chunk = 6 must be a multiple of snapshot_every = 4"),
        ((10, "2"), r"snapshot_every = '2'"),
    ],
)
def test_errors(args, match):
    with pytest.raises(PgasError, match=match):
        check_schedule(*args)


def test_check_steps():
    assert check_steps(0) == 0 and check_steps(np.int32(5)) == 5
    with pytest.raises(PgasError, match="steps = 'x'"):
        check_steps("x")


def test_segments():
    assert segments(0, 2, 4) == ()
    assert segments(7) == (7,)
    assert segments(12, 3, 6) == (3, 6, 9, 12)
    assert segments(10, None, 4) == (4, 8, 10)  # the last callback comes at the end
    assert segments(4, None, 10) == (4,)


@pytest.mark.parametrize("steps, k", list(itertools.product([0, 1, 7, 16, 23], [1, 3, 8, 30])))
def test_groups_cover_the_steps(steps, k):
    sizes = list(groups(steps, k))
    assert sum(sizes) == steps
    assert all(1 <= s <= k for s in sizes)
    assert sizes[:-1] == [k] * (len(sizes) - 1)  # only the last may be shorter


def test_groups_never_cross_a_stop():
    """Snapshot every 5, chunk 10, k = 4: exchanges at 0, 4, 5, 9, 10, 14, 15, 19."""
    starts, done = [], 0
    for stop in segments(20, 5, 10):
        for size in groups(stop - done, 4):
            starts.append(done)
            done += size
        assert done == stop
    assert starts == [0, 4, 5, 9, 10, 14, 15, 19]
    with pytest.raises(PgasError, match="steps_per_exchange = 0"):
        list(groups(5, 0))
