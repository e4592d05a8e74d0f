"""Views: halo-aware slicing of global arrays, lowered to halo exchange.

``u[1:-1]`` on a :class:`~pgas.GlobalArray` does not copy anything: it is a
lazy :class:`View`, a rectangular window of the array. Arithmetic between views
of equal shape aligns them element by element, as NumPy does, and builds an
expression. Nothing runs until the expression is assigned,
``u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])``, or returned.

The contract of the lowering. Relative to the assigned window, every view of
an array is a *shift* of that array by a static offset per axis (``u[:-2]``
seen from ``u[1:-1]`` is ``u`` shifted by -1). Assignment

1. collects the offsets per array and axis; their largest magnitude is the halo
   width that axis needs (checked against the declared halo and the block size);
2. exchanges each array's halo slabs of that width, axis after axis (two
   collective-permutes per split axis, corners included). An array read
   across one axis only keeps its slabs apart and reads each neighbour lazily
   (:func:`pgas.halo.shifted`); otherwise its blocks are extended
   (:func:`pgas.halo.extend`);
3. evaluates the expression on local reads of the (extended) blocks (no
   further communication) and writes it where the window is (a mask built from
   global indices; cells outside it, padding, and the outer cells of a
   ``Keep`` face keep their values).

So the compiled program sends halo-sized collective-permutes and never gathers
the array. :func:`shift` reads across the domain edge by the array's boundary
condition. Steps other than 1, bounds that are not Python integers and index
arrays raise :class:`~pgas.errors.IndexingError`: they cannot be a halo
exchange.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pgas.array import GlobalArray
from pgas.errors import DTypeMismatchError, IndexingError, LayoutError, ShapeMismatchError
from pgas.halo import extend, shifted, slabs

__all__ = ["View", "shift", "where", "apply"]

Scalar = (int, float, bool, np.number, np.bool_)


class View:
    """A lazy window of one or more global arrays (see the module docstring).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(6.0, dtype=np.float32), pgas.make_mesh(devices=1))
    >>> v = u[:-2] + u[2:]
    >>> v.shape
    (4,)
    >>> u[1:-1] = 0.5 * v
    >>> u.to_numpy()
    array([0., 1., 2., 3., 4., 5.], dtype=float32)
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    weak: bool = False  # weakly typed (from Python scalars): takes the target's dtype

    def __array__(self, *args, **kwargs):
        raise IndexingError(
            "a pgas View cannot become a NumPy array directly; assign it (u[...] = view) or "
            "call view.to_array() and then .to_numpy()"
        )

    # ---- expression building ----------------------------------------------------------
    def _leaves(self) -> list[_Leaf]:
        raise NotImplementedError

    def _eval(self, target: tuple[int, ...], ext: dict) -> jax.Array:
        raise NotImplementedError

    def _shifted(self, offset: int, axis: int) -> View:
        raise NotImplementedError

    def __getitem__(self, key) -> View:
        raise IndexingError(
            "slice the array, not an expression: write u[1:-1] + w[1:-1], not (u + w)[1:-1]"
        )

    def to_array(self) -> GlobalArray:
        """Materialise a whole-array expression as a new :class:`GlobalArray`.

        The result takes the layout of the expression's first array; cells the
        array keeps (``Keep`` faces) come from that array.

        >>> import numpy as np, pgas
        >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
        >>> (2 * u).to_array().to_numpy()
        array([0., 2., 4., 6.])
        """
        base = self._leaves()[0].array
        if self.shape != base.layout.shape:
            raise ShapeMismatchError(
                f"to_array needs a whole-array expression of shape {base.layout.shape}; got "
                f"shape {self.shape}; assign a window instead: u[1:-1] = expression"
            )
        out = GlobalArray(base.data, base.layout)
        out[...] = self
        return out

    def __repr__(self) -> str:
        return f"View(shape={self.shape}, dtype={self.dtype})"

    __hash__ = object.__hash__


