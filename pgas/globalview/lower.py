"""Lowering: an assignment of views becomes halo exchange plus masked local arithmetic.

``u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])`` is compiled in four
named phases; relative to the assigned window every view of an array is a
*shift* of that array by a static offset per axis (``u[:-2]`` seen from
``u[1:-1]`` is ``u`` shifted by one):

1. :func:`collect`: the :class:`Read` of every array the expression reads,
   with the largest offset per axis: the halo width it needs (checked against
   the declared ``halo=`` and the block size).
2. :func:`sources`: every array read, in its blocks form ``(D0, b0, D1, b1,
   ...)`` extended by a halo on each side (a :class:`Source`). An array with
   physical data is extended here by :func:`pgas.halo.extend` (one
   collective-permute per direction and split axis; two-phase, so corners
   come along). Inside a compiled loop the arrays arrive already extended
   (*deep halos*, below) and nothing is sent.
3. :func:`evaluate`: the expression on local slices of the sources, over the
   assignment's *domain*: the block plus ``domain[i]`` halo cells per side
   (a shifted expression can be computed once, wider: *shifts of
   expressions*, below).
4. :func:`write`: a mask built from global indices keeps what the window
   does not cover (cells outside it, padding, the outer cells of a ``Keep``
   face, ghost cells beyond the domain edge) and writes the rest. A window
   that lies inside the outer cells of a ``Keep`` face is written there: an
   edge written by hand (``u[0] = u[1]``), which may not read the ghosts
   beyond that face (:func:`check_kept_edges`).

Deep halos. :func:`pgas.run` exchanges a halo ``K`` cells wide once, then
runs ``k`` steps on the extended blocks (``GlobalArray.ext`` = ``K``): an
assignment reading an array extended by ``e`` at offset ``o`` computes its
target on a domain ``e - |o|`` cells wide on that side, so each sub-step
shrinks the extension by the stencil's reach, and after ``k`` sub-steps the
block's own cells are what ``k`` single steps give, bit for bit (the same
arithmetic on the same values). Halo cells are masked by the global cell they
copy, so windows, ``Keep`` faces and padding act on them exactly as on their
owners; ghost cells beyond a Neumann face are re-filled after every assignment
(:mod:`pgas.globalview.mirrors`; inside a double-buffered loop, by slabs where the
loop writes the result into its buffer).

Halos per side. A read records its offsets per side (:attr:`Read.sides`: the
cells it reads below and above the window), and everything follows them per
side: :func:`sources` extends an array by only those cells (an upwind step
reading ``u[:-1]`` for ``u[1:]`` sends one slab, up, and keeps no cell above the
block), the domain is computed per side (:func:`domain_of`), and an extended
array keeps ``(below, above)`` cells per axis (``GlobalArray.ext``, a
:data:`pgas.grid.decomposition.Ext`: an int where both sides are equal, so a
symmetric stencil's program is what it always was). While
:func:`pgas.loop.plan.plan` probes a step, every assignment records how far its
result reaches per side (:mod:`pgas.globalview.reach`), through assignments that
read each other's results: what a compiled loop exchanges and keeps.

Shifts of expressions. ``shift(rows, 1, 0)`` of an expression (not of a
window) is a :class:`~pgas.globalview.view.Shifted` node. :func:`evaluate`
*collapses* it: each use computes the inner expression again from windows
moved by the shift, the same arithmetic on the same values as writing every
window out by hand, so the same bits. Life written separably, ``rows = g +
shift(g, 1, 1) + shift(g, -1, 1)`` and ``n = rows + shift(rows, 1, 0) +
shift(rows, -1, 0) - g``, becomes one kernel of 9 moved reads of the board.
Computing the inner expression once and slicing its uses was tried and is
not kept: inside a deep-halo group it adds a pass over the extended block per
sub-step, and XLA recomputes fused producers anyway (benchmarks/README.md,
"Findings").

The forms an array's data takes (physical, blocks, extended blocks) and the
moves between them are in :mod:`pgas.globalview.forms`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import (
    DTypeMismatchError,
    FrameError,
    HaloError,
    IndexingError,
    LayoutError,
    ShapeMismatchError,
)
from pgas.globalview.forms import Sides, blocks_of, crop, sides_kept
from pgas.globalview.halo import extend
from pgas.globalview.mirrors import fresh, mirror_or_defer
from pgas.globalview.reach import record
from pgas.globalview.view import SCALARS, Leaf, Shifted, View, Window, as_view
from pgas.grid.decomposition import Ext, ext_of, ext_sides

# isort: split
# Importable from here until pgas/globalview/reduce.py and pgas/references/explicit.py import
# them from pgas.globalview.forms (issue 36: lower.py was split by concern).
from pgas.globalview.forms import anchor_of, physical_of  # noqa: F401

__all__ = ["Read", "Source", "assign", "collect", "sources", "evaluate", "write",
           "check_dtype", "check_kept_edges", "holding"]  # fmt: skip

_HELD: list[dict[int, tuple[Any, Any]]] = []


@contextlib.contextmanager
def holding(copies: dict[int, tuple[Any, Any]]) -> Iterator[None]:
    """Inside: an array read in physical form is read from a copy already extended.

    ``copies`` maps ``id(array)`` to ``(array.data, extended)``, ``extended`` a
    :class:`pgas.GlobalArray` with a halo; a read of ``array`` (while its data
    is still that one) takes the extended copy instead of exchanging a halo of
    its own. A loop extends the arrays its step reads from the enclosing scope
    once, before the loop, and traces the loop in here
    (:func:`pgas.loop.frames.loop_inputs`).
    """
    _HELD.append(copies)
    try:
        yield
    finally:
        _HELD.pop()


def _held(array):
    """``array``'s extended copy inside :func:`holding`, else ``array``."""
    for copies in reversed(_HELD):
        data, extended = copies.get(id(array), (None, None))
        if data is not None and data is array.data:
            return extended
    return array


