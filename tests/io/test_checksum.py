"""The checksum: a closed-form reference, blocks on any mesh, packed cells, one bit apart."""

import hashlib

import numpy as np
import pytest

import pgas
from pgas.io.checksum import checksum, checksum_pieces, combine, lanes

M = 2**64 - 1


def _splitmix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def _fmix(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M
    return x ^ (x >> 33)


def _reference(a: np.ndarray) -> str:
    """The module docstring's definition, one cell at a time with Python integers."""
    bits = np.ascontiguousarray(a).reshape(-1).view(f"u{a.dtype.itemsize}")
    lane_a = lane_b = 0
    for g, b in enumerate(bits.tolist()):
        lane_a = (lane_a + _splitmix(b ^ _splitmix((g * 0x9E3779B97F4A7C15 + 1) & M))) & M
        lane_b = (lane_b + _fmix((b + _fmix(g ^ 0xD6E8FEB86659FD93)) & M)) & M
    text = f"{a.shape}|{a.dtype.str}|{lane_a}|{lane_b}"
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8", "bool"])
def test_checksum_is_the_documented_sum_of_mixed_cells(dtype):
    a = (np.arange(35).reshape(5, 7) * 0.37 - 3).astype(dtype)
    assert checksum(a) == _reference(a)
    assert checksum(a.T) == _reference(np.ascontiguousarray(a.T))


def test_fields_one_bit_apart_differ():
    rng = np.random.default_rng(0)
    a = rng.random((9, 11))
    seen = {checksum(a)}
    for cell in [(0, 0), (4, 5), (8, 10)]:
        for bit in (0, 31, 63):
            b = a.copy()
            b.view(np.uint64)[cell] ^= np.uint64(1) << np.uint64(bit)
            seen.add(checksum(b))
    assert len(seen) == 1 + 9
    board = np.zeros((6, 6), np.uint8)
    moved = board.copy()
    moved[5, 5] = 1
    assert checksum(board) != checksum(moved)
    assert checksum(board) != checksum(board.reshape(4, 9))  # the shape counts
    assert checksum(board) != checksum(board.astype(np.int8))  # and the dtype


def test_swapped_cells_differ():
    a = np.arange(10.0)
    b = a.copy()
    b[[2, 7]] = b[[7, 2]]
    assert checksum(a) != checksum(b)


@pytest.mark.parametrize("grid", [(1, 1), (3, 1), (1, 3), (2, 2), (2, 3), (3, 2)])
def test_a_global_array_on_any_mesh_gives_the_numpy_checksum(grid):
    a = np.random.default_rng(1).random((7, 10))  # blocks of 7 and 10 over 2 or 3: uneven
    mesh = pgas.make_mesh(("y", "x"), grid, devices=int(np.prod(grid)))
    u = pgas.from_numpy(a, mesh)
    assert checksum(u) == checksum(a)


def test_packed_words_are_hashed_as_their_cells():
    board = (np.random.default_rng(2).random((5, 20)) < 0.4).astype(np.uint8)
    words = np.packbits(board, axis=-1, bitorder="little")  # (5, 3): 24 bits, 20 used
    unpack = lambda w: np.unpackbits(w, axis=-1, bitorder="little")  # noqa: E731
    for grid in [(1, 1), (1, 3), (2, 3)]:
        mesh = pgas.make_mesh(("y", "x"), grid, devices=int(np.prod(grid)))
        u = pgas.from_numpy(words, mesh)
        assert checksum(u, decode=unpack, shape=board.shape) == checksum(board)


def test_pieces_in_any_order_combine_to_the_whole():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)
    pieces = [((slice(2, 4), slice(0, 6)), a[2:]), ((slice(0, 2), slice(3, 6)), a[:2, 3:]),
              ((slice(0, 2), slice(0, 3)), a[:2, :3])]  # fmt: skip
    assert checksum_pieces(pieces, a.shape, a.dtype) == checksum(a)
    parts = [lanes(c, r, a.shape) for r, c in pieces]
    assert (combine(sum(parts)) == lanes(a, (slice(0, 4), slice(0, 6)), a.shape)).all()


def test_cells_wider_than_8_bytes_are_refused_with_the_fix():
    with pytest.raises(TypeError, match="dtype = complex128 has 16 bytes.*real and imaginary"):
        checksum(np.zeros(2, np.complex128))
