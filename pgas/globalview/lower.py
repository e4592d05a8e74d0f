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
   face, ghost cells beyond the domain edge) and writes the rest.

Deep halos. :func:`pgas.run` exchanges a halo ``K`` cells wide once, then
runs ``k`` steps on the extended blocks (``GlobalArray.ext`` = ``K``): an
assignment reading an array extended by ``e`` at offset ``o`` computes its
target on a domain ``e - |o|`` cells wide on that side, so each sub-step
shrinks the extension by the stencil's reach, and after ``k`` sub-steps the
block's own cells are what ``k`` single steps give, bit for bit (the same
arithmetic on the same values). Halo cells are masked by the global cell they
copy, so windows, ``Keep`` faces and padding act on them exactly as on their
owners; ghost cells beyond a Neumann face are re-filled after every assignment
(inside a double-buffered loop, by slabs where the loop writes the result into its
buffer: :func:`deferring_mirrors`).

Halos per side. A read records its offsets per side (:attr:`Read.sides`: the
cells it reads below and above the window), and everything follows them per
side: :func:`sources` extends an array by only those cells (an upwind step
reading ``u[:-1]`` for ``u[1:]`` sends one slab, up, and keeps no cell above the
block), the domain is computed per side (:func:`domain_of`), and an extended
array keeps ``(below, above)`` cells per axis (``GlobalArray.ext``, a
:data:`pgas.grid.decomposition.Ext`: an int where both sides are equal, so a
symmetric stencil's program is what it always was). While
:func:`pgas.loop.plan.plan` probes a step, :func:`recording_sides` follows how
far each result reaches per side (:func:`sides_of`), through assignments that
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
from pgas.globalview.halo import extend, refill_mirror, refill_mirror_slabs
from pgas.globalview.view import SCALARS, Leaf, Shifted, View, Window, as_view
from pgas.grid.decomposition import Ext, ext_of, ext_sides

__all__ = ["Read", "Source", "assign", "collect", "sources", "evaluate", "write",
           "check_dtype", "blocks_of", "physical_of", "anchor_of", "recording_sides", "Mirrors",
           "deferring_mirrors", "narrowed", "sides_of", "reads_of", "needs_of",
           "holding"]  # fmt: skip

Sides = tuple[tuple[int, int], ...]
"""Cells per axis ``(below, above)``: below is toward lower indices."""

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


class Mirrors:
    """The results whose ghost cells beyond a Neumann face wait to be re-filled
    (:func:`deferring_mirrors`): ``id(data) -> (data, layout, domain)``."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[Any, Any, Sides]] = {}
        self._fresh: dict[int, tuple[Any, Any]] = {}

    def mark(self, data, layout, domain: Sides) -> None:
        self._waiting[id(data)] = (data, layout, domain)

    def waiting(self, data) -> tuple[Any, Sides] | None:
        """``(layout, domain)`` if ``data``'s ghosts wait to be re-filled, else None."""
        entry = self._waiting.get(id(data))
        return entry[1:] if entry is not None and entry[0] is data else None

    def fresh(self, data, anchor=None):
        """``data`` with its waiting ghosts re-filled (computed once), or ``data``."""
        entry = self._fresh.get(id(data))
        if entry is not None and entry[0] is data:
            return entry[1]
        found = self.waiting(data)
        if found is None:
            return data
        out = _mirror(data, *found, anchor)
        self._fresh[id(data)] = (data, out)
        return out

    def place(self, data, buffer, at: list[int]) -> jax.Array:
        """``buffer``, into which ``data`` was written at index ``at``, with ``data``'s
        waiting ghosts re-filled in it by slabs (in place in a loop buffer)."""
        found = self.waiting(data)
        if found is None:
            return buffer
        lay, domain = found
        written = False  # slabs of an earlier axis in the buffer: later axes read them there
        for axis, d in enumerate(domain):
            if any(d):
                buffer = refill_mirror_slabs(buffer, data, at, axis, d, lay.axes[axis],
                                             lay.boundary[axis], lay.block_iota(axis),
                                             written)  # fmt: skip
                written = written or _refills(lay.boundary[axis], d)
        return buffer


_DEFERRED: list[Mirrors] = []


@contextlib.contextmanager
def deferring_mirrors() -> Iterator[Mirrors]:
    """Inside: an assignment to a framed array leaves the ghost cells beyond its Neumann
    faces as they were, and marks its result in the :class:`Mirrors` yielded.

    An assignment re-fills those ghosts from the cells next to the face
    (:func:`write`); inside a double-buffered loop's sub-step that masked
    full-size select was a second pass over the block. The loop re-fills them
    instead where it writes the result into its buffer (:meth:`Mirrors.place`);
    a read of a marked array inside (a later assignment in the same step)
    re-fills them first, so every read sees what it saw before.
    """
    mirrors = Mirrors()
    _DEFERRED.append(mirrors)
    try:
        yield mirrors
    finally:
        _DEFERRED.pop()


def _fresh(data, anchor=None):
    """``data`` with the ghosts a :func:`deferring_mirrors` left waiting re-filled."""
    for mirrors in reversed(_DEFERRED):
        data = mirrors.fresh(data, anchor)
    return data


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


_BOOKS: list[dict[int, tuple[Any, Sides]]] = []
_NEEDS: list[dict[int, tuple[Any, Any, dict[int, tuple[Any, Sides]]]]] = []


@contextlib.contextmanager
def recording_sides() -> Iterator[dict]:
    """Record, while tracing a step, how far every assigned result reaches per side.

    Inside the block, each assignment's new data is recorded with its reach
    ``(below, above)`` per axis: the largest over its reads of the read array's
    own reach plus the read's offsets, and the target's old reach (cells
    outside the window keep their old values). Arrays never assigned reach 0.
    Each new data's reach into every data it was computed from is recorded
    too (:func:`reads_of`, :func:`needs_of`): what each field's frame is made of.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> with recording_sides():
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     sides_of(u.data)
    ((1, 0),)
    """
    book: dict[int, tuple[Any, Sides]] = {}
    needs: dict = {}
    _BOOKS.append(book)
    _NEEDS.append(needs)
    try:
        yield book
    finally:
        _BOOKS.remove(book)
        _NEEDS.remove(needs)


def reads_of(data) -> dict[int, tuple[Any, Sides]]:
    """How far ``data``'s cells reach into every array data it was computed from, per side.

    Recorded inside :func:`recording_sides`: ``{id(source): (source, sides)}``
    over every data an assignment read (an array given to the step, one a
    parameter or the enclosing scope holds, or an earlier assignment's result),
    through assignments that read each other's results; ``data`` itself at 0.
    A data no assignment made reaches only itself. What
    :func:`pgas.loop.plan.plan` makes each field's frame of.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> v, first = pgas.from_numpy(np.zeros(4), u.layout.mesh), u.data
    >>> with recording_sides():
    ...     u[1:] = u[1:] - 0.5 * (u[1:] - u[:-1])
    ...     v[1:-1] = u[1:-1]
    ...     reads_of(v.data)[id(first)][1]
    ((1, 0),)
    """
    for needs in reversed(_NEEDS):
        if id(data) in needs and needs[id(data)][0] is data:
            return needs[id(data)][2]
    return {id(data): (data, None)}


def needs_of(owners: dict[int, Any], ndim: int) -> dict[Any, Sides]:
    """How far, per side, every assignment recorded so far (:func:`recording_sides`) reads
    the data of each owner: ``{owner: sides}`` over the ``owners`` (``{id(data): owner}``
    of the data given to the step) and the data assigned into an array given to the
    step (``{id(array): owner}`` in ``owners`` too), each assignment's own cells
    computed from them. An owner never read at an offset maps to zeros; one never read
    is absent.
    """
    zero = ((0, 0),) * ndim
    out: dict[int, Sides] = {}
    book = _NEEDS[-1]
    for data, target, _ in book.values():  # data assigned into an array given to the step
        if id(target) in owners and id(data) not in owners:
            owners = {**owners, id(data): owners[id(target)]}
    for _, _, deps in book.values():
        for key, (_, far) in deps.items():
            who = owners.get(key)  # ids of live data: every one is held here or by the caller
            if who is None:
                continue
            got = out.get(who, zero)
            out[who] = tuple((max(g[0], f[0]), max(g[1], f[1]))
                             for g, f in zip(got, far or zero))  # fmt: skip
    return out


def sides_of(data) -> Sides | None:
    """The reach recorded for ``data`` (:func:`recording_sides`), ``None`` if not assigned."""
    for book in reversed(_BOOKS):
        if id(data) in book and book[id(data)][0] is data:
            return book[id(data)][1]
    return None


def _record(target, reads: list[Read], data) -> None:
    if not _BOOKS:
        return
    ndim = target.layout.ndim
    zero = ((0, 0),) * ndim
    reach = [list(p) for p in sides_of(target.data) or zero]
    for read in reads:
        own = sides_of(read.array.data) or zero
        for axis, ((a, b), (lo, hi)) in enumerate(zip(own, read.per_side())):
            reach[axis] = [max(reach[axis][0], a + lo), max(reach[axis][1], b + hi)]
    _BOOKS[-1][id(data)] = (data, tuple((lo, hi) for lo, hi in reach))
    deps: dict[int, tuple[Any, Sides]] = {id(data): (data, zero)}
    sources = [(target.data, zero)] + [(r.array.data, r.per_side()) for r in reads]
    for source, offsets in sources:  # the target's old data: cells outside the window
        for key, (obj, far) in reads_of(source).items():
            far = far or zero
            got = deps.get(key, (obj, zero))[1]
            deps[key] = (obj, tuple((max(g[0], f[0] + o[0]), max(g[1], f[1] + o[1]))
                                    for g, f, o in zip(got, far, offsets)))  # fmt: skip
    _NEEDS[-1][id(data)] = (data, target, deps)


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


def blocks_of(array) -> tuple[jax.Array, Sides]:
    """An array's data in the blocks form, and its extension ``(below, above)`` per axis
    (zeros for physical data)."""
    data = array.layout.to_blocks(array.data) if array.ext is None else array.data
    return data, _sides_kept(array)


def _sides_kept(array) -> Sides:
    """The halo cells ``(below, above)`` per axis an array keeps (zeros for physical data)."""
    return ext_sides(array.ext or ((0, 0),) * array.layout.ndim)


def physical_of(array) -> jax.Array:
    """An array's physical data, whatever form it is in (the block's own cells)."""
    if array.ext is None:
        return array.data
    lay, blocks = array.layout, array.data
    for axis, ((below, above), ax) in enumerate(zip(ext_sides(array.ext), lay.axes)):
        if below or above:
            blocks = jax.lax.slice_in_dim(blocks, below, below + ax.block, axis=2 * axis + 1)
    return lay.from_blocks(blocks)


def anchor_of(counter: jax.Array) -> jax.Array:
    """A zero XLA cannot tell from a loop counter (see :class:`pgas.GlobalArray` ``anchor``).

    A loop index is below 2**31, so its sign bit is zero; XLA cannot prove it,
    and leaves masks built on it inside the loop, where they fuse into the
    stencil instead of being hoisted as arrays read from memory every step.

    >>> int(anchor_of(jnp.int32(7)))
    0
    """
    return jax.lax.shift_right_arithmetic(jnp.asarray(counter).astype(jnp.int32), jnp.int32(31))


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
            out[id(read.array)] = Source(_fresh(arr.data, arr.anchor), ext_sides(arr.ext))
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
    dom = [list(p) for p in _sides_kept(target)]
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


def _crop(data: jax.Array, cut_lo, cut_hi) -> jax.Array:
    """``data`` (blocks form) less ``cut_lo[i]`` cells at the start of block axis ``i``, and
    ``cut_hi[i]`` at its end."""
    if jnp.ndim(data) == 0:  # an expression of no window (pgas.apply returning a constant)
        return data
    for axis, (a, b) in enumerate(zip(cut_lo, cut_hi)):
        if a or b:
            n = data.shape[2 * axis + 1]
            data = jax.lax.slice_in_dim(data, a, n - b, axis=2 * axis + 1)
    return data


def narrowed(data: jax.Array, have: Sides, want: Sides) -> jax.Array:
    """``data`` (blocks form, extended by ``have`` cells ``(below, above)`` per axis) cut to
    the extension ``want``."""
    return _crop(data, [h[0] - w[0] for h, w in zip(have, want)],
                 [h[1] - w[1] for h, w in zip(have, want)])  # fmt: skip


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
            return _crop(src.data, _plus(_minus(below, lo), at), _minus(_minus(above, hi), at))
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
    blocks = _fresh(blocks, target.anchor)
    for axis, ((e, _), (lo, hi)) in enumerate(zip(ext, domain)):
        if ext[axis] != (lo, hi):
            blocks = jax.lax.slice_in_dim(blocks, e - lo, e + lay.axes[axis].block + hi,
                                          axis=2 * axis + 1)  # fmt: skip
    frame = target.ext is not None
    mask = lay.window_mask(window.start, window.extent, reach, ext=domain if frame else None,
                           anchor=target.anchor)  # fmt: skip
    new = jnp.asarray(new).astype(target.dtype)
    result = jnp.broadcast_to(new if mask is None else jnp.where(mask, new, blocks), blocks.shape)
    if not frame:
        return lay.from_blocks(result), None
    if _DEFERRED and _mirrored(lay, domain):
        _DEFERRED[-1].mark(result, lay, domain)
    else:
        result = _mirror(result, lay, domain, target.anchor)
    return result, ext_of(domain)


def _mirrored(layout, domain: Sides) -> bool:
    """Whether ``domain`` holds ghost cells beyond a Neumann face of ``layout``."""
    return any(_refills(faces, d) for faces, d in zip(layout.boundary, domain))


def _refills(faces: tuple, sides: tuple[int, int]) -> bool:
    """Whether ``sides`` halo cells of an axis hold ghosts beyond one of its Neumann ``faces``."""
    return bool((faces[0].refreshed and sides[0]) or (faces[1].refreshed and sides[1]))


def _mirror(result, layout, domain: Sides, anchor=None):
    """``result`` (extension ``domain``) with its ghosts beyond Neumann faces re-filled."""
    for axis, d in enumerate(domain):
        if any(d):
            result = refill_mirror(result, axis, d, layout.axes[axis], layout.boundary[axis],
                                   layout.block_iota(axis), anchor)  # fmt: skip
    return result


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
    found = sources(reads, _sides_kept(target))
    domain = domain_of(target, reads, found)
    new = evaluate(value, window, found, domain) if isinstance(value, View) else value
    reach = [max([r.widths[a] for r in reads], default=0) for a in range(target.layout.ndim)]
    data, ext = write(target, window, new, reach, domain)
    _record(target, reads, data)
    return data, ext
