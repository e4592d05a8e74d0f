"""Picks, runs and moves of strided slices (Python integers only: no array, no compile)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgas
from pgas.grid.decomposition import BlockAxis
from pgas.grid.layout import make_layout
from pgas.grid.strides import Pick, coarse_layout, held, is_strided, moves, parse, traffic


@st.composite
def copies(draw):
    """Two block distributions over one mesh axis and a pick of each, of one count."""
    parts = draw(st.integers(1, 6))
    count = draw(st.integers(parts, 30))
    picks = []
    for _ in range(2):
        step, start = draw(st.integers(1, 4)), draw(st.integers(0, 5))
        size = draw(st.integers(max(start + step * (count - 1) + 1, parts), 130))
        picks.append((BlockAxis(size, parts), Pick(start, step, count)))
    return picks


@settings(max_examples=200, deadline=None)
@given(copies())
def test_moves_take_every_picked_cell_once_to_its_block(copy):
    (src, p), (dst, q) = copy
    source, target = held(src, p), held(dst, q)
    for axis, pick, runs in ((src, p, source), (dst, q, target)):
        owner = [b for b, r in enumerate(runs) for _ in range(r.count)]  # block of each j
        assert owner == sorted(owner) and len(owner) == pick.count
        for b, r in enumerate(runs):
            cells = [pick.start + pick.step * j for j in range(r.first, r.first + r.count)]
            assert all(axis.offset(b) <= c < axis.offset(b) + axis.length(b) for c in cells)
            assert not r.count or r.at == cells[0] - axis.offset(b)
    got = {}  # j -> (sender, receiver)
    for m in moves(source, target):
        assert m.length == max(m.cells) > 0
        for s, t in m.pairs:
            assert t - s == m.shift
            for i in range(m.cells[t]):
                j = source[s].first + m.sent_from[s] + i
                assert j == target[t].first + m.placed_at[t] + i and j not in got
                got[j] = (s, t)
    owner_src = [b for b, r in enumerate(source) for _ in range(r.count)]
    owner_dst = [b for b, r in enumerate(target) for _ in range(r.count)]
    assert got == {j: (owner_src[j], owner_dst[j]) for j in range(p.count)}


def test_whole_axis_picks_move_at_most_two_cells_a_side():
    """u[k::s] onto an array of its own size (and back), split the MPI way: halo-sized."""
    for parts in range(1, 9):
        for size in [*range(parts, 120), 1025, 4096, 10**6 + 3]:
            for step in (2, 3):
                for start in range(step):
                    p = Pick(start, step, len(range(start, size, step)))
                    if p.count < parts:
                        continue
                    fine = held(BlockAxis(size, parts), p)
                    coarse = held(BlockAxis(p.count, parts), Pick(0, 1, p.count))
                    assert max(traffic(moves(fine, coarse))) <= 2
                    assert max(traffic(moves(coarse, fine))) <= 2


def test_aligned_picks_stay():
    """9 cells over 2 blocks: u[::2] falls in the coarse array's own blocks, nothing moves."""
    (m,) = moves(held(BlockAxis(9, 2), Pick(0, 2, 5)), held(BlockAxis(5, 2), Pick(0, 1, 5)))
    assert m.stays and traffic((m,)) == (0, 0)


def test_is_strided():
    assert is_strided((slice(None), slice(1, None, 2))) and is_strided(slice(None, None, -1))
    assert is_strided(slice(None, None, 2.0)) and is_strided(slice(None, None, True))
    assert not is_strided((slice(1, -1), 0, Ellipsis)) and not is_strided(slice(0, 4, 1))


def test_parse_reads_as_numpy():
    for key in [slice(None, None, 2), slice(1, -1, 3), slice(-4, None, 2), slice(2, 100, 5)]:
        (p,) = parse(key, (11,))
        assert list(p.cells) == list(range(11))[key]
    assert parse((Ellipsis, slice(1, None, 2)), (4, 5, 6))[0] == Pick(0, 1, 4)


@pytest.mark.parametrize("key, match", [
    (slice(None, None, -1), "step = -1: pgas slices with steps >= 1.*np.flip"),
    (slice(None, None, 0), "step = 0: give a step >= 1"),
    (slice(None, None, 2.0), r"step = 2.0 \(float\): give a static Python integer >= 1"),
    (slice(None, None, np.float32(2)), "step = .*float32.*static Python integer"),
    ((slice(None, None, 2), 3), "index 3 on axis 1 beside a strided slice.*3:4"),
    ((slice(None, None, 2), None), "index None on axis 1 beside a strided slice.*a:b"),
    (slice(1.5, None, 2), r"start of index 0 = 1.5 \(float\)"),
    (slice(7, None, 2), "picks no cell on axis 0"),
    ((slice(None, None, 2),) * 3, "3 entries for a 2-D array"),
    ((Ellipsis, slice(None, None, 2), Ellipsis), "more than one"),
])  # fmt: skip
def test_parse_errors_name_the_value_and_the_fix(key, match):
    with pytest.raises(pgas.IndexingError, match=match):
        parse(key, (7, 5))


def _layout(shape, boundary, halo=None, devices=1):
    return make_layout(shape, pgas.make_mesh(("x",), devices=devices), None, boundary, halo)


def test_coarse_layout_carries_conditions_and_halo():
    lay = _layout((9, 8), [pgas.Dirichlet(2.0), (pgas.Neumann(), pgas.Keep())], halo=(2, 1))
    c = coarse_layout(lay, parse((slice(None, None, 2), slice(1, None, 2)), lay.shape))
    assert c.shape == (5, 4) and c.boundary == lay.boundary and c.halo == (2, 1)
    assert c.mesh is lay.mesh and c.spec == lay.spec
    wide = _layout((12,), pgas.Keep(), halo=3, devices=2)  # coarse blocks of 2: halo dropped
    assert coarse_layout(wide, parse(slice(None, None, 3), (12,))).halo == (None,)


def test_coarse_layout_of_a_periodic_axis():
    lay = _layout((10, 9), pgas.Periodic())
    c = coarse_layout(lay, parse((slice(1, None, 2), slice(None, None, 3)), lay.shape))
    assert c.periodic(0) and c.periodic(1)  # 5 x 2 = 10 and 3 x 3 = 9: whole periods
    with pytest.raises(pgas.IndexingError, match="axis 1 is periodic with 9 cells.*boundary="):
        coarse_layout(lay, parse((slice(None), slice(None, None, 2)), lay.shape))
    c = coarse_layout(lay, parse((slice(None), slice(None, None, 2)), lay.shape), pgas.Neumann())
    assert not c.periodic(1) and c.boundary[1] == (pgas.Neumann(), pgas.Neumann())


def test_coarse_layout_needs_a_cell_per_device():
    lay = _layout((8,), pgas.Keep(), devices=3)
    with pytest.raises(pgas.LayoutError, match="picks 2 cell.*fewer than the 3 devices"):
        coarse_layout(lay, parse(slice(None, None, 4), (8,)))
