"""Strided slices of global arrays: ``f[::2, ::2]`` read as a new array, ``f[1::2] = c`` written.

Reads. ``f[s0:e0:k0, s1:e1:k1]`` with a step above 1 on any axis (every entry a
slice; unit steps allowed beside) is a new :class:`~pgas.GlobalArray`, the
*coarse* array: the picked cells, as NumPy picks them, on the same mesh and
split over the same mesh axes (:func:`take`). It is a copy, not a view (as in
JAX): writing it leaves ``f`` as it was.

Writes. ``f[1::2, ::2] = value`` writes the picked cells (:func:`put`); ``value``
is a scalar, a GlobalArray of the picked shape, or an expression of views of
arrays of one layout with that shape, ``0.5 * (c[:-1, :] + c[1:, :])`` (computed
first on its own arrays' blocks, with their halo exchange, as any assignment).

How it runs: one ``shard_map`` program of three phases, on each device's block:

1. *pick*: the device's own picked cells, a local strided slice;
2. *move*: per split axis, the picked runs go to the blocks that hold them in
   the target (:mod:`pgas.grid.strides`): one ``ppermute`` (a collective-permute)
   per shift that carries cells, each message as long as the longest piece;
3. *place*: each device writes its run into its block's picked cells, a local
   strided update (masked: other cells keep their values).

For picks of a whole axis (``u[::2]``, ``u[1::2] = c``, any step) between arrays
split the MPI way, a block receives at most two cells' thickness from each side
(counted for up to 8 blocks and sizes up to 10**6): halo-sized messages, from the
next block or, where coarse blocks are a cell or two wide, the one after; never
an all-gather. :func:`recording_transfers` gives what each axis had to move,
which :func:`pgas.comm_report` sets beside what the compiler sent.

Layout: re-blocked. The coarse array is laid out in the block distribution of
its own size, as every array (:mod:`pgas.grid.decomposition`), not in the
uneven blocks the picked cells first fall in (device ``b`` holding the picks of
its fine block). Halo exchange, masks, reductions, compiled loops, the explicit
and MPI paths and the stores all assume that distribution; keeping it makes a
coarse array an ordinary array everywhere, at the cost of moving the cells the
two distributions disagree on (a few per block edge, the communication
proportional to the moved cells).

Boundaries. A read carries the fine array's conditions to the coarse array, face
by face and with their values (Dirichlet, Neumann, Keep: the coarse grid's ghost
cells follow the same rule on the coarse cells). A periodic axis stays periodic
where the picks tile the period (``step * count == size``: ``u[::2]`` or
``u[1::2]`` of an even size); other picks of a periodic axis would wrap at an
uneven spacing and raise :class:`~pgas.errors.IndexingError` unless
:func:`take` is given ``boundary=``. The declared halo is carried where it fits
the coarse blocks (else it is inferred from the stencil). A write writes the
picked cells but not, as any assignment, the outer ``halo`` cells of a ``Keep``
face (unless every picked cell lies in them).

Loops. Inside :func:`pgas.run` and :func:`pgas.run_until`, a step that slices
with a step runs one step per iteration without deep-halo frames: a strided
slice of an array held on frames raises :class:`~pgas.errors.FrameError`, and
the plan (:mod:`pgas.loop.plan`) then chooses ``k = 1``, no frames.

Not lowered, each a clear :class:`~pgas.errors.IndexingError`: a step below 1
(zero or negative: a reversed axis would move every cell to another device),
a step that is not a static integer, and an integer index beside a strided
slice (write ``u[::2, 3:4]``). A coarse axis with fewer cells than devices is a
:class:`~pgas.errors.LayoutError` (gathering coarse levels onto fewer devices
is not done here).

>>> import numpy as np, pgas
>>> f = pgas.from_numpy(np.arange(9.0), pgas.make_mesh(devices=1), boundary=pgas.Dirichlet())
>>> c = f[::2]                          # restriction by injection: a new array
>>> c.to_numpy(), c.layout.boundary[0][0]
(array([0., 2., 4., 6., 8.]), Dirichlet(value=0.0))
>>> f[1::2] = 0.5 * (c[:-1] + c[1:])    # linear interpolation between coarse cells
>>> f.to_numpy()
array([0., 1., 2., 3., 4., 5., 6., 7., 8.])
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.errors import FrameError, LayoutError, ShapeMismatchError
from pgas.globalview.lower import assign, check_dtype
from pgas.globalview.view import SCALARS, Leaf, View, Window, as_view
from pgas.grid.boundary import Periodic
from pgas.grid.decomposition import BlockAxis
from pgas.grid.layout import Layout, make_layout
from pgas.grid.strides import (
    Move,
    Pick,
    Run,
    coarse_layout,
    held,
    is_strided,
    moves,
    parse,
    traffic,
)

__all__ = ["is_strided", "take", "put", "Transfer", "recording_transfers"]


# ---- what a copy moves, for comm_report --------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Transfer:
    """What one strided copy must move across one split axis, as one device sees it.

    Attributes:
        axis: the array axis.
        sides: ``(below, above)``: the most cells one block receives from blocks
            below it and from blocks above it.
        parts: blocks along the axis.
        face: cells across the other axes of one piece.
        itemsize: bytes per cell.
    """

    axis: int
    sides: tuple[int, int]
    parts: int
    face: int
    itemsize: int

    @property
    def ideal_bytes(self) -> int:
        """Bytes one device must receive: both sides' cells, times the face and itemsize.

        >>> Transfer(0, (1, 2), 3, 4, 8).ideal_bytes
        96
        """
        return sum(self.sides) * self.face * self.itemsize


_BOOKS: list[list[Transfer]] = []


@contextlib.contextmanager
def recording_transfers() -> Iterator[list[Transfer]]:
    """Inside: every strided copy traced or run appends its :class:`Transfer` per axis
    that moves cells (what :func:`pgas.comm_report` counts as the ideal).

    >>> import numpy as np, pgas
    >>> f = pgas.from_numpy(np.arange(8.0), pgas.make_mesh(devices=1))
    >>> with recording_transfers() as moved:
    ...     c = f[::2]
    >>> moved  # one block: nothing moves
    []
    """
    book: list[Transfer] = []
    _BOOKS.append(book)
    try:
        yield book
    finally:
        _BOOKS.remove(book)


# ---- the program -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Axis:
    """One axis of a copy: the source's runs, the moves and the target's runs."""

    step_in: int
    source: tuple[Run, ...]
    found: tuple[Move, ...]
    step_out: int
    target: tuple[Run, ...]
    offsets: tuple[int, ...]  # the target's first global cell per block
    keep: tuple[int, int] | None  # global cells [lo, hi) a write may change (Keep faces)


def _axis(src: BlockAxis | None, p: Pick, dst: BlockAxis, q: Pick, keep) -> _Axis:
    source = held(src, p) if src is not None else ()
    target = held(dst, q)
    found = moves(source, target) if src is not None else ()
    return _Axis(p.step, source, found, q.step, target, dst.offsets, keep)


def _of(table, me):
    """``table[me]``: a constant where every block has the same entry."""
    if len(set(table)) == 1:
        return table[0]
    return jnp.asarray(np.array(table, np.int32))[me]


def _pad(x, axis: int, low: int, high: int):
    cfg = [(0, 0, 0)] * x.ndim
    cfg[axis] = (low, high, 0)
    return jax.lax.pad(x, jnp.zeros((), x.dtype), cfg)


def _iota(ndim: int, axis: int, size: int):
    """Cell numbers ``0 .. size - 1`` along ``axis``, broadcastable against a block."""
    return jax.lax.broadcasted_iota(jnp.int32, [size if i == axis else 1 for i in range(ndim)],
                                    axis)  # fmt: skip


def _pick(x, axis: int, a: _Axis, me):
    """Phase 1: the block's picked cells along ``axis``, its run first (longest run long)."""
    n = max(r.count for r in a.source)
    span = a.step_in * (n - 1) + 1
    starts = [r.at for r in a.source]
    need = max(s + span for s in starts) - x.shape[axis]
    x = _pad(x, axis, 0, need) if need > 0 else x
    x = jax.lax.dynamic_slice_in_dim(x, _of(starts, me), span, axis)
    return jax.lax.slice_in_dim(x, 0, span, a.step_in, axis)