class _Leaf(View):
    """A window ``array[start : start + extent]`` (full rank); ``kept`` marks non-integer axes."""

    def __init__(self, array: GlobalArray, start, extent, kept):
        self.array, self.start, self.extent, self.kept = array, start, extent, kept
        self.shape = tuple(e for e, k in zip(extent, kept) if k)
        self.dtype = array.dtype

    def _leaves(self):
        return [self]

    def _shifted(self, offset, axis):
        full = [i for i, k in enumerate(self.kept) if k][axis]  # view axis -> array axis
        start = list(self.start)
        start[full] -= offset
        return _Leaf(self.array, tuple(start), self.extent, self.kept)

    def _eval(self, target, ext):
        offset = tuple(s - t for s, t in zip(self.start, target))
        blocks, widths = ext[id(self.array)]
        if isinstance(widths, _Slabs):
            return shifted(blocks, widths.axis, offset[widths.axis], widths.left, widths.right)
        lay = self.array.layout
        for axis, (k, h, ax) in enumerate(zip(offset, widths, lay.axes)):
            if h:
                blocks = jax.lax.slice_in_dim(blocks, h + k, h + k + ax.block, axis=2 * axis + 1)
        return blocks


class _Op(View):
    """An elementwise function of views and scalars of one shape."""

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args
        views = [a for a in args if isinstance(a, View)]
        self.shape = views[0].shape
        for v in views[1:]:
            if v.shape != self.shape:
                raise ShapeMismatchError(
                    f"views of shapes {self.shape} and {v.shape} cannot be combined; windows "
                    f"must have equal shapes (e.g. u[1:-1] with u[:-2] and u[2:])"
                )
        spec = [jax.ShapeDtypeStruct((), a.dtype) if isinstance(a, View) else a for a in args]
        out = jax.eval_shape(fn, *spec)
        self.dtype, self.weak = np.dtype(out.dtype), bool(getattr(out, "weak_type", False))

    def _leaves(self):
        return [leaf for a in self.args if isinstance(a, View) for leaf in a._leaves()]

    def _shifted(self, offset, axis):
        return _Op(self.fn, tuple(shift(a, offset, axis) if isinstance(a, View) else a
                                  for a in self.args))  # fmt: skip

    def _eval(self, target, ext):
        return self.fn(*(a._eval(target, ext) if isinstance(a, View) else a for a in self.args))


def _operand(x):
    if isinstance(x, GlobalArray):
        return _whole(x)
    if isinstance(x, (View,) + Scalar):
        return x
    if isinstance(x, (jax.Array, np.ndarray)) and np.ndim(x) == 0:
        return x
    raise IndexingError(
        f"cannot combine a pgas view with {type(x).__name__} of shape {np.shape(x)}; use "
        f"views of global arrays and scalars (make arrays with pgas.from_numpy)"
    )


def _op(fn: Callable, *args) -> View:
    return _Op(fn, tuple(_operand(a) for a in args))


def apply(fn: Callable, *args) -> View:
    """Apply an elementwise JAX function to views (and scalars) of equal shape.

    >>> import numpy as np, jax.numpy as jnp, pgas
    >>> u = pgas.from_numpy(np.zeros(3, np.float32), pgas.make_mesh(devices=1))
    >>> u[:] = pgas.apply(jnp.cos, u)
    >>> u.to_numpy()
    array([1., 1., 1.], dtype=float32)
    """
    return _op(fn, *args)


def where(cond, x, y) -> View:
    """Elementwise choice between two views or scalars, like ``jnp.where``.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4), pgas.make_mesh(devices=1))
    >>> u[:] = pgas.where(u > 1, 9, u)
    >>> u.to_numpy()
    array([0, 1, 9, 9])
    """
    return _op(jnp.where, cond, x, y)


def _binary(fn, reflected=False):
    if reflected:
        return lambda self, other: _op(fn, other, self)
    return lambda self, other: _op(fn, self, other)


_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "lshift": operator.lshift, "rshift": operator.rshift,
}  # fmt: skip
_COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
            "eq": operator.eq, "ne": operator.ne}  # fmt: skip
_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs, "invert": operator.invert}

for _cls in (View, GlobalArray):
    for _name, _fn in _BINARY.items():
        setattr(_cls, f"__{_name}__", _binary(_fn))
        setattr(_cls, f"__r{_name}__", _binary(_fn, reflected=True))
    for _name, _fn in _COMPARE.items():
        setattr(_cls, f"__{_name}__", _binary(_fn))
    for _name, _fn in _UNARY.items():
        setattr(_cls, f"__{_name}__", lambda self, fn=_fn: _op(fn, self))
    _cls.astype = lambda self, dtype: _op(lambda x: x.astype(dtype), self)


# ---- indexing ---------------------------------------------------------------------------
def _static_int(x, what: str) -> int:
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise IndexingError(
            f"{what} = {x!r} ({type(x).__name__}): pgas needs static Python integers in "
            f"slices so the halo width is known when compiling; use a literal or a constant"
        )
    return int(x)


