"""The explicit path's checks: ``reduce`` over the cells a kernel writes, and the check loop.

Contract: :func:`reducer` gives the ``reduce(values, op="sum",
reproducible=False)`` that ``converged`` (and a state dict's kernel) calls inside
``shard_map``: one all-reduce per call (two for a reproducible float sum, the
same bits as :func:`pgas.sum` and the MPI path), over the cells the kernel
writes (``region`` minus ``Keep`` cells, no padding), NaN as NumPy gives it.
:func:`while_checks` is the ``while_loop`` of :func:`pgas.references.explicit.until.run_until`
and the state programs: ``every`` steps, then a check, until one holds or is not
finite (:func:`pgas.loop.decision.all_finite`), or ``max_steps`` would be passed.
:func:`converged_of` calls ``converged`` so that a Python ``if`` on a reduction
raises a :class:`~pgas.errors.PgasError` saying how to write it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.reduce import extreme, reproducible_kind, reproducible_psum
from pgas.grid.layout import Layout
from pgas.loop import counts
from pgas.loop.decision import call_converged

__all__ = ["reducer", "converged_of", "while_checks"]

_IDENTITY = {"sum": 0, "max": -np.inf, "min": np.inf}


def reducer(layout: Layout, window, widths, numbers) -> Callable:
    """``reduce(values, op, reproducible=False)``: ``values`` of the block's cells reduced over
    the cells the kernel writes (region minus ``Keep`` cells, no padding) on every device: one
    all-reduce; a float sum with ``reproducible=True`` is :func:`pgas.sum`'s reproducible sum
    (the same bits as on the automatic and MPI paths), two all-reduces. A NaN gives NaN, as
    in NumPy (:func:`pgas.globalview.reduce.extreme`). ``reduce.seen`` keeps every value
    it returned (a check reads them: :func:`pgas.loop.decision.all_finite`), ``reduce.calls``
    counts its all-reduce calls (one per call).

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> from jax.sharding import PartitionSpec
    >>> from pgas.globalview.view import normalize_index
    >>> from pgas.references.explicit.exchange import block_numbers
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1), boundary=pgas.Keep())
    >>> def total(b):
    ...     reduce = reducer(u.layout, normalize_index((), u.shape), (1,), block_numbers(u.layout))
    ...     return reduce(b), reduce(b, "max")
    >>> f = shard_map(total, mesh=u.mesh, in_specs=u.layout.sharding.spec,
    ...               out_specs=PartitionSpec())
    >>> [float(x) for x in f(u.data)]  # the Keep cells 0 and 3 left out
    [3.0, 2.0]
    """
    axes = tuple(name for name in layout.spec if name is not None)
    numbers = [b.reshape(()) for b in numbers]
    mask = layout.window_mask(window.start, window.extent, widths, block=numbers)

    def reduce(values, op: str = "sum", reproducible: bool = False):
        out = reduced(values, op, reproducible)
        reduce.seen.append(out)
        return out

    def reduced(values, op: str, reproducible: bool):
        reduce.calls += 1
        if op not in _IDENTITY:
            raise PgasError(f"op = {op!r} is not a reduction; use one of {tuple(_IDENTITY)}")
        values = jnp.asarray(values)
        blocks = values.reshape(tuple(x for n in values.shape for x in (1, n)))
        if reproducible_kind(values.dtype, reproducible, op):
            if mask is not None:
                blocks = jnp.where(mask, blocks, jnp.zeros((), values.dtype))
            return reproducible_psum(blocks, math.prod(layout.shape), axes)
        if mask is not None:
            fill = _IDENTITY[op]
            if not jnp.issubdtype(values.dtype, jnp.floating) and op != "sum":
                info = jnp.iinfo(values.dtype)
                fill = info.min if op == "max" else info.max
            blocks = jnp.where(mask, blocks, jnp.asarray(fill, values.dtype))
        local = getattr(jnp, op)(blocks)
        if op != "sum":
            return extreme(local, op, axes)
        return jax.lax.psum(local, axes) if axes else local

    reduce.calls, reduce.seen = 0, []
    return reduce


def converged_of(converged: Callable) -> Callable:
    """``converged`` called through :func:`pgas.loop.decision.call_converged` (Python ``if`` on
    a reduction: a PgasError saying how to write it).

    >>> bool(converged_of(lambda e, reduce: e < 1.0)(0.5, None))
    True
    """
    return lambda *args: call_converged(converged, *args)


def while_checks(advance: Callable, check: Callable, start, every: int, max_steps: int) -> tuple:
    """``(values, steps, done, finite)``: ``advance(values, every)`` then ``check(values) ->
    (done, finite)`` until a check holds or is not finite, or ``max_steps`` would be passed;
    the ``max_steps % every`` steps left then run, with a last check, unless it stopped.

    >>> import jax.numpy as jnp
    >>> out = while_checks(lambda x, n: x + n, lambda x: (x >= 5, jnp.bool_(True)),
    ...                    jnp.int32(0), 2, 9)
    >>> int(out[0]), int(out[1]), bool(out[2]), bool(out[3])
    (6, 6, True, True)
    """
    count = counts.counter_dtype(max_steps, every)

    def cond(c):
        return ~c[2] & c[3] & (c[1] <= max_steps - every)

    def body(c):
        values = advance(c[0], every)
        return values, c[1] + every, *check(values)

    begin = (start, jnp.zeros((), count), jnp.zeros((), jnp.bool_), jnp.ones((), jnp.bool_))
    out = jax.lax.while_loop(cond, body, begin)
    rest = max_steps % every
    if rest:

        def tail(c):
            values = advance(c[0], rest)
            return values, c[1] + rest, *check(values)

        out = jax.lax.cond(out[2] | ~out[3], lambda c: c, tail, out)
    return out
