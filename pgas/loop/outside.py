"""What a user's function reads from outside: the numbers and arrays a compiled program bakes in.

A step (or ``converged``, or ``observe``) that reads a number from a module
global or from an enclosing function's variable is traced once: the value it
read is a constant of the compiled program. :func:`pgas.run`,
:func:`pgas.run_until` and :func:`pgas.loop.plan.plan` cache what they compile
per function, so each puts :func:`numbers_read` in its cache key: a changed
number compiles anew (never a stale program), an unchanged one reuses the
program. To change a value without a new compile, pass it through ``params=``
(a traced argument).

What counts: the globals the function's code names (its own and its nested
functions' and comprehensions' ``co_names``, looked up in ``fn.__globals__``)
and its closure cells, holding a Python ``bool``, ``int``, ``float`` or
``complex``, a NumPy scalar, a NumPy array of at most :data:`SMALL` elements
(by value: a change in place counts too), or a tuple, list or dict of at most
:data:`SMALL` such values; followed into the plain Python functions found
there (:data:`DEPTH` levels, each function once), the function a
``functools.partial`` wraps and a bound method's function. Arrays of pgas
and JAX are keyed by identity instead (:func:`captured`, each in a :class:`Same`);
larger NumPy arrays, object attributes and module attributes (``config.tol``)
are not followed.

The names each code object reads are found once and kept (:func:`names_of`),
so a call costs a dictionary look-up per name.

>>> scale = 0.5
>>> def step(u):
...     return u * scale
>>> numbers_read(step)
(('scale', (<class 'float'>, '0.5')),)
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from pgas.globalview.array import GlobalArray

__all__ = ["numbers_read", "names_of", "captured", "Same", "SMALL", "DEPTH"]

SMALL = 64  #: elements of a NumPy array, tuple, list or dict compared by value, at most
DEPTH = 2  #: levels of functions followed below the one given

_NAMES: dict[int, tuple[weakref.ref, tuple[str, ...]]] = {}


def names_of(code: types.CodeType) -> tuple[str, ...]:
    """The names ``code`` and the code objects nested in it look up (``co_names``), once per
    code object.

    >>> names_of((lambda u: [tol * x for x in u]).__code__)
    ('tol',)
    """
    found = _NAMES.get(id(code))
    if found is not None and found[0]() is code:
        return found[1]
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(x for x in c.co_consts if isinstance(x, types.CodeType))
    out = tuple(sorted(names))
    key = id(code)
    # the callback holds the table itself: at exit the module's globals may be gone first
    _NAMES[key] = (weakref.ref(code, lambda _, key=key, table=_NAMES: table.pop(key, None)), out)
    return out


def _number(value: Any) -> tuple | None:
    """``value`` as a key part (its type and exact bits: ``1`` and ``1.0``, ``0.0`` and
    ``-0.0`` apart, a NaN equal to itself), or None if it is not a number-like value."""
    kind = type(value)
    if kind is bool or kind is int:
        return (kind, value)
    if kind is float or kind is complex:
        return (kind, repr(value))
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return (value.dtype.str, value.tobytes())
    if isinstance(value, np.ndarray) and value.size <= SMALL and value.dtype.kind in "biufc":
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (bool, int, float, complex)):  # a subclass
        return (kind, repr(value))
    return None


def _value(value: Any) -> tuple | None:
    """A number, or a small tuple, list or dict of numbers, as a key part; else None."""
    found = _number(value)
    if found is not None or not isinstance(value, (tuple, list, dict)) or len(value) > SMALL:
        return found
    items = value.items() if isinstance(value, dict) else enumerate(value)
    parts = tuple((k, v) for k, v in ((k, _number(v)) for k, v in items) if v is not None)
    return (type(value), parts) if parts else None


def numbers_read(*fns: Callable | None) -> tuple:
    """The numbers the functions ``fns`` read from outside (see the module docstring), as a
    hashable tuple for a cache key: equal while every value is the same. ``None`` is
    skipped.

    >>> def make(c):
    ...     return lambda u: u * c
    >>> same, other = numbers_read(make(2)), numbers_read(make(3))
    >>> same == numbers_read(make(2)), same == other
    (True, False)
    """
    out: list = []
    seen: set[int] = set()

    def visit(fn: Any, level: int) -> None:
        if isinstance(fn, functools.partial):
            fn = fn.func
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        if not isinstance(fn, types.FunctionType) or id(fn) in seen:
            return
        seen.add(id(fn))
        later = []
        for i, cell in enumerate(fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            found = _value(value)
            if found is not None:
                out.append((i, found))
            elif level:
                later.append(value)
        scope = fn.__globals__
        for name in names_of(fn.__code__):
            if name not in scope:
                continue
            value = scope[name]
            found = _value(value)
            if found is not None:
                out.append((name, found))
            elif level:
                later.append(value)
        for value in later:
            visit(value, level - 1)

    for fn in fns:
        if fn is not None:
            visit(fn, DEPTH)
    return tuple(out)


class Same:
    """An object compared by identity (a cache key part that holds the object alive);
    ``field``: the :class:`~pgas.globalview.array.GlobalArray` whose data ``obj`` is (not part
    of the key).

    >>> a, b = [1.0], [1.0]
    >>> Same(a) == Same(a), Same(a) == Same(b)
    (True, False)
    """

    __slots__ = ("obj", "field")

    def __init__(self, obj, field: GlobalArray | None = None):
        self.obj, self.field = obj, field

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return isinstance(other, Same) and other.obj is self.obj


def captured(step: Callable, depth: int = 3) -> tuple:
    """The arrays (:class:`GlobalArray` data, ``jax.Array``) ``step`` reads from its enclosing
    scope: its closure cells and the globals its code names, and those of the functions
    found there (``depth`` levels), each in a :class:`Same`. A compiled program holds such
    arrays as constants; the program cache keys on them by identity, so a rebound array gives
    a new program.

    >>> import numpy as np, pgas
    >>> c = pgas.from_numpy(np.ones(3), pgas.make_mesh(devices=1))
    >>> len(captured(lambda u: u * c))
    1
    """
    found: list = []
    seen: set[int] = set()

    def visit(obj, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, GlobalArray):
            plain = obj.ext is None and not obj.batch_ndim  # a field a loop can extend
            found.append(Same(obj.data, obj if plain else None))
        elif isinstance(obj, jax.Array):
            found.append(Same(obj))
        elif isinstance(obj, (list, tuple, dict)) and level > 0:
            for x in obj.values() if isinstance(obj, dict) else obj:
                visit(x, level - 1)
        elif isinstance(obj, functools.partial) and level > 0:
            for x in (obj.func, *obj.args, *obj.keywords.values()):
                visit(x, level - 1)
        elif callable(obj) and level > 0 and hasattr(obj, "__code__"):
            for cell in obj.__closure__ or ():
                try:
                    visit(cell.cell_contents, level - 1)
                except ValueError:  # an empty cell
                    pass
            names = obj.__globals__
            for name in obj.__code__.co_names:
                if name in names:
                    visit(names[name], level - 1)

    visit(step, depth)
    return tuple(found)