def _normalize(key, shape) -> tuple[tuple, tuple, tuple]:
    """``(start, extent, kept)`` per axis of a basic index with unit steps."""
    key = key if isinstance(key, tuple) else (key,)
    dots = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(dots) > 1:
        raise IndexingError(f"index {key!r} has more than one '...'")
    if dots:
        i = dots[0]
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1 :]
    if len(key) > len(shape):
        raise IndexingError(f"index {key!r} has {len(key)} entries for a {len(shape)}-D array")
    key = key + (slice(None),) * (len(shape) - len(key))
    start, extent, kept = [], [], []
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            step = _static_int(k.step, f"step of index {axis}")
            if step not in (None, 1):
                raise IndexingError(
                    f"slice {k} on axis {axis} has step {step}; only unit steps are halo "
                    f"shifts: use step 1 (strided access would gather the array)"
                )
            a = _static_int(k.start, f"start of index {axis}")
            b = _static_int(k.stop, f"stop of index {axis}")
            lo, hi, _ = slice(a, b).indices(n)
            start.append(lo)
            extent.append(max(hi - lo, 0))
            kept.append(True)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexingError(f"index {int(k)} is out of bounds for axis {axis} of size {n}")
            start.append(i)
            extent.append(1)
            kept.append(False)
        else:
            raise IndexingError(
                f"index {k!r} ({type(k).__name__}) on axis {axis} is not supported: pgas "
                f"takes integers and slices with static bounds and unit step (no index "
                f"arrays, masks or traced values: they would gather the array)"
            )
    if any(e == 0 for e in extent):
        raise IndexingError(f"index {key!r} selects no cells (shape {tuple(extent)})")
    return tuple(start), tuple(extent), tuple(kept)


def _whole(array: GlobalArray) -> _Leaf:
    n = array.layout.shape
    return _Leaf(array, (0,) * len(n), n, (True,) * len(n))


def _check_unbatched(array: GlobalArray) -> None:
    if array.batch_ndim:
        raise IndexingError(
            f"this array holds {array.data.shape[0]} stacked snapshots; index a single field "
            f"(use .to_numpy() to read snapshots)"
        )


def _getitem(self: GlobalArray, key) -> View:
    _check_unbatched(self)
    return _Leaf(self, *_normalize(key, self.layout.shape))


def shift(x: GlobalArray | View, offset: int, axis: int = 0) -> View:
    """``x`` shifted by ``offset`` cells along ``axis``, like ``jnp.roll``.

    Element ``i`` is ``x[i - offset]``; reads beyond the domain edge follow
    the array's boundary condition (periodic wraps; Dirichlet reads the value;
    Neumann and Keep mirror). Shifts compose (``shift(shift(g, 1, 0), 1, 1)`` is
    the diagonal neighbour) and apply to expressions.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1), boundary=pgas.Dirichlet(-1))
    >>> pgas.shift(u, 1).to_array().to_numpy()
    array([-1.,  0.,  1.,  2.])
    """
    if isinstance(x, GlobalArray):
        _check_unbatched(x)
        x = _whole(x)
    if not isinstance(x, View):
        raise IndexingError(f"shift needs a pgas.GlobalArray or View, got {type(x).__name__}")
    ndim = len(x.shape)
    axis = _static_int(axis, "axis")
    if not -ndim <= axis < ndim:
        raise IndexingError(f"axis = {axis} is out of range for a {ndim}-D array")
    return x._shifted(_static_int(offset, "offset"), axis % ndim)


# ---- assignment -------------------------------------------------------------------------
def _check_dtype(value: np.dtype, target: np.dtype, weak: bool) -> None:
    if weak:  # a Python-scalar expression: ints fit any number, floats need a float array
        ok = target.kind != "b" if value.kind in "iub" else target.kind in "fc"
    else:
        ok = np.can_cast(value, target, casting="same_kind")
    if not ok:
        raise DTypeMismatchError(
            f"cannot assign {value} values to a {target} array without loss; cast the "
            f"expression explicitly with .astype({str(target)!r}) or make the array {value}"
        )


