"""Global reductions over the real cells of a global array.

``sum``, ``min``, ``max`` and ``mean`` ignore the padding cells of uneven
layouts and compile to one all-reduce of a scalar per call: each device reduces
its block, then one ``psum``/``pmin``/``pmax`` over all the array's mesh axes
at once (left to the partitioner, a 2-D mesh would get one all-reduce per
axis). Use them inside a step or a snapshot observer for diagnostics such as
total heat or population.

A NaN anywhere gives NaN and an infinity counts as in NumPy (``np.max``,
``np.min``, ``np.sum`` of the same cells) on every mesh: a float max or min
all-reduces its NaN flag beside its value (:func:`extreme`: one all-reduce of
two scalars), since XLA's max/min all-reduce drops a NaN, and with it the
block that held it.

They take what users write, arrays or expressions of views
(``pgas.sum(u * u)``, ``pgas.max(abs(u[1:-1] - v[1:-1]))``): an expression
is evaluated on each device's block only (the halo exchange its shifted reads
need, as in an assignment, :mod:`pgas.lower`), cells outside its window are
the reduction's identity, then the same one all-reduce of a scalar.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.errors import LayoutError, PgasError
from pgas.globalview import reprosum
from pgas.globalview.array import GlobalArray
from pgas.globalview.forms import physical_of
from pgas.globalview.lower import assign
from pgas.globalview.view import View, Window
from pgas.grid.boundary import Periodic

__all__ = ["sum", "min", "max", "mean", "any", "all", "traced_reductions", "extreme", "recorded"]


class _Count:
    """Reductions traced so far (each is one all-reduce of a scalar in a compiled program)."""

    value = 0


def traced_reductions() -> int:
    """How many reductions have been traced or run in this process so far.

    :func:`pgas.loop.plan.plan` reads it around a trace of a step: a step whose
    trace adds to it reduces over the whole grid inside the step, which needs
    every cell up to date, so it runs one step per exchange (``k = 1``).

    >>> import numpy as np, pgas
    >>> before = traced_reductions()
    >>> _ = pgas.sum(pgas.from_numpy(np.ones(3), pgas.make_mesh(devices=1)))
    >>> traced_reductions() - before
    1
    """
    return _Count.value


class _Seen:
    """The lists :func:`recorded` collects reductions in (innermost last)."""

    stack: list[list] = []


@contextlib.contextmanager
def recorded() -> Iterator[list]:
    """Collect the value of every reduction made inside the block (its scalar result).

    :func:`pgas.run_until` reads what its ``converged`` reduced, to stop when a
    value is NaN or infinite (the state went non-finite).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([1.0, np.nan]), pgas.make_mesh(devices=1))
    >>> with recorded() as seen:
    ...     _ = pgas.max(u) < 1.0
    >>> [float(x) for x in seen]
    [nan]
    """
    seen: list = []
    _Seen.stack.append(seen)
    try:
        yield seen
    finally:
        _Seen.stack.remove(seen)


def extreme(local: jax.Array, op: str, names: tuple) -> jax.Array:
    """``local``, a block's ``np.max`` (``op="max"``) or ``np.min``, reduced over the mesh
    axes ``names`` inside ``shard_map`` as NumPy reduces: a NaN on any device gives NaN.

    XLA's max/min all-reduce drops a NaN (and with it the rest of the block that held
    it), so a float value travels with a NaN flag: one all-reduce of two values.

    >>> float(extreme(jnp.float64(jnp.nan), "max", ()))
    nan
    """
    collective = jax.lax.pmax if op == "max" else jax.lax.pmin
    if not names:
        return local
    if not jnp.issubdtype(local.dtype, jnp.floating):
        return collective(local, names)
    nan = jnp.isnan(local)
    sign = 1 if op == "max" else -1  # the flag: 1 (pmax) or -1 (pmin) where a NaN was
    value = jnp.where(nan, jnp.asarray(-sign * np.inf, local.dtype), local)
    both = collective(jnp.stack([value, sign * nan.astype(local.dtype)]), names)
    return jnp.where(both[1] != 0, jnp.asarray(np.nan, local.dtype), both[0])


_KINDS = {"sum": (jnp.sum, jax.lax.psum), "min": (jnp.min, None), "max": (jnp.max, None),
          "reproducible": (None, None)}  # fmt: skip


def reproducible_psum(block: jax.Array, size: int, names: tuple) -> jax.Array:
    """:mod:`pgas.globalview.reprosum` of a block inside ``shard_map`` over mesh axes
    ``names`` (cells not summed hold 0; ``size``: the grid's cells): a max all-reduce,
    then one all-reduce of the ``K + 1`` lanes (none without ``names``).

    >>> float(reproducible_psum(jnp.asarray([0.5, 0.25]), 2, ()))
    0.75
    """
    # the max only places the folds: a sum's derivative is the plain sum's (pmax has none)
    amax = jax.lax.stop_gradient(reprosum.local_max(block, jnp))
    if names:
        amax = jax.lax.pmax(amax, names)
    summed = reprosum.lanes(block, amax, size, jnp)
    if names:
        summed = jax.lax.psum(summed, names)
    return reprosum.combine(summed, amax, size, jnp)


def reproducible_kind(dtype, reproducible: bool, op: str = "sum") -> bool:
    """Whether a reduction ``op`` of ``dtype`` takes the reproducible sum; refuses
    ``reproducible=True`` on a min or max (exact in any order already).

    >>> reproducible_kind(np.float32, True), reproducible_kind(np.int32, True)
    (True, False)
    """
    if reproducible not in (True, False):
        raise PgasError(f"reproducible = {reproducible!r}: give True or False")
    if reproducible and op != "sum":
        raise PgasError(
            f"reproducible=True with {op!r}: a {op} is exact, the same bits in any order; "
            f"drop reproducible=True (it applies to sums)"
        )
    return bool(reproducible) and np.issubdtype(np.dtype(dtype), np.floating)


@functools.lru_cache(maxsize=256)
def _reducer(layout, kind: str, fill) -> Callable:
    """The compiled reduction of one layout (cached: an eager call compiles once, not per call)."""
    local, collective = _KINDS[kind]
    names = tuple(s for s in layout.spec if s is not None)

    def per_device(block):
        if not layout.even:
            numbers = [jnp.zeros((), jnp.int32) if s is None else jax.lax.axis_index(s)
                       for s in layout.spec]  # fmt: skip
            mask = None
            for axis in range(layout.ndim):
                v = layout.valid(axis, numbers[axis])
                if v is not None:
                    mask = v if mask is None else mask & v
            mask = mask.reshape(mask.shape[1::2])
            block = jnp.where(mask, block, jnp.asarray(fill, block.dtype))
        if kind == "reproducible":
            return reproducible_psum(block, math.prod(layout.shape), names)
        value = local(block)
        if collective is None:  # a max or min: NaN-aware
            return extreme(value, kind, names)
        return collective(value, names) if names else value

    return jax.jit(shard_map(per_device, mesh=layout.mesh, in_specs=PartitionSpec(*layout.spec),
                             out_specs=PartitionSpec()))  # fmt: skip


def _reduce(array: GlobalArray | View, kind: str, fill) -> jax.Array:
    """Reduce each device's real cells, then one collective over the array's mesh axes."""
    _Count.value += 1
    if isinstance(array, View):
        array = _evaluated(array, fill)
    if not isinstance(array, GlobalArray):
        raise LayoutError(
            f"expected a pgas.GlobalArray or an expression of its views (u * u, u[1:-1] - "
            f"v[1:-1]), got {type(array).__name__}"
        )
    if array.batch_ndim:
        raise LayoutError(
            f"this array holds {array.data.shape[0]} stacked snapshots; reduce a single field"
        )
    out = _reducer(array.layout, kind, fill)(physical_of(array))
    if _Seen.stack:
        _Seen.stack[-1].append(out)
    return out


def _evaluated(view: View, fill) -> GlobalArray:
    """``view`` written into an array of ``fill`` of its first array's grid, at its window.

    The target array's faces are periodic: a ``Keep`` face of the arrays read
    keeps cells of an assignment's target, not of an expression being reduced.
    """
    first = view.leaves()[0]
    base, w = first.array, first.window
    lay = base.layout
    start = tuple(builtins.max(0, builtins.min(s, n - e))
                  for s, n, e in zip(w.start, lay.shape, w.extent))  # fmt: skip
    target_layout = dataclasses.replace(
        lay, boundary=tuple((Periodic(), Periodic()) for _ in lay.shape),
        halo=(None,) * lay.ndim)  # fmt: skip
    data = jnp.full(lay.physical_shape, fill, view.dtype)
    if lay.mesh.size > 1:
        data = jax.lax.with_sharding_constraint(data, lay.sharding)
    target = GlobalArray(data, target_layout)
    out, _ = assign(target, Window(start, w.extent, w.kept), view)
    return GlobalArray(out, target_layout)


def sum(array: GlobalArray | View, reproducible: bool = False) -> jax.Array:  # noqa: A001
    """Sum of all cells of an array or an expression (integers accumulate in at least 32 bits).

    A plain float sum's bits depend on the block split (its order). With
    ``reproducible=True`` a float sum is pre-rounded
    (:mod:`pgas.globalview.reprosum`): the same bits on every mesh, device count
    and backend (``pgas.explicit``'s and ``pgas.mpi``'s ``reduce(...,
    reproducible=True)`` give them too), for two all-reduces of a few scalars
    instead of one; integer sums are exact already (the flag changes nothing).

    >>> import numpy as np, pgas
    >>> int(pgas.sum(pgas.from_numpy(np.ones(5, np.uint8), pgas.make_mesh(devices=1))))
    5
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> float(pgas.sum(u * u)), float(pgas.sum(u[1:] - u[:-1]))
    (14.0, 3.0)
    >>> float(pgas.sum(u * 0.1, reproducible=True))
    0.6000000000000001
    """
    kind = "reproducible" if reproducible_kind(array.dtype, reproducible) else "sum"
    return _reduce(array, kind, 0)


def min(array: GlobalArray | View, reproducible: bool = False) -> jax.Array:  # noqa: A001
    """Smallest cell value (exact in any order: ``reproducible=True`` is refused); a NaN
    anywhere gives NaN, as ``np.min``.

    >>> import numpy as np, pgas
    >>> float(pgas.min(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    0.0
    """
    reproducible_kind(array.dtype, reproducible, "min")
    dt = np.dtype(array.dtype)
    top = np.inf if dt.kind == "f" else (True if dt.kind == "b" else np.iinfo(dt).max)
    return _reduce(array, "min", top)


def max(array: GlobalArray | View, reproducible: bool = False) -> jax.Array:  # noqa: A001
    """Largest cell value (exact in any order: ``reproducible=True`` is refused); a NaN
    anywhere gives NaN, as ``np.max``, on every mesh.

    >>> import numpy as np, pgas
    >>> float(pgas.max(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    2.0
    >>> u = pgas.from_numpy(np.array([0.0, 3.0, 1.0]), pgas.make_mesh(devices=1))
    >>> float(pgas.max(abs(u[1:] - u[:-1])))
    3.0
    """
    reproducible_kind(array.dtype, reproducible, "max")
    dt = np.dtype(array.dtype)
    bottom = -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)
    return _reduce(array, "max", bottom)


def mean(array: GlobalArray | View, reproducible: bool = False) -> jax.Array:
    """Mean over all cells (float); ``reproducible`` as :func:`sum`.

    >>> import numpy as np, pgas
    >>> float(pgas.mean(pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))))
    1.5
    """
    total = sum(array, reproducible)
    if not jnp.issubdtype(total.dtype, jnp.floating):
        total = total.astype(jnp.float32)
    return total / math.prod(array.shape)


def _flags(x) -> GlobalArray | View:
    """A boolean array or expression as a uint8 array (0/1) to reduce."""
    from pgas.globalview.view import Operators

    if not isinstance(x, Operators):
        raise LayoutError(
            f"expected a pgas array or expression (e.g. u > 5), got {type(x).__name__}"
        )
    return x.astype("uint8") if x.dtype != np.uint8 else x  # reductions take expressions


def any(x) -> jax.Array:  # noqa: A001
    """Whether any cell of a boolean array or expression is true: one all-reduce.

    What ``if``/``while`` on a comparison means: ``bool(u > 5)`` raises instead.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> bool(pgas.any(u > 2)), bool(pgas.any(u > 5))
    (True, False)
    """
    return max(_flags(x)) > 0


def all(x) -> jax.Array:  # noqa: A001
    """Whether every cell of a boolean array or expression is true: one all-reduce.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> bool(pgas.all(u >= 0)), bool(pgas.all(u > 0))
    (True, False)
    """
    return min(_flags(x)) > 0
