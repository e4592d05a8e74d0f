"""Views: lazy windows of global arrays, and the expressions built from them.

``u[1:-1]`` on a :class:`~pgas.GlobalArray` copies nothing: it is a lazy
:class:`View`, a rectangular window of the array (a :class:`Leaf`).
Arithmetic between views of equal shape aligns them element by element, as
NumPy does, and builds an expression (:class:`Op`). Nothing runs until the
expression is assigned, ``u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])``
(see :mod:`pgas.lower`), or returned from a step.

:func:`shift` of a window is another window (a :class:`Leaf` a few cells
over); :func:`shift` of an expression keeps the expression whole
(:class:`Shifted`), as the user wrote it, so that the lowering can compute it
once over the cells all its uses need and slice each use from it (on GPUs;
see :mod:`pgas.lower`) instead of copying it once per shift with every window
moved.

The operators live in the :class:`Operators` mixin, shared by views and by
:class:`~pgas.GlobalArray` (a whole array is the view of all its cells).
:func:`shift` reads across the domain edge by the array's boundary
condition; :func:`where` and :func:`apply` combine views elementwise.
Bounds that are not Python integers and index arrays raise
:class:`~pgas.errors.IndexingError`: they cannot be a halo exchange. A slice
with a step, ``u[::2]``, is no window: on a :class:`~pgas.GlobalArray` it reads
a new array (:mod:`pgas.globalview.strided`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from pgas.errors import ConversionError, IndexingError, ShapeMismatchError

__all__ = [
    "View", "Leaf", "Op", "Shifted", "Operators", "Window",
    "shift", "where", "apply", "normalize_index", "as_view", "is_scalar",
]  # fmt: skip

SCALARS = (int, float, bool, np.number, np.bool_)

#: NumPy's ufuncs of the operators of :class:`Operators` (``np.float32(0.5) * u`` calls one)
_OPERATOR_UFUNCS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.true_divide: operator.truediv, np.floor_divide: operator.floordiv,
    np.remainder: operator.mod, np.power: operator.pow, np.bitwise_and: operator.and_,
    np.bitwise_or: operator.or_, np.bitwise_xor: operator.xor, np.left_shift: operator.lshift,
    np.right_shift: operator.rshift, np.less: operator.lt, np.less_equal: operator.le,
    np.greater: operator.gt, np.greater_equal: operator.ge, np.equal: operator.eq,
    np.not_equal: operator.ne, np.negative: operator.neg, np.positive: operator.pos,
    np.absolute: operator.abs, np.invert: operator.invert,
}  # fmt: skip


def is_scalar(x: Any) -> bool:
    """True for Python and NumPy scalars and 0-d arrays (they broadcast against views)."""
    return isinstance(x, SCALARS) or (isinstance(x, (jax.Array, np.ndarray)) and np.ndim(x) == 0)


def _binary(fn, reflected=False):
    if reflected:
        return lambda self, other: _op(fn, other, self)
    return lambda self, other: _op(fn, self, other)


def _unary(fn):
    return lambda self: _op(fn, self)


class Operators:
    """Elementwise arithmetic, comparisons and ``astype``, building :class:`Op` expressions.

    Mixed into :class:`View` and :class:`pgas.GlobalArray`; a class using it
    gives its whole-array view through ``as_view()``.
    """

    __slots__ = ()

    def __array_ufunc__(self, ufunc, method: str, *inputs, **kwargs) -> View:
        """NumPy's ufuncs on pgas operands.

        A NumPy scalar or array on the left of an operator (``np.float32(0.5) * u``)
        calls the ufunc of the operator (``np.multiply``): it builds the operator's
        expression, as the reflected operator below would. Any other ufunc
        (``np.sin(u[1:-1])``) raises :class:`~pgas.errors.ConversionError` naming
        :func:`pgas.apply`: NumPy cannot run on the devices' blocks.
        """
        fn = _OPERATOR_UFUNCS.get(ufunc)
        if fn is not None and method == "__call__" and not kwargs:
            return _op(fn, *inputs)
        name = getattr(ufunc, "__name__", str(ufunc))
        what = "GlobalArray" if type(self).__name__ == "GlobalArray" else "view"
        if method != "__call__":  # np.add.reduce(u), np.maximum.accumulate(u), ...
            raise ConversionError(
                f"np.{name}.{method}(...) of a pgas {what}: NumPy ufuncs do not run on pgas "
                f"arrays (their blocks live on the devices); reduce with pgas.sum, pgas.max, "
                f"pgas.min, or call np.{name}.{method} on u.to_numpy() for a NumPy result"
            )
        views = ", ".join(["u[1:-1]", "w[1:-1]", "v[1:-1]"][: max(1, min(ufunc.nin, 3))])
        raise ConversionError(
            f"np.{name}(...) of a pgas {what}: NumPy ufuncs do not run on pgas arrays and "
            f"views (their blocks live on the devices); write pgas.apply(jnp.{name}, ...) "
            f"with the jax.numpy function, e.g. u[1:-1] = pgas.apply(jnp.{name}, {views}), "
            f"or call np.{name} on u.to_numpy() for a NumPy result"
        )

    def as_view(self) -> View:
        raise NotImplementedError

    def __bool__(self) -> bool:
        raise ConversionError(
            "the truth value of a pgas array or expression is ambiguous (it has many cells "
            "on many devices): for `if`/`while` reduce it first, pgas.any(u > x), "
            "pgas.all(u > x) or pgas.max(u) > x"
        )

    def astype(self, dtype) -> View:
        """The expression cast to ``dtype`` (elementwise)."""
        return _op(lambda x: x.astype(dtype), self)

    __add__, __radd__ = _binary(operator.add), _binary(operator.add, True)
    __sub__, __rsub__ = _binary(operator.sub), _binary(operator.sub, True)
    __mul__, __rmul__ = _binary(operator.mul), _binary(operator.mul, True)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _binary(operator.truediv, True)
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv), _binary(operator.floordiv, True)
    __mod__, __rmod__ = _binary(operator.mod), _binary(operator.mod, True)
    __pow__, __rpow__ = _binary(operator.pow), _binary(operator.pow, True)
    __and__, __rand__ = _binary(operator.and_), _binary(operator.and_, True)
    __or__, __ror__ = _binary(operator.or_), _binary(operator.or_, True)
    __xor__, __rxor__ = _binary(operator.xor), _binary(operator.xor, True)
    __lshift__, __rlshift__ = _binary(operator.lshift), _binary(operator.lshift, True)
    __rshift__, __rrshift__ = _binary(operator.rshift), _binary(operator.rshift, True)
    __lt__, __le__ = _binary(operator.lt), _binary(operator.le)
    __gt__, __ge__ = _binary(operator.gt), _binary(operator.ge)
    __eq__, __ne__ = _binary(operator.eq), _binary(operator.ne)  # type: ignore[assignment]
    __neg__, __pos__ = _unary(operator.neg), _unary(operator.pos)
    __abs__, __invert__ = _unary(operator.abs), _unary(operator.invert)
    __hash__ = object.__hash__


class View(Operators):
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

    __slots__ = ("shape", "dtype", "weak")

    def as_view(self) -> View:
        return self

    def leaves(self) -> list[Leaf]:
        """The array windows the expression reads, shifts applied (one per read).

        >>> import numpy as np, pgas
        >>> u = pgas.from_numpy(np.arange(6.0), pgas.make_mesh(devices=1))
        >>> [leaf.window.start for leaf in pgas.shift(u[1:-1] + u[2:], 1).leaves()]
        [(0,), (1,)]
        """
        raise NotImplementedError

    def operands(self) -> tuple[View, ...]:
        """The views the expression is built from (none for a window)."""
        raise NotImplementedError

    def shifted(self, offset: int, axis: int) -> View:
        """The expression read ``offset`` cells earlier along view axis ``axis``."""
        if not offset:
            return self
        return Shifted(self, tuple(offset if a == axis else 0 for a in range(len(self.shape))))

    def __array__(self, *args, **kwargs):
        raise ConversionError(
            "a pgas View cannot become a NumPy array directly; assign it (u[...] = view) or "
            "call view.to_array() and then .to_numpy()"
        )

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d pgas view")
        return self.shape[0]

    def _scalar(self, kind: str):
        raise ConversionError(
            f"{kind}() of a pgas expression: assign it to an array, or reduce it (pgas.max, "
            f"pgas.sum) and convert the result"
        )

    def __int__(self) -> int:
        return self._scalar("int")

    def __float__(self) -> float:
        return self._scalar("float")

    def __getitem__(self, key) -> View:
        raise IndexingError(
            "slice the array, not an expression: write u[1:-1] + w[1:-1], not (u + w)[1:-1]"
        )

    def to_array(self):
        """Materialise a whole-array expression as a new :class:`~pgas.GlobalArray`.

        The result takes the layout of the expression's first array; cells the
        array keeps (``Keep`` faces) come from that array.

        >>> import numpy as np, pgas
        >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
        >>> (2 * u).to_array().to_numpy()
        array([0., 2., 4., 6.])
        """
        base = self.leaves()[0].array
        if self.shape != base.layout.shape:
            raise ShapeMismatchError(
                f"to_array needs a whole-array expression of shape {base.layout.shape}; got "
                f"shape {self.shape}; assign a window instead: u[1:-1] = expression"
            )
        out = base.copy()
        out[...] = self
        return out

    def __repr__(self) -> str:
        return f"View(shape={self.shape}, dtype={self.dtype})"


class Window:
    """A rectangular window of a global array: ``start`` and ``extent`` per axis.

    ``kept`` marks the axes a slice keeps (an integer index drops its axis).

    >>> Window((1,), (4,), (True,)).shape
    (4,)
    """

    __slots__ = ("start", "extent", "kept")

    def __init__(self, start: tuple[int, ...], extent: tuple[int, ...], kept: tuple[bool, ...]):
        self.start, self.extent, self.kept = start, extent, kept

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(e for e, k in zip(self.extent, self.kept) if k)


class Leaf(View):
    """The window ``array[window]`` of one global array."""

    __slots__ = ("array", "window")

    def __init__(self, array, window: Window):
        self.array, self.window = array, window
        self.shape, self.dtype, self.weak = window.shape, np.dtype(array.dtype), False

    def leaves(self) -> list[Leaf]:
        return [self]

    def operands(self) -> tuple[View, ...]:
        return ()

    def shifted(self, offset, axis):
        w = self.window
        full = [i for i, k in enumerate(w.kept) if k][axis]  # view axis -> array axis
        start = list(w.start)
        start[full] -= offset
        return Leaf(self.array, Window(tuple(start), w.extent, w.kept))


class Op(View):
    """An elementwise function of views and scalars of one shape."""

    __slots__ = ("fn", "args")

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

    def leaves(self):
        return [leaf for a in self.args if isinstance(a, View) for leaf in a.leaves()]

    def operands(self) -> tuple[View, ...]:
        return tuple(a for a in self.args if isinstance(a, View))


class Shifted(View):
    """An expression read ``offsets[i]`` cells earlier along each view axis, kept whole.

    :func:`shift` of an expression builds one; shifting it again adds to
    ``offsets`` (back to ``inner`` where they cancel). On GPUs the lowering
    evaluates ``inner`` once per assignment over the cells all its uses need
    and reads each use as a slice of that (see :mod:`pgas.lower`).
    :meth:`leaves` gives the windows it reads with the offsets added, so
    halo widths are those of every window moved by the shift.

    >>> import numpy as np, pgas
    >>> g = pgas.from_numpy(np.arange(16).reshape(4, 4), pgas.make_mesh(devices=1))
    >>> rows = g + pgas.shift(g, 1, 1)
    >>> s = pgas.shift(pgas.shift(rows, 1, 0), 2, 1)
    >>> s.inner is rows, s.offsets
    (True, (1, 2))
    >>> pgas.shift(s, -1, 0).offsets, pgas.shift(pgas.shift(rows, 1, 0), -1, 0) is rows
    ((0, 2), True)
    """

    __slots__ = ("inner", "offsets")

    def __init__(self, inner: View, offsets: tuple[int, ...]):
        self.inner, self.offsets = inner, offsets
        self.shape, self.dtype, self.weak = inner.shape, inner.dtype, inner.weak

    def leaves(self) -> list[Leaf]:
        out = self.inner.leaves()
        for axis, o in enumerate(self.offsets):
            if o:
                out = [leaf.shifted(o, axis) for leaf in out]
        return out

    def operands(self) -> tuple[View, ...]:
        return (self.inner,)

    def shifted(self, offset, axis):
        if not offset:
            return self
        offsets = tuple(o + offset if a == axis else o for a, o in enumerate(self.offsets))
        return Shifted(self.inner, offsets) if any(offsets) else self.inner


def as_view(x: Any) -> View | Any:
    """A view for arrays and views; scalars pass through; anything else is refused.

    >>> as_view(2.0)
    2.0
    """
    if isinstance(x, Operators):
        return x.as_view()
    if is_scalar(x):
        return x
    raise IndexingError(
        f"cannot combine a pgas view with {type(x).__name__} of shape {np.shape(x)}; use "
        f"views of global arrays and scalars (make arrays with pgas.from_numpy)"
    )


def _op(fn: Callable, *args) -> View:
    return Op(fn, tuple(as_view(a) for a in args))


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
    import jax.numpy as jnp

    return _op(jnp.where, cond, x, y)


# ---- indexing ---------------------------------------------------------------------------
def _static_int(x, what: str) -> int | None:
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise IndexingError(
            f"{what} = {x!r} ({type(x).__name__}): pgas needs static Python integers in "
            f"slices so the halo width is known when compiling; use a literal or a constant"
        )
    return int(x)


def _expand(key, ndim: int) -> tuple:
    key = key if isinstance(key, tuple) else (key,)
    dots = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(dots) > 1:
        raise IndexingError(f"index {key!r} has more than one '...'")
    if dots:
        i = dots[0]
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise IndexingError(f"index {key!r} has {len(key)} entries for a {ndim}-D array")
    return key + (slice(None),) * (ndim - len(key))


def _one(k, n: int, axis: int) -> tuple[int, int, bool]:
    """``(start, extent, kept)`` of one index entry on an axis of ``n`` cells."""
    if isinstance(k, slice):
        step = _static_int(k.step, f"step of index {axis}")
        if step not in (None, 1):
            raise IndexingError(
                f"slice {k} on axis {axis} has step {step}; a window takes unit steps: "
                f"slice the GlobalArray itself for a strided read or write (u[::2], "
                f"u[1::2] = c; pgas.globalview.strided)"
            )
        a = _static_int(k.start, f"start of index {axis}")
        b = _static_int(k.stop, f"stop of index {axis}")
        lo, hi, _ = slice(a, b).indices(n)
        return lo, max(hi - lo, 0), True
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        i = int(k) + n if k < 0 else int(k)
        if not 0 <= i < n:
            raise IndexingError(f"index {int(k)} is out of bounds for axis {axis} of size {n}")
        return i, 1, False
    raise IndexingError(
        f"index {k!r} ({type(k).__name__}) on axis {axis} is not supported: pgas "
        f"takes integers and slices with static bounds and unit step (no index "
        f"arrays, masks or traced values: they would gather the array)"
    )


def normalize_index(key, shape: tuple[int, ...]) -> Window:
    """The :class:`Window` of a basic index (integers and unit-step slices).

    >>> w = normalize_index((slice(1, -1), 0), (5, 3))
    >>> w.start, w.extent, w.kept
    ((1, 0), (3, 1), (True, False))
    """
    key = _expand(key, len(shape))
    parts = [_one(k, n, axis) for axis, (k, n) in enumerate(zip(key, shape))]
    start, extent, kept = (tuple(p[i] for p in parts) for i in range(3))
    if any(e == 0 for e in extent):
        raise IndexingError(f"index {key!r} selects no cells (shape {tuple(extent)})")
    return Window(start, extent, kept)


def shift(x, offset: int, axis: int = 0) -> View:
    """``x`` shifted by ``offset`` cells along ``axis``, like ``jnp.roll``.

    Element ``i`` is ``x[i - offset]``; reads beyond the domain edge follow
    the array's boundary condition (periodic wraps; Dirichlet reads the value;
    Neumann and Keep mirror). Shifts compose (``shift(shift(g, 1, 0), 1, 1)`` is
    the diagonal neighbour) and apply to expressions: a shifted window is a
    window (:class:`Leaf`), a shifted expression stays one expression
    (:class:`Shifted`), which the lowering computes once however many shifts
    of it an assignment reads (on GPUs; see :mod:`pgas.lower`).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1), boundary=pgas.Dirichlet(-1))
    >>> pgas.shift(u, 1).to_array().to_numpy()
    array([-1.,  0.,  1.,  2.])
    """
    if not isinstance(x, Operators):
        raise IndexingError(f"shift needs a pgas.GlobalArray or View, got {type(x).__name__}")
    x = x.as_view()
    ndim = len(x.shape)
    axis = _static_int(axis, "axis")
    if not -ndim <= axis < ndim:
        raise IndexingError(f"axis = {axis} is out of range for a {ndim}-D array")
    return x.shifted(_static_int(offset, "offset"), axis % ndim)