def _assign(array: GlobalArray, key, value) -> jax.Array:
    """The new physical data of ``array`` after ``array[key] = value``."""
    _check_unbatched(array)
    lay = array.layout
    start, extent, kept = _normalize(key, lay.shape)
    shape = tuple(e for e, k in zip(extent, kept) if k)
    if isinstance(value, GlobalArray):
        value = _whole(value)
    if isinstance(value, View):
        if value.shape != shape:
            raise ShapeMismatchError(
                f"cannot assign a view of shape {value.shape} to a window of shape {shape}"
            )
        leaves = value._leaves()
    else:
        value = _operand(value)
        leaves = []
    if isinstance(value, View):
        _check_dtype(value.dtype, np.dtype(array.dtype), value.weak)
    else:
        _check_dtype(np.result_type(value), np.dtype(array.dtype), isinstance(value, Scalar))

    # 1. halo widths per array and axis
    needs: dict[int, tuple[GlobalArray, list[int]]] = {}
    for leaf in leaves:
        if not leaf.array.layout.same_grid(lay):
            other = leaf.array.layout
            raise LayoutError(
                f"a view of an array of shape {other.shape} split {other.spec} over mesh "
                f"{dict(other.mesh.shape)} cannot be assigned to one of shape {lay.shape} split "
                f"{lay.spec} over {dict(lay.mesh.shape)}; use arrays of one layout"
            )
        if leaf.kept != kept:
            raise IndexingError(
                "a view indexes other axes with integers than the window it is assigned to; "
                "integer indices must sit on the same axes on both sides"
            )
        arr, widths = needs.setdefault(id(leaf.array), (leaf.array, [0] * lay.ndim))
        for axis, (s, t) in enumerate(zip(leaf.start, start)):
            widths[axis] = max(widths[axis], abs(s - t))

    # 2. extended blocks of every array read
    ext = {}
    for key_id, (arr, widths) in needs.items():
        blocks = arr.layout.to_blocks(arr.data)
        for axis, h in enumerate(widths):
            if h:
                arr.layout.check_halo(axis, h)
        axes = [axis for axis, h in enumerate(widths) if h]
        if len(axes) == 1 and arr.layout.even and arr.dtype != np.bool_:
            ext[key_id] = (blocks, _slabs(blocks, arr.layout, axes[0], widths[axes[0]]))
            continue
        for axis, h in enumerate(widths):
            if h:
                blocks = extend(
                    blocks, axis, h, arr.layout.axes[axis], arr.layout.boundary[axis],
                    arr.layout.block_iota(axis),
                )  # fmt: skip
        # The barrier keeps XLA from folding the slices of the extended block back into
        # its pieces: the stencil then reads only the extended copy and can write its
        # result over the loop buffer (else XLA adds a full copy per step, measured 3x
        # slower for Life); the explicit path gets the same effect from its reshape.
        ext[key_id] = (jax.lax.optimization_barrier(blocks), widths)

    # 3. evaluate and write inside the window
    old = lay.to_blocks(array.data)
    new = value._eval(start, ext) if isinstance(value, View) else value
    new = jnp.asarray(new).astype(array.dtype)
    reach = [max([w[axis] for _, w in needs.values()], default=0) for axis in range(lay.ndim)]
    mask = lay.window_mask(start, extent, reach)
    result = new if mask is None else jnp.where(mask, new, old)
    return lay.from_blocks(jnp.broadcast_to(result, old.shape))


class _Slabs(NamedTuple):
    """The halo slabs of an array extended along one axis only (read with ``shifted``)."""

    axis: int
    left: jax.Array
    right: jax.Array


def _slabs(blocks: jax.Array, lay, axis: int, width: int) -> _Slabs:
    nb = blocks.shape[2 * axis + 1]
    first = jax.lax.slice_in_dim(blocks, 0, width, axis=2 * axis + 1)
    last = jax.lax.slice_in_dim(blocks, nb - width, nb, axis=2 * axis + 1)
    left, right = slabs(first, last, axis, width, lay.axes[axis], lay.boundary[axis],
                        lay.block_iota(axis))  # fmt: skip
    return _Slabs(axis, left, right)


def _setitem(self: GlobalArray, key, value) -> None:
    self.data = _assign(self, key, value)


class _At:
    def __init__(self, array: GlobalArray):
        self.array = array

    def __getitem__(self, key):
        return _AtIndex(self.array, key)


class _AtIndex:
    def __init__(self, array: GlobalArray, key):
        self.array, self.key = array, key

    def set(self, value) -> GlobalArray:
        """A new array equal to the old one with ``value`` written in the window."""
        return GlobalArray(_assign(self.array, self.key, value), self.array.layout)


GlobalArray.__getitem__ = _getitem
GlobalArray.__setitem__ = _setitem
GlobalArray.at = property(lambda self: _At(self), doc="Functional update: ``u.at[1:-1].set(v)``.")


def as_array(x):
    """A :class:`GlobalArray` from a GlobalArray or a whole-array View (for step results)."""
    return x.to_array() if isinstance(x, View) else x