@dataclasses.dataclass(frozen=True, eq=False)
class Read:
    """An array read by an assignment, and the halo it needs per axis.

    Attributes:
        array: the array read.
        widths: halo cells per axis, the larger of its two sides.
        sides: halo cells per axis, ``(below, above)``; default ``widths`` on both.
    """

    array: Any
    widths: tuple[int, ...]
    sides: Sides | None = None

    def per_side(self) -> Sides:
        """:attr:`sides`, or ``widths`` on both sides."""
        return self.sides or tuple((w, w) for w in self.widths)


@dataclasses.dataclass(frozen=True, eq=False)
class Source:
    """An array's values in the blocks form, extended by ``ext[i] = (below, above)`` cells."""

    data: jax.Array
    ext: Sides


def check_dtype(value: np.dtype, target: np.dtype, weak: bool) -> None:
    """Refuse an assignment that would lose information (e.g. floats into an int array).

    >>> check_dtype(np.dtype("int32"), np.dtype("float32"), False)
    """
    if weak:  # a Python-scalar expression: ints fit any number, floats need a float array
        ok = target.kind != "b" if value.kind in "iub" else target.kind in "fc"
    else:
        ok = np.can_cast(value, target, casting="same_kind")
    if not ok:
        raise DTypeMismatchError(
            f"cannot assign {value} values to a {target} array without loss; cast the "
            f"expression explicitly with .astype({str(target)!r}) or make the array {value}"
        )


# ---- 1. collect --------------------------------------------------------------------------
def collect(target, window: Window, value: View) -> list[Read]:
    """The arrays ``value`` reads, with the halo width each needs per axis."""
    lay = target.layout
    reads: dict[int, Read] = {}
    for leaf in value.leaves():
        other = leaf.array.layout
        if not other.same_grid(lay):
            raise LayoutError(
                f"a view of an array of shape {other.shape} split {other.spec} over mesh "
                f"{dict(other.mesh.shape)} cannot be assigned to one of shape {lay.shape} split "
                f"{lay.spec} over {dict(lay.mesh.shape)}; use arrays of one layout"
            )
        if leaf.window.kept != window.kept:
            raise IndexingError(
                "a view indexes other axes with integers than the window it is assigned to; "
                "integer indices must sit on the same axes on both sides"
            )
        offsets = [(max(t - s, 0), max(s - t, 0)) for s, t in zip(leaf.window.start,
                                                                   window.start)]  # fmt: skip
        old = reads.get(id(leaf.array))
        if old is not None:
            offsets = [(max(a, c), max(b, d)) for (a, b), (c, d) in zip(old.sides, offsets)]
        sides = tuple(offsets)
        reads[id(leaf.array)] = Read(leaf.array, tuple(max(p) for p in sides), sides)
    for read in reads.values():
        for axis, h in enumerate(read.widths):
            if h:
                read.array.layout.check_halo(axis, h)
    return list(reads.values())


