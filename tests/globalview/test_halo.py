"""Halo exchange in the global view, against np.pad, on even and uneven blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.globalview.halo import edges, exchange, extend, refill, refill_mirror
from pgas.grid.decomposition import BlockAxis

MODES = {pgas.Periodic: "wrap", pgas.Neumann: "symmetric", pgas.Keep: "symmetric"}


def _padded(x, bc, w):
    if isinstance(bc, pgas.Dirichlet):
        return np.pad(x, w, mode="constant", constant_values=bc.value)
    return np.pad(x, w, mode=MODES[type(bc)])


@pytest.mark.parametrize("n, parts", [(12, 3), (10, 4), (7, 7), (9, 1)])
@pytest.mark.parametrize("bc", [pgas.Periodic(), pgas.Dirichlet(-5.0), pgas.Neumann(), pgas.Keep()])
def test_every_block_sees_np_pad(n, parts, bc):
    x = np.arange(n, dtype=np.float32) * 1.5
    grid = BlockAxis(n, parts)
    w = min(2, grid.min_length)
    blocks = np.zeros((parts, grid.block), np.float32)
    for b in range(parts):
        blocks[b, : grid.length(b)] = x[grid.offset(b) : grid.offset(b) + grid.length(b)]
    ext = np.asarray(extend(jnp.asarray(blocks), 0, w, grid, (bc, bc),
                            jnp.arange(parts).reshape(parts, 1)))  # fmt: skip
    full = _padded(x, bc, w)
    for b in range(parts):
        length, off = grid.length(b), grid.offset(b)
        np.testing.assert_array_equal(ext[b, : length + 2 * w], full[off : off + length + 2 * w])


@pytest.mark.parametrize("n, parts", [(12, 3), (10, 4), (7, 7), (9, 1)])
@pytest.mark.parametrize("bc", [pgas.Periodic(), pgas.Dirichlet(-5.0), pgas.Neumann(), pgas.Keep()])
@pytest.mark.parametrize("inner", [False, True], ids=["whole", "inner"])
def test_refill_writes_what_extend_builds(n, parts, bc, inner):
    """In place, the innermost ``w`` halo cells of a buffer that has room for ``have``."""
    x = np.arange(n, dtype=np.float32) * 1.5 + 1
    grid = BlockAxis(n, parts)
    w = min(2, grid.min_length)
    have = w + 1 if inner else w
    blocks = np.zeros((parts, grid.block), np.float32)
    for b in range(parts):
        blocks[b, : grid.length(b)] = x[grid.offset(b) : grid.offset(b) + grid.length(b)]
    number = jnp.arange(parts).reshape(parts, 1)
    want = np.asarray(extend(jnp.asarray(blocks), 0, w, grid, (bc, bc), number))
    buffer = np.full((parts, grid.block + 2 * have), np.nan, np.float32)  # stale halo cells
    buffer[:, have : have + grid.block] = blocks
    got = np.asarray(refill(jnp.asarray(buffer), 0, w, grid, (bc, bc), number))
    cut = have - w
    for b in range(parts):
        size = grid.length(b) + 2 * w
        np.testing.assert_array_equal(got[b, cut : cut + size], want[b, :size])
        assert np.isnan(got[b, :cut]).all()  # nothing outside the innermost w is written


def test_uneven_blocks_are_extended_by_one_concatenation():
    """A short block's halo sits before its padding cell; only that tail differs from a
    long block's, so the extended array is built once (not once per block length)."""
    grid, bc = BlockAxis(10, 4), pgas.Dirichlet(0.0)  # blocks of 3, 3, 2, 2
    blocks, number = jnp.zeros((4, 3, 5)), jnp.arange(4).reshape(4, 1, 1)
    jaxpr = jax.make_jaxpr(lambda b: extend(b, 0, 1, grid, (bc, bc), number))(blocks).jaxpr
    whole = [e for e in jaxpr.eqns if e.outvars[0].aval.shape == (4, 5, 5)]
    assert [e.primitive.name for e in whole] == ["concatenate"]


def test_edges_skip_the_padding_of_short_blocks():
    grid = BlockAxis(5, 2)  # blocks of 3 and 2 cells, stored as 3
    blocks = jnp.array([[0.0, 1.0, 2.0], [3.0, 4.0, 99.0]])
    first, last = edges(blocks, 0, 1, grid, jnp.arange(2).reshape(2, 1))
    assert first.tolist() == [[0.0], [3.0]] and last.tolist() == [[2.0], [4.0]]


def test_non_periodic_exchange_sends_nothing_across_the_edge():
    mesh = pgas.make_mesh(("x",), devices=4)
    u = pgas.from_numpy(np.arange(16.0, dtype=np.float32), mesh, boundary=pgas.Dirichlet(0.0))

    def slabs(data):
        blocks = u.layout.to_blocks(data)
        first, last = edges(blocks, 0, 1, u.layout.axes[0], u.layout.block_iota(0))
        return exchange(first, last, 0, u.layout.axes[0], u.layout.boundary[0],
                        u.layout.block_iota(0))  # fmt: skip

    hlo = jax.jit(slabs).lower(u.data).compile().as_text()
    pairs = [line.split("source_target_pairs=")[1].split("}}")[0] for line in hlo.splitlines()
             if "collective-permute(" in line]  # fmt: skip
    assert len(pairs) == 2 and all(p.count("{") == 4 for p in pairs)  # 3 pairs each: D - 1
    left, right = jax.jit(slabs)(u.data)
    assert np.asarray(left).ravel().tolist() == [0.0, 3.0, 7.0, 11.0]
    assert np.asarray(right).ravel().tolist() == [4.0, 8.0, 12.0, 0.0]


def test_refill_mirror_only_touches_neumann_faces():
    e = jnp.array([[9.0, 1.0, 2.0, 3.0, 9.0]])
    one = jnp.zeros((1, 1), jnp.int32)
    out = refill_mirror(e, 0, 1, BlockAxis(3, 1), (pgas.Neumann(), pgas.Dirichlet(9.0)), one)
    assert out.tolist() == [[1.0, 1.0, 2.0, 3.0, 9.0]]