def _place(piece, axis: int, at, size: int):
    """``piece`` moved to cells ``at ..`` of an axis of ``size`` cells (the rest zeros)."""
    return jax.lax.dynamic_slice_in_dim(_pad(piece, axis, size, size), size - at, size, axis)


def _move(x, axis: int, a: _Axis, me, name):
    """Phase 2: the runs along ``axis`` taken from the source's blocks to the target's."""
    m = max(r.count for r in a.target)
    cells = [r.count for r in a.target]
    if len(a.found) == 1 and a.found[0].stays:  # every block keeps its run (as long as m)
        if min(cells) == m:
            return x
        return jnp.where(_iota(x.ndim, axis, m) < _of(cells, me), x, jnp.zeros((), x.dtype))
    longest = max(mv.length for mv in a.found)
    x = _pad(x, axis, 0, longest)
    shape = list(x.shape)
    shape[axis] = m
    out = jnp.zeros(shape, x.dtype)
    pos = _iota(x.ndim, axis, m)
    for mv in a.found:
        piece = jax.lax.dynamic_slice_in_dim(x, _of(mv.sent_from, me), mv.length, axis)
        if mv.shift:
            piece = jax.lax.ppermute(piece, name, list(mv.pairs))
        at, count = _of(mv.placed_at, me), _of(mv.cells, me)
        out = jnp.where((pos >= at) & (pos < at + count), _place(piece, axis, at, m), out)
    return out