# ---- 2. sources --------------------------------------------------------------------------
def sources(reads: list[Read], base: Sides) -> dict[int, Source]:
    """Every array read, extended by the sides it is read on (a halo exchange for physical
    data); an array already extended comes as it is.

    ``base`` is the target's extension: inside a deep-halo loop an array that is
    not part of the loop's state (a constant) is extended as far as the state, by
    its larger side plus the larger side of ``base`` on both sides.
    """
    out = {}
    inside = any(lo or hi for lo, hi in base)
    for read in reads:
        arr = read.array if read.array.ext is not None else _held(read.array)
        if arr.ext is not None:
            out[id(read.array)] = Source(fresh(arr.data, arr.anchor), ext_sides(arr.ext))
            continue
        lay = arr.layout
        blocks = lay.to_blocks(arr.data)
        sides = read.per_side()
        if inside:  # a constant: its whole halo (outside frames only the sides read)
            sides = tuple((h + max(b), h + max(b)) for h, b in zip(read.widths, base))
        for axis, (below, above) in enumerate(sides):
            h = max(below, above)
            if h > lay.axes[axis].min_length:  # only inside frames: collect checked the rest
                raise FrameError(
                    f"an array read inside deep-halo frames would need {h} halo cells on axis "
                    f"{axis}, more than its smallest block ({lay.axes[axis].min_length})"
                )
            if h:
                blocks = extend(blocks, axis, (below, above), lay.axes[axis],
                                lay.boundary[axis], lay.block_iota(axis))  # fmt: skip
        if sum(lo + hi > 0 for lo, hi in sides) > 1:
            # Keeps XLA from folding the slices of the extended block back into its pieces:
            # the stencil then reads only the extended copy and can write its result over
            # the loop buffer (else XLA adds a full copy of the block per step).
            blocks = jax.lax.optimization_barrier(blocks)
        out[id(arr)] = Source(blocks, sides)
    return out


def domain_of(target, reads: list[Read], found: dict[int, Source]) -> Sides:
    """Halo cells ``(below, above)`` the assignment computes: what every source still covers
    on each side."""
    dom = [list(p) for p in sides_kept(target)]
    for read in reads:
        have = found[id(read.array)].ext
        for axis, ((lo, hi), (a, b)) in enumerate(zip(have, read.per_side())):
            dom[axis] = [min(dom[axis][0], lo - a), min(dom[axis][1], hi - b)]
    for read in reads:
        for axis, d in enumerate(dom):
            ahead = max(d) > 0 and target.layout.periodic(axis)
            if ahead and not read.array.layout.periodic(axis):
                raise FrameError(
                    f"a periodic array reads a non-periodic one across axis {axis}: its halo "
                    f"cells there stand for cells across the wrap, which the other array's "
                    f"halo does not hold, so they cannot be computed ahead"
                )
    for axis, d in enumerate(dom):
        if min(d) < 0:
            raise HaloError(
                f"the step reads {-min(d)} cell(s) farther across axis {axis} than the halo "
                f"pgas exchanged for it; the step must read the same cells every time it runs "
                f"(no Python control flow on data), or run it with steps_per_exchange=1"
            )
    return tuple((lo, hi) for lo, hi in dom)


# ---- 3. evaluate -------------------------------------------------------------------------


def _offsets(node: View, window: Window) -> tuple[int, ...]:
    """The shift of ``node``'s operand per array axis (``Shifted`` offsets are per view axis)."""
    ndim = len(window.kept)
    if not isinstance(node, Shifted):
        return (0,) * ndim
    axes = [a for a in range(ndim) if window.kept[a]]  # view axis -> array axis
    out = [0] * ndim
    for axis, o in zip(axes, node.offsets):
        out[axis] = o
    return tuple(out)


def evaluate(value: View, window: Window, found: dict[int, Source], domain: Sides) -> jax.Array:
    """The expression's values on the domain (blocks form, ``domain[i] = (below, above)``
    halo cells).

    Values are computed at margins ``(lo, hi)``: cells ``-below - lo[i]`` to
    ``block + above + hi[i]``. A window is a slice of its source; a shift
    of an expression computes the expression at margins moved by the shift.
    """

    def values(node: View, lo: tuple[int, ...], hi: tuple[int, ...]) -> jax.Array:
        if isinstance(node, Leaf):  # the source covers cells -below to block + above
            src, at = found[id(node.array)], _minus(node.window.start, window.start)
            below = tuple(e[0] - d[0] for e, d in zip(src.ext, domain))
            above = tuple(e[1] - d[1] for e, d in zip(src.ext, domain))
            return crop(src.data, _plus(_minus(below, lo), at), _minus(_minus(above, hi), at))
        if isinstance(node, Shifted):
            o = _offsets(node, window)
            return values(node.inner, _plus(lo, o), _minus(hi, o))
        return node.fn(*(values(a, lo, hi) if isinstance(a, View) else a for a in node.args))

    zero = (0,) * len(window.kept)
    return values(value, zero, zero)


