"""Bit-packed Game of Life: 64 cells per uint64 word along x, on every backend.

    python examples/life/life.py --packed --size 8192x8192 --steps 100    # (life.py's flag)
    pgas compare examples/life/packed.py:problem --devices 4 --steps 50 --set size=512x700

The board of the byte example (:mod:`life`) stored as bits: cell ``x`` of a row
is bit ``x % 64`` of word ``x // 64`` (bit 0 is the least significant), so a row
of ``W`` cells is ``W / 64`` words and the field is ``uint64[H, W / 64]`` on the
same ``("y", "x")`` mesh, periodic in both directions. A step shifts words left
and right by one bit, carrying the edge bit in from the neighbouring word (the
only word-level neighbours: a halo of one word per side), and counts the 8
neighbours of 64 cells at once with bitwise full adders. Every backend runs the
same adders: :func:`step_for` in the global view (``pgas.shift``), :func:`kernel_for`
on a block with one word of halo (explicit and MPI).

Widths that are not a multiple of 64 (*ragged* packing). Then the torus seam
would fall inside the last word, and the wrap-around neighbour of cell 0 would
be a padding bit. Instead the row is split into ``ceil(W / 63)`` words whose
lengths differ by at most one, like the MPI block distribution: the first
``W % words`` words hold ``bits + 1`` cells, the others ``bits``. Bit 63 of a
word is a flag, set on the words that hold ``bits + 1`` cells, so every word
says how long it is, and a kernel needs no global index: the carry from the
west neighbour is that neighbour's last cell, wherever it sits. Bits between a
word's length and the flag stay zero. The seam then falls between two words,
so any width works; a ragged step costs a few more operations per word.

``problem()`` is a :class:`pgas.problem.Problem` whose ``decode`` is the
:class:`Packing` itself: a ``pgas.io.blocks.Decoding`` that turns any block of
words back into its uint8 cells and says where in the board they sit (a block's
cells start where its first word does), so snapshots, checksums, populations and
plots equal the byte example's bit for bit on every mesh; the initial words are
built from global word indices (``life.initial_fn``), so no process holds the
whole board.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from pathlib import Path

import numpy as np

import pgas
from pgas.app.problem import Problem
from pgas.errors import PgasError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # life.py, beside this file
import life  # noqa: E402

__all__ = ["Packing", "PackingError", "packing", "pack", "unpack", "step_for", "kernel_for",
           "words_fn", "problem", "check_mesh", "check_words", "enable_x64"]  # fmt: skip

WORD = 64
FLAG = np.uint64(1 << 63)  # ragged packing: "this word holds bits + 1 cells"
CELLS = np.uint64((1 << 63) - 1)


class PackingError(PgasError):
    """A board, a word array or a mesh that the packed Life cannot use."""


# ---- Packing ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Packing:
    """How one row of ``width`` cells sits in ``words`` uint64 words.

    Attributes:
        width: cells per row.
        words: words per row.
        bits: cells per word (64 when ``width % 64 == 0``; else the shorter length).
        extra: ragged packing only: the first ``extra`` words hold ``bits + 1`` cells.

    >>> packing(8192)
    Packing(width=8192, words=128, bits=64, extra=0)
    >>> p = packing(100)
    >>> p, p.lengths().tolist(), p.starts().tolist()
    (Packing(width=100, words=2, bits=50, extra=0), [50, 50], [0, 50])
    """

    width: int
    words: int
    bits: int
    extra: int

    @property
    def ragged(self) -> bool:
        """True unless every word holds 64 cells."""
        return self.bits != WORD

    def lengths(self, j=None) -> np.ndarray:
        """Cells held by word ``j`` (default: every word of a row)."""
        j = np.arange(self.words) if j is None else np.asarray(j)
        return self.bits + (j < self.extra)

    def starts(self, j=None) -> np.ndarray:
        """Cell index ``x`` of bit 0 of word ``j``."""
        j = np.arange(self.words) if j is None else np.asarray(j)
        return j * self.bits + np.minimum(j, self.extra)

    def __call__(self, words: np.ndarray) -> np.ndarray:
        """:meth:`decode`: a packing is the problem's decoding (``pgas.io.blocks.Decoding``)."""
        return self.decode(words)

    def region(self, region: tuple[slice, ...]) -> tuple[slice, ...]:
        """The cells of the words at ``region`` (rows, word columns): rows, cell columns.

        Words hold 63 or 64 cells, so a block's cells start where its first word does
        (:meth:`starts`), not at a fixed multiple of its first word's index.

        >>> packing(130).region((slice(0, 2), slice(1, 3)))  # words of 44, 43, 43 cells
        (slice(0, 2, None), slice(44, 130, None))
        """
        *rows, cols = region
        return (*rows, slice(int(self.starts(cols.start)), int(self.starts(cols.stop))))

    def decode(self, words: np.ndarray) -> np.ndarray:
        """Words ``[..., rows, n]`` -> uint8 cells ``[..., rows, cells]`` (whole words only).

        Any run of whole word columns decodes (a block, or the whole board): a
        word's length is 64, or ``bits`` plus its flag.
        """
        w = np.ascontiguousarray(words, dtype="<u8")
        bits = np.unpackbits(w.view(np.uint8), axis=-1, bitorder="little")
        if not self.ragged:
            return bits
        first = w.reshape(-1, w.shape[-1])[0] if w.size else np.zeros(w.shape[-1], "<u8")
        lengths = self.bits + (first >> np.uint64(63)).astype(np.int64)
        j = np.repeat(np.arange(w.shape[-1]), lengths)
        k = np.arange(j.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return bits[..., j * WORD + k]


def packing(width: int) -> Packing:
    """The packing of a row of ``width`` cells (see the module docstring).

    >>> packing(130)
    Packing(width=130, words=3, bits=43, extra=1)
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise PackingError(f"width = {width!r}: give the board width as a whole number >= 1")
    width = int(width)
    if width % WORD == 0:
        return Packing(width, width // WORD, WORD, 0)
    words = -(-width // (WORD - 1))  # <= 63 cells per word: bit 63 is the flag
    return Packing(width, words, width // words, width % words)


def pack(board: np.ndarray) -> np.ndarray:
    """A board ``[y, x]`` (non-zero: alive) -> its words ``uint64[y, words]``.

    >>> w = pack(np.eye(3, 70, dtype=np.uint8))
    >>> w.shape, [hex(v) for v in w[:, 0]]
    ((3, 2), ['0x1', '0x2', '0x4'])
    >>> bool((unpack(w, 70) == np.eye(3, 70)).all())
    True
    """
    cells = np.asarray(board)
    if cells.ndim != 2:
        raise PackingError(f"board has shape {cells.shape}; pack takes a 2-D (y, x) board")
    pk = packing(cells.shape[1])
    x = np.arange(pk.width)
    j = np.repeat(np.arange(pk.words), pk.lengths())
    bits = np.zeros((cells.shape[0], pk.words * WORD), np.uint8)
    bits[:, j * WORD + x - pk.starts(j)] = cells != 0
    words = np.packbits(bits, axis=-1, bitorder="little").view("<u8").astype(np.uint64)
    return words | _flags(pk, np.arange(pk.words))


def unpack(words: np.ndarray, width: int) -> np.ndarray:
    """Words ``[..., y, words]`` of a board ``width`` cells wide -> uint8 cells ``[..., y, width]``.

    >>> unpack(np.array([[5]], np.uint64), 3)
    array([[1, 0, 1]], dtype=uint8)
    """
    pk = packing(width)
    w = np.asarray(words)
    if w.ndim < 2 or w.shape[-1] != pk.words or w.dtype != np.uint64:
        raise PackingError(
            f"words have shape {w.shape} and dtype {w.dtype}; a board {width} cells wide is "
            f"uint64[..., rows, {pk.words}]: pass the words pack() or a packed run returned"
        )
    return pk.decode(w)


def _flags(pk: Packing, j) -> np.ndarray:
    return np.where(pk.lengths(j) > pk.bits, FLAG, np.uint64(0)).astype(np.uint64)


# ---- Numerics -----------------------------------------------------------------------------
# The same functions run on pgas views (global view), NumPy blocks (MPI) and jax.numpy
# blocks (explicit): shifts and bitwise operators only, constants as np.uint64.
def _west(pk: Packing, c, p):
    """Bit i: the cell west of bit i of word ``c`` (x - 1); ``p`` is the word to the west."""
    if not pk.ragged:
        return (c << 1) | (p >> 63)
    return (c << 1) | ((p >> ((p >> 63) + (pk.bits - 1))) & 1)  # p's last cell


def _east(pk: Packing, c, n):
    """Bit i: the cell east of bit i of word ``c`` (x + 1); ``n`` is the word to the east."""
    if not pk.ragged:
        return (c >> 1) | (n << 63)
    return ((c & CELLS) >> 1) | ((n & 1) << ((c >> 63) + (pk.bits - 1)))  # n's first cell


def _finish(pk: Packing, new, c):
    """Ragged packing: clear the bits past each word's length, keep its flag."""
    if not pk.ragged:
        return new
    short = np.uint64((1 << pk.bits) - 1)  # the first `bits` cells; the flag adds one more
    return (new & (((c >> 63) << pk.bits) | short)) | (c & FLAG)


def _rows(w, c, e):
    """Per row: w ^ e, w & e (the two side neighbours) and the 2-bit sum of w + c + e."""
    t, a = w ^ e, w & e
    return t, a, t ^ c, a | (t & c)


def _rule(c, up, mid, down):
    """B3/S23 from the 2-bit sums of the rows above and below and the middle row's sides.

    The count is ``s0 + 2k`` with k the weight-2 bits ``u1 + d1 + m1 + carry``;
    it is 2 or 3 exactly when k == 1, i.e. k odd (s1) and bit 1 of k clear (s2).
    """
    (u0, u1), (m0, m1), (d0, d1) = up, mid, down
    x = u0 ^ d0
    s0 = x ^ m0
    carry = (u0 & d0) | (x & m0)
    y, z = u1 ^ d1, m1 ^ carry
    s1 = y ^ z
    s2 = (u1 & d1) ^ (m1 & carry) ^ (y & z)
    return s1 & ~s2 & (s0 | c)


@functools.cache
def step_for(pk: Packing):
    """The global-view step on a ``uint64[H, words]`` GlobalArray (automatic path).

    >>> import pgas
    >>> enable_x64()  # uint64 words
    >>> w = pgas.from_numpy(pack(np.ones((3, 3), np.uint8)), pgas.make_mesh(("y", "x"), devices=1))
    >>> unpack(pgas.run(step_for(packing(3)), w, 1).to_numpy(), 3)
    array([[0, 0, 0],
           [0, 0, 0],
           [0, 0, 0]], dtype=uint8)
    """

    def life_packed(g):
        check_words(g.dtype)
        w, e = _west(pk, g, pgas.shift(g, 1, 1)), _east(pk, g, pgas.shift(g, -1, 1))
        t, a, s0, s1 = _rows(w, g, e)
        up = (pgas.shift(s0, 1, 0), pgas.shift(s1, 1, 0))
        down = (pgas.shift(s0, -1, 0), pgas.shift(s1, -1, 0))
        g[...] = _finish(pk, _rule(g, up, (t, a), down), g)
        return g

    return life_packed


@functools.cache
def kernel_for(pk: Packing):
    """The local kernel on a block of words with one word of halo per side (explicit, MPI).

    >>> e = np.zeros((5, 3), np.uint64); e[2, 1] = 7   # a blinker: bits 0..2 of one row
    >>> kernel_for(packing(64))(e)[:, 0].tolist()
    [2, 2, 2]
    """

    def kernel(e):
        check_words(e.dtype)
        c = e[:, 1:-1]
        w, ea = _west(pk, c, e[:, :-2]), _east(pk, c, e[:, 2:])
        t, a, s0, s1 = _rows(w, c, ea)
        mid = c[1:-1]
        new = _rule(mid, (s0[:-2], s1[:-2]), (t[1:-1], a[1:-1]), (s0[2:], s1[2:]))
        return _finish(pk, new, mid)

    return kernel


def check_mesh(pk: Packing, parts: int) -> None:
    """Raise :class:`PackingError` unless each of ``parts`` blocks along x gets a word.

    pgas itself refuses an array with fewer cells than devices along an axis
    (``LayoutError``); call this first for a message in cells and words.

    >>> try:
    ...     check_mesh(packing(64), 2)
    ... except PackingError as err:
    ...     print(str(err)[:55])
    a board 64 cells wide packs into 1 word(s) per row, but
    """
    if parts > pk.words:
        raise PackingError(
            f"a board {pk.width} cells wide packs into {pk.words} word(s) per row, but mesh "
            f"axis 'x' splits rows into {parts} parts and every part needs at least one "
            f"word; use a board at least {WORD * parts} cells wide, or at most {pk.words} "
            f"part(s) along x"
        )


def enable_x64() -> None:
    """64-bit JAX values, now or when JAX is first imported (no import here: MPI ranks)."""
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_enable_x64", True)
    else:
        os.environ["JAX_ENABLE_X64"] = "1"


def check_words(dtype) -> None:
    """Raise :class:`PackingError` unless the field holds uint64 words (64-bit JAX)."""
    if np.dtype(dtype) != np.uint64:
        raise PackingError(
            f"packed Life steps uint64 words, got {np.dtype(dtype)}; build the field with "
            f"dtype='uint64' after jax.config.update('jax_enable_x64', True) (JAX keeps "
            f"64-bit values only then)"
        )


# ---- Initial conditions -------------------------------------------------------------------
def words_fn(pk: Packing, cell_init):
    """``init(y, j)``: words at global rows ``y``, word columns ``j``, from ``cell_init(y, x)``.

    >>> f = words_fn(packing(130), lambda y, x: (x == 44) * 1)  # words of 44, 43, 43 cells
    >>> [hex(int(f(np.array(0), np.array(j)))) for j in range(3)]
    ['0x8000000000000000', '0x1', '0x0']
    """

    def init(y, j):
        y, j = np.asarray(y)[..., None], np.asarray(j)
        k = np.arange(WORD)
        valid = k < pk.lengths(j)[..., None]
        x = np.minimum(pk.starts(j)[..., None] + k, pk.width - 1)
        bits = ((np.asarray(cell_init(y, x)) != 0) & valid).astype(np.uint8)
        words = np.packbits(bits, axis=-1, bitorder="little").view("<u8")[..., 0]
        return words.astype(np.uint64) | _flags(pk, j)

    return init


def problem(size: str = "64x64", pattern: str = "random", at: str | None = None,
            density: float = 0.3, seed: int = 0) -> Problem:  # fmt: skip
    """Packed Life for every backend (``pgas compare examples/life/packed.py:problem``).

    The same board as ``life.problem`` with the same arguments; the field is
    its words, ``decode`` gives back the uint8 board. Switches JAX to 64-bit
    values (uint64 words need them; ``pgas.driver`` does the same for 8-byte
    dtypes, ``pgas.compare`` does not yet).

    >>> p = problem("4x100", "blinker")
    >>> p.shape, p.dtype, p.decode(p.init(*np.indices(p.shape))).sum()
    ((4, 2), 'uint64', np.uint64(3))
    """
    (rows, width), cell_init = life.initial_fn(size, pattern, at, density, seed)
    pk = packing(width)
    enable_x64()
    return Problem("life-packed", (rows, pk.words), "uint64", words_fn(pk, cell_init),
                   step_for(pk), kernel_for(pk), life.BOUNDARY, halo=1, region=None,
                   mesh_axes=("y", "x"), bytes_per_cell=16, decode=pk,
                   cell_shape=(rows, width))  # fmt: skip