def _spread(x, axis: int, a: _Axis, size: int, me):
    """Phase 3: the run along ``axis`` spread over the picked cells of a block of ``size``."""
    if a.step_out > 1:
        cfg = [(0, 0, 0)] * x.ndim
        cfg[axis] = (0, 0, a.step_out - 1)
        x = jax.lax.pad(x, jnp.zeros((), x.dtype), cfg)
    return _place(x, axis, _of([r.at for r in a.target], me), size)


def _written(ndim: int, axis: int, a: _Axis, size: int, me):
    """The cells along ``axis`` of a block of ``size`` that phase 3 writes."""
    pos = _iota(ndim, axis, size)
    at, count = _of([r.at for r in a.target], me), _of([r.count for r in a.target], me)
    mask = (pos >= at) & (pos < at + a.step_out * count) & ((pos - at) % a.step_out == 0)
    if a.keep is not None:
        g = pos + _of(a.offsets, me)
        mask = mask & (g >= a.keep[0]) & (g < a.keep[1])
    return mask


@functools.lru_cache(maxsize=256)
def _program(mode: str, src: Layout | None, dst: Layout, axes: tuple[_Axis, ...]):
    """The compiled copy: ``"read"`` (source -> new data), ``"write"`` (source, old -> new)
    or ``"fill"`` (old, scalar -> new)."""
    spec = PartitionSpec(*dst.spec)

    def per_device(*args):
        me = [jnp.int32(0) if s is None else jax.lax.axis_index(s) for s in dst.spec]
        if mode == "fill":
            old, x = args
            x = x.astype(old.dtype)
        else:
            x = args[0]
            for axis, a in enumerate(axes):
                x = _pick(x, axis, a, me[axis])
            for axis, a in enumerate(axes):
                x = _move(x, axis, a, me[axis], dst.spec[axis])
            if mode == "read":
                return x
            old = args[1]
            x = x.astype(old.dtype)
        mask = None
        for axis, a in enumerate(axes):
            if mode == "write":
                x = _spread(x, axis, a, old.shape[axis], me[axis])
            m = _written(old.ndim, axis, a, old.shape[axis], me[axis])
            mask = m if mask is None else mask & m
        return jnp.where(mask, x, old)

    ins = (spec,) if mode == "read" else (spec, PartitionSpec() if mode == "fill" else spec)
    return jax.jit(shard_map(per_device, mesh=dst.mesh, in_specs=ins, out_specs=spec))


def _record(axes: tuple[_Axis, ...], layout: Layout, itemsize: int) -> None:
    """Append each axis's :class:`Transfer` to the open books (:func:`recording_transfers`)."""
    if not _BOOKS:
        return
    through = [max(r.count for r in a.source) for a in axes]  # the run each axis starts as
    for axis, a in enumerate(axes):
        below, above = traffic(a.found)
        if below or above:
            face = math.prod(n for j, n in enumerate(through) if j != axis)
            for book in _BOOKS:
                book.append(Transfer(axis, (below, above), layout.axes[axis].parts, face,
                                     itemsize))  # fmt: skip
        through[axis] = max(r.count for r in a.target)


# ---- reads and writes --------------------------------------------------------------------
def _physical(array, what: str) -> None:
    if array.ext is not None:
        raise FrameError(
            f"the step takes a strided slice (it {what} an array held on deep-halo frames): "
            f"strided slices run on whole arrays, so such a step runs one step per exchange "
            f"without frames (pgas.run and pgas.run_until plan that by themselves)"
        )