def _plus(a, b) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip(a, b))


def _minus(a, b) -> tuple[int, ...]:
    return tuple(x - y for x, y in zip(a, b))


# ---- 4. write ----------------------------------------------------------------------------
def write(target, window: Window, new, reach, domain: Sides) -> tuple[jax.Array, Ext | None]:
    """The target's new data: ``new`` inside the window mask, the old values elsewhere; and
    its extension (``None`` for physical data)."""
    lay = target.layout
    blocks, ext = blocks_of(target)
    blocks = fresh(blocks, target.anchor)
    for axis, ((e, _), (lo, hi)) in enumerate(zip(ext, domain)):
        if ext[axis] != (lo, hi):
            blocks = jax.lax.slice_in_dim(blocks, e - lo, e + lay.axes[axis].block + hi,
                                          axis=2 * axis + 1)  # fmt: skip
    frame = target.ext is not None
    mask = lay.window_mask(window.start, window.extent, reach, ext=domain if frame else None,
                           anchor=target.anchor, edges=True)  # fmt: skip
    new = jnp.asarray(new).astype(target.dtype)
    result = jnp.broadcast_to(new if mask is None else jnp.where(mask, new, blocks), blocks.shape)
    if not frame:
        return lay.from_blocks(result), None
    return mirror_or_defer(result, lay, domain, target.anchor), ext_of(domain)


def check_kept_edges(layout, window: Window, reads: list[Read], reach) -> None:
    """Refuse an edge written by hand that reads beyond its ``Keep`` face.

    A window inside the cells a ``Keep`` face keeps (the outer ``max(declared halo,
    reach)`` cells) is written (:meth:`pgas.Layout.window_mask`, ``edges``): ``u[0] =
    u[1]`` is a zero-gradient edge written by hand. Such a write may read the array's
    cells, not the ghost cells beyond that face (``pgas.shift(u[0:1], 1)``): those
    mirror the edge as it was at the last halo exchange, which a deep-halo loop
    (``k > 1``) makes every ``k`` steps, so ``k`` single steps would read other values.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> u[0] = u[1]  # written
    >>> u[0:1] = pgas.shift(u[0:1], 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.IndexingError: an assignment to cells 0:1 of axis 0, inside the cells the ...
    """
    for axis, ax in enumerate(layout.axes):
        keep = max(layout.halo[axis] or 0, reach[axis])
        lo, hi = window.start[axis], window.start[axis] + window.extent[axis]
        below = max((r.per_side()[axis][0] for r in reads), default=0)
        above = max((r.per_side()[axis][1] for r in reads), default=0)
        low, high = layout.boundary[axis]
        for face, inside, beyond, cells in (
            ("low", low.keeps and hi <= keep, lo - below < 0, f"0:{keep}"),
            ("high", high.keeps and lo >= ax.size - keep, hi + above > ax.size,
             f"{ax.size - keep}:{ax.size}"),
        ):  # fmt: skip
            if inside and beyond:
                raise IndexingError(
                    f"an assignment to cells {lo}:{hi} of axis {axis}, inside the cells the "
                    f"Keep() {face} face keeps ({cells}), reads the ghost cells beyond that "
                    f"face, which a deep-halo loop does not refresh between exchanges; read "
                    f"cells inside the array (a zero-gradient edge by hand: u[0] = u[1]), or "
                    f"use boundary=pgas.Neumann() for a mirrored edge"
                )


def assign(target, window: Window, value) -> tuple[jax.Array, Ext | None]:
    """``target[window] = value``: the target's new ``(data, ext)``; see the module docstring."""
    value = as_view(value)
    if isinstance(value, View):
        if value.shape != window.shape:
            raise ShapeMismatchError(
                f"cannot assign a view of shape {value.shape} to a window of shape {window.shape}"
            )
        check_dtype(value.dtype, np.dtype(target.dtype), value.weak)
    else:
        check_dtype(np.result_type(value), np.dtype(target.dtype), isinstance(value, SCALARS))
    reads = collect(target, window, value) if isinstance(value, View) else []
    found = sources(reads, sides_kept(target))
    domain = domain_of(target, reads, found)
    new = evaluate(value, window, found, domain) if isinstance(value, View) else value
    reach = [max([r.widths[a] for r in reads], default=0) for a in range(target.layout.ndim)]
    check_kept_edges(target.layout, window, reads, reach)
    data, ext = write(target, window, new, reach, domain)
    record(target, reads, data)
    return data, ext
