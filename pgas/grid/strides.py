"""Cells picked with a step, and how they move from one block distribution to another.

A strided slice ``start:stop:step`` of an axis picks ``count`` cells, ``start +
step * j`` for ``j = 0 .. count - 1`` (a :class:`Pick`). Over a block
distribution (:class:`~pgas.grid.decomposition.BlockAxis`) every block holds one
contiguous run of those ``j`` (:func:`held`: a :class:`Run`, possibly empty).

Copying the picked cells of one array into the picked cells of another (the same
mesh axis, the same count) moves each ``j`` from the block that holds it in the
source to the block that holds it in the target. Both sets of runs are contiguous
partitions of ``0 .. count - 1``, so every pair of blocks shares at most one
contiguous piece: :func:`moves` lists them by *shift* (target block minus source
block), one :class:`Move` per shift that carries cells, each a fixed-length
message from every sender to the block ``shift`` above it. For a restriction
``u[::2]`` or a prolongation ``u[1::2] = c`` between two arrays split the MPI way
(:mod:`pgas.grid.decomposition`), the runs differ by at most two cells at each
block edge: messages a halo's worth, to the next block (or the one after, where
the coarse blocks are a cell or two wide).
A slice of a part of the axis (``u[40:60:2]``) moves its cells farther, still
only the picked cells.

:func:`parse` reads the picks of a NumPy index (``u[1::2, ::2]``), with a clear
error for what cannot be picked this way; :func:`coarse_layout` lays the picked
cells out as an array of their own (the conditions it carries:
:mod:`pgas.globalview.strided`).

Contract: descriptions only, Python integers; nothing here touches an array.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pgas.errors import IndexingError, LayoutError
from pgas.grid.boundary import normalize_boundary
from pgas.grid.decomposition import BlockAxis
from pgas.grid.layout import Layout, make_layout

__all__ = ["Pick", "Run", "Move", "held", "moves", "traffic", "is_strided", "parse",
           "coarse_layout"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Pick:
    """The cells ``start + step * j``, ``j = 0 .. count - 1``, of one axis.

    Attributes:
        start: first cell (>= 0).
        step: distance between picked cells (>= 1).
        count: cells picked (>= 1).

    >>> p = Pick(1, 2, 4)
    >>> list(p.cells), p.last
    ([1, 3, 5, 7], 7)
    """

    start: int
    step: int
    count: int

    @property
    def last(self) -> int:
        """The last cell picked."""
        return self.start + self.step * (self.count - 1)

    @property
    def cells(self) -> range:
        """The picked cells."""
        return range(self.start, self.last + 1, self.step)

    def below(self, cell: int) -> int:
        """How many picked cells lie below global cell ``cell``.

        >>> Pick(1, 2, 4).below(4), Pick(1, 2, 4).below(0), Pick(1, 2, 4).below(99)
        (2, 0, 4)
        """
        return min(max(-(-(cell - self.start) // self.step), 0), self.count)


@dataclasses.dataclass(frozen=True)
class Run:
    """The picked cells one block holds: ``j = first .. first + count - 1``.

    Attributes:
        first: the first ``j`` (where an empty run would start).
        count: how many (0: none).
        at: the block's own cell of the first one (0 for an empty run).
    """

    first: int
    count: int
    at: int


def held(axis: BlockAxis, pick: Pick) -> tuple[Run, ...]:
    """The run of picked cells each block of ``axis`` holds.

    >>> [(r.first, r.count, r.at) for r in held(BlockAxis(10, 3), Pick(1, 2, 5))]
    [(0, 2, 1), (2, 1, 1), (3, 2, 0)]
    """
    out = []
    for b in range(axis.parts):
        lo, hi = axis.offset(b), axis.offset(b) + axis.length(b)
        first, end = pick.below(lo), pick.below(hi)
        at = pick.start + pick.step * first - lo if end > first else 0
        out.append(Run(first, end - first, at))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Move:
    """The pieces every block sends to the block ``shift`` above it (below, if negative).

    Each entry of the per-block tuples is for one block number; a block that sends
    or receives nothing at this shift has 0 there.

    Attributes:
        shift: receiving block minus sending block.
        length: cells of the longest piece (every message has that length).
        pairs: ``(sender, receiver)`` of every piece of at least one cell.
        sent_from: per sender, where its piece starts in its own run.
        placed_at: per receiver, where the piece goes in its run.
        cells: per receiver, the cells of its piece.
    """

    shift: int
    length: int
    pairs: tuple[tuple[int, int], ...]
    sent_from: tuple[int, ...]
    placed_at: tuple[int, ...]
    cells: tuple[int, ...]

    @property
    def stays(self) -> bool:
        """Every block keeps its own run where it is: nothing to move or place."""
        return self.shift == 0 and not any(self.sent_from) and not any(self.placed_at)


def moves(source: tuple[Run, ...], target: tuple[Run, ...]) -> tuple[Move, ...]:
    """The pieces that take the runs ``source`` to the runs ``target``, one :class:`Move`
    per shift that carries cells.

    >>> src = held(BlockAxis(10, 3), Pick(1, 2, 5))    # runs of 2, 1, 2 cells
    >>> dst = held(BlockAxis(5, 3), Pick(0, 1, 5))     # runs of 2, 2, 1 cells
    >>> [(m.shift, m.length, m.pairs) for m in moves(src, dst)]
    [(-1, 1, ((2, 1),)), (0, 2, ((0, 0), (1, 1), (2, 2)))]
    """
    parts = len(source)
    out = []
    for shift in range(-(parts - 1), parts):
        sent_from, placed_at, cells = [0] * parts, [0] * parts, [0] * parts
        pairs = []
        for t in range(parts):
            s = t - shift
            if not 0 <= s < parts:
                continue
            a = max(source[s].first, target[t].first)
            b = min(source[s].first + source[s].count, target[t].first + target[t].count)
            if b > a:
                sent_from[s], placed_at[t] = a - source[s].first, a - target[t].first
                cells[t] = b - a
                pairs.append((s, t))
        if pairs:
            out.append(Move(shift, max(cells), tuple(pairs), tuple(sent_from),
                            tuple(placed_at), tuple(cells)))  # fmt: skip
    return tuple(out)


def traffic(found: tuple[Move, ...]) -> tuple[int, int]:
    """``(below, above)``: the most cells one block receives from blocks below it and from
    blocks above it (what it must receive, however the messages are cut).

    >>> src, dst = held(BlockAxis(10, 3), Pick(1, 2, 5)), held(BlockAxis(5, 3), Pick(0, 1, 5))
    >>> traffic(moves(src, dst))
    (0, 1)
    """
    parts = max((len(m.cells) for m in found), default=0)
    below = [sum(m.cells[t] for m in found if m.shift > 0) for t in range(parts)]
    above = [sum(m.cells[t] for m in found if m.shift < 0) for t in range(parts)]
    return max(below, default=0), max(above, default=0)


# ---- picks from an index ---------------------------------------------------------------
def _integer(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_strided(key) -> bool:
    """Whether an index holds a slice whose step is given and is not 1.

    >>> is_strided(slice(None, None, 2)), is_strided((slice(1, -1), 0)), is_strided(slice(0.5))
    (True, False, False)
    """
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, slice) and k.step is not None
               and not (_integer(k.step) and k.step == 1) for k in keys)  # fmt: skip


def _bound(x, what: str) -> int | None:
    if x is None or _integer(x):
        return None if x is None else int(x)
    raise IndexingError(
        f"{what} = {x!r} ({type(x).__name__}): pgas needs static Python integers in slices "
        f"so the messages are known when compiling; use a literal or a constant"
    )


def _step(k: slice, axis: int) -> int:
    step = k.step
    if not _integer(step):
        raise IndexingError(
            f"slice {k} on axis {axis} has step = {step!r} ({type(step).__name__}): give a "
            f"static Python integer >= 1, e.g. u[::2] (the messages of a strided slice are "
            f"fixed when compiling)"
        )
    if step == 0:
        raise IndexingError(f"slice {k} on axis {axis} has step = 0: give a step >= 1, e.g. u[::2]")
    if step < 0:
        raise IndexingError(
            f"slice {k} on axis {axis} has step = {step}: pgas slices with steps >= 1 only (a "
            f"reversed axis would move every cell to another device, not a halo's worth); read "
            f"u[::{-step}] and reverse it on the host, np.flip(v.to_numpy(), {axis})"
        )
    return int(step)


def parse(key, shape: tuple[int, ...]) -> tuple[Pick, ...]:
    """The :class:`~pgas.grid.strides.Pick` of every axis of a strided index.

    Raises:
        IndexingError: a step below 1 or not a static integer, an integer or another
            index beside a strided slice, bounds that are not static integers, or a
            slice that picks no cell.

    >>> parse((slice(1, None, 2), ...), (10, 4))
    (Pick(start=1, step=2, count=5), Pick(start=0, step=1, count=4))
    >>> parse(slice(None, None, -1), (4,))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.IndexingError: slice slice(None, None, -1) on axis 0 has step = -1: ...
    """
    keys = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in keys) > 1:
        raise IndexingError(f"index {key!r} has more than one '...'")
    if Ellipsis in keys:
        i = keys.index(Ellipsis)
        keys = keys[:i] + (slice(None),) * (len(shape) - len(keys) + 1) + keys[i + 1 :]
    if len(keys) > len(shape):
        raise IndexingError(f"index {key!r} has {len(keys)} entries for a {len(shape)}-D array")
    keys = keys + (slice(None),) * (len(shape) - len(keys))
    picks = []
    for axis, (k, n) in enumerate(zip(keys, shape)):
        if not isinstance(k, slice):
            example = f"{int(k)}:{int(k) + 1}" if _integer(k) else "a:b"
            raise IndexingError(
                f"index {k!r} on axis {axis} beside a strided slice: a strided slice takes "
                f"slices on every axis (it makes a new array of as many axes); write a slice "
                f"of one cell, {example}, to keep the axis"
            )
        step = 1 if k.step is None else _step(k, axis)
        start = _bound(k.start, f"start of index {axis}")
        stop = _bound(k.stop, f"stop of index {axis}")
        cells = range(*slice(start, stop, step).indices(n))
        if not cells:
            raise IndexingError(f"index {key!r} picks no cell on axis {axis} (of {n} cells)")
        picks.append(Pick(cells.start, cells.step, len(cells)))
    return tuple(picks)


# ---- the coarse layout -------------------------------------------------------------------
def coarse_layout(layout: Layout, picks: tuple[Pick, ...], boundary: object = None) -> Layout:
    """The layout of the picked cells: same mesh and split, conditions carried (see the
    module docstring), or ``boundary`` where given.

    >>> import pgas
    >>> lay = pgas.zeros((9, 8), pgas.make_mesh(devices=1), boundary=pgas.Dirichlet(1.0)).layout
    >>> c = coarse_layout(lay, parse((slice(None, None, 2),) * 2, lay.shape))
    >>> c.shape, c.boundary[0][0]
    ((5, 4), Dirichlet(value=1.0))
    """
    shape = tuple(p.count for p in picks)
    for axis, (ax, pick) in enumerate(zip(layout.axes, picks)):
        if pick.count < ax.parts:
            raise LayoutError(
                f"the strided slice picks {pick.count} cell(s) on axis {axis}, fewer than the "
                f"{ax.parts} devices of mesh axis {layout.spec[axis]!r}: every device needs "
                f"at least one cell; pick more cells, or gather the coarse grid onto fewer "
                f"devices (an array on a smaller mesh, pgas.from_numpy(v.to_numpy(), mesh))"
            )
        if boundary is None and layout.periodic(axis) and pick.step * pick.count != ax.size:
            raise IndexingError(
                f"axis {axis} is periodic with {ax.size} cells, and the slice picks "
                f"{pick.count} cells {pick.step} apart from cell {pick.start}: they do not "
                f"wrap around evenly; pick a whole period with a step that divides the size "
                f"(u[::2] of an even size), or give the coarse array its own conditions, "
                f"pgas.globalview.strided.take(u, key, boundary=pgas.Neumann())"
            )
    faces = layout.boundary if boundary is None else normalize_boundary(boundary, len(shape))
    halo = tuple(h if h is not None and h <= BlockAxis(n, ax.parts).min_length else None
                 for h, n, ax in zip(layout.halo, shape, layout.axes))  # fmt: skip
    return make_layout(shape, layout.mesh, layout.spec, faces, halo)