def take(array, key, boundary: object = None):
    """``array[key]`` for a strided ``key``: the picked cells as a new array (see the module
    docstring); ``boundary`` replaces the conditions it carries.

    >>> import numpy as np, pgas
    >>> f = pgas.from_numpy(np.arange(12.0).reshape(3, 4), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> take(f, (slice(1, None), slice(None, None, 3))).to_numpy()
    array([[ 4.,  7.],
           [ 8., 11.]])
    """
    lay = array.layout
    picks = parse(key, lay.shape)
    _physical(array, "reads")
    out = coarse_layout(lay, picks, boundary)
    axes = tuple(_axis(a, p, b, Pick(0, 1, b.size), None)
                 for a, p, b in zip(lay.axes, picks, out.axes))  # fmt: skip
    _record(axes, lay, array.dtype.itemsize)
    return type(array)(_program("read", lay, out, axes)(array.data), out)


def _keep(layout: Layout, axis: int, pick: Pick) -> tuple[int, int] | None:
    """Global cells ``[lo, hi)`` of ``axis`` a write may change: all but the outer ``halo``
    cells of a Keep face, unless every picked cell lies in them (an edge written by hand);
    ``None``: every cell."""
    n, keep = layout.shape[axis], layout.halo[axis] or 0
    low, high = layout.boundary[axis]
    lo = keep if low.keeps and not pick.last < keep else 0
    hi = n - keep if high.keeps and not pick.start >= n - keep else n
    return None if (lo, hi) == (0, n) else (lo, hi)


def _source(value: View):
    """The physical array a value is read from, and the window of it (an expression is
    computed first into an array of its arrays' grid, with their halo exchange)."""
    leaves = value.leaves()
    for leaf in leaves:
        _physical(leaf.array, "writes from")
    if isinstance(value, Leaf) and min(value.window.start) >= 0 and all(
        s + e <= n for s, e, n in zip(value.window.start, value.window.extent,
                                      value.array.layout.shape)
    ):  # fmt: skip
        return value.array, value.window  # cells of the array: read them where they are
    base, first = leaves[0].array, leaves[0].window
    lay = base.layout
    start = tuple(min(max(s, 0), n - e) for s, e, n in zip(first.start, first.extent, lay.shape))
    window = Window(start, first.extent, first.kept)  # a shifted read may start outside
    grid = make_layout(lay.shape, lay.mesh, lay.spec, Periodic(), None)  # writes every cell
    tmp = type(base)(jnp.zeros_like(base.data, dtype=value.dtype), grid)
    tmp.data, _ = assign(tmp, window, value)
    return tmp, window


def put(array, key, value) -> jax.Array:
    """The new data of ``array`` after ``array[key] = value`` for a strided ``key`` (see
    the module docstring).

    >>> import numpy as np, pgas
    >>> f = pgas.zeros((6,), pgas.make_mesh(devices=1))
    >>> f.data = put(f, slice(1, None, 2), pgas.from_numpy(np.ones(3, np.float32), f.mesh))
    >>> f.to_numpy()
    array([0., 1., 0., 1., 0., 1.], dtype=float32)
    """
    lay = array.layout
    picks = parse(key, lay.shape)
    _physical(array, "writes")
    shape = tuple(p.count for p in picks)
    keep = [_keep(lay, axis, p) for axis, p in enumerate(picks)]
    value = as_view(value)
    if not isinstance(value, View):
        check_dtype(np.result_type(value), np.dtype(array.dtype), isinstance(value, SCALARS))
        axes = tuple(_axis(None, p, b, p, k) for p, b, k in zip(picks, lay.axes, keep))
        fill = value if isinstance(value, jax.Array) else np.asarray(value, array.dtype)
        return _program("fill", None, lay, axes)(array.data, fill)
    if value.shape != shape:
        raise ShapeMismatchError(
            f"cannot assign a value of shape {value.shape} to the {shape} cells a strided "
            f"slice picks"
        )
    check_dtype(value.dtype, np.dtype(array.dtype), value.weak)
    source, window = _source(value)
    src = source.layout
    if (src.mesh, src.spec) != (lay.mesh, lay.spec):
        raise LayoutError(
            f"a strided write takes values of arrays split {lay.spec} over mesh "
            f"{dict(lay.mesh.shape)}, as the array written; got one split {src.spec} over "
            f"{dict(src.mesh.shape)}: make the value's arrays on the same mesh and spec"
        )
    axes = tuple(_axis(a, Pick(s, 1, e), b, p, k)
                 for a, s, e, b, p, k in zip(src.axes, window.start, window.extent, lay.axes,
                                             picks, keep))  # fmt: skip
    _record(axes, src, np.dtype(source.dtype).itemsize)
    return _program("write", src, lay, axes)(source.data, array.data)
