"""The explicit path's ``run``: a fixed number of steps as one ``shard_map`` + ``fori_loop``.

Contract: :func:`run` runs ``steps`` explicit steps of a local kernel (the
contract of :mod:`pgas.references.explicit`) on a field, in groups of ``k``
steps per exchange (:func:`pgas.references.explicit.update.local_update`; every
``k`` the same bits), or on a state dict of fields and scalars (one step per
exchange, :mod:`pgas.references.explicit.state`), bitwise equal to the
automatic path. :func:`program` is the compiled program, cached per kernel,
layout, halo, region (:func:`region_key`), ``k``, the params' structure and the
numbers the kernel reads from module globals and closures
(:func:`pgas.loop.outside.numbers_read`): a new value of the params runs without
compiling, a changed global compiles anew. The state's buffers are donated, each
once (:func:`pgas.loop.kept.distinct` copies a repeat).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.globalview.array import GlobalArray
from pgas.grid.decomposition import halo_sides
from pgas.grid.layout import Layout
from pgas.grid.schedule import check_steps
from pgas.loop import counts
from pgas.loop.kept import distinct
from pgas.loop.outside import numbers_read
from pgas.loop.until import check_state_steps
from pgas.references.explicit.exchange import Halo, Kernel, halo_key
from pgas.references.explicit.params import given, param_specs, split_params
from pgas.references.explicit.state import split_state, state_of, state_program
from pgas.references.explicit.update import choose, local_update

__all__ = ["run", "program", "region_key"]


@functools.lru_cache(maxsize=32)
def program(kernel: Kernel, layout: Layout, widths: tuple, region_key, k: int, tree=None,
            fields: tuple = (), reads: tuple = ()) -> Callable:  # fmt: skip
    """The compiled program of :func:`run`: ``(block, steps, *params) -> block`` (cached per
    kernel, layout, halo, region, ``k`` and the params' structure and fields, see
    :func:`pgas.references.explicit.params.split_params`; a new value of the params does not
    compile). ``widths``: the halo per axis, or per side (``(below, above)`` pairs).
    ``reads``: the numbers the kernel (and ``converged``) read from module globals and
    closures (:func:`pgas.loop.outside.numbers_read`), a part of the key only: a changed one
    compiles anew, never a stale program."""
    region = None if region_key is None else tuple(slice(*r) for r in region_key)
    sides = halo_sides(widths, layout.ndim)

    def loop(block, n, *leaves):  # one buffer: each group reads its own extended copy
        call = given(leaves, tree, fields, layout, sides, k)
        group = local_update(lambda e: call(kernel, e), layout, sides, region, k)
        single = local_update(lambda e: call(kernel, e), layout, sides, region, 1)
        block = jax.lax.fori_loop(0, n // k, lambda i, b: group(b, i), block)
        return jax.lax.fori_loop(0, n % k, lambda i, b: single(b, i), block)

    spec = PartitionSpec(*layout.spec)
    sharded = shard_map(loop, mesh=layout.mesh, in_specs=(spec, PartitionSpec(),
                        *param_specs(fields)), out_specs=spec)  # fmt: skip
    return jax.jit(sharded, donate_argnums=0)


def region_key(region) -> tuple | None:
    """A hashable form of a region of slices (the cache key of :func:`program`).

    >>> region_key((slice(1, -1),))
    ((1, -1, None),)
    """
    if region is None:
        return None
    return tuple((s.start, s.stop, s.step) for s in (region if isinstance(region, tuple)
                                                      else (region,)))  # fmt: skip


def run(
    kernel: Kernel,
    u: GlobalArray | dict,
    steps: int,
    halo: Halo = 1,
    region=None,
    steps_per_exchange: int | str = "auto",
    params=None,
) -> GlobalArray | dict:
    """Run ``steps`` explicit steps as one compiled ``shard_map`` + ``fori_loop`` program.

    A state dict (conjugate gradients for a fixed number of iterations): ``u``
    may be a dict of :class:`pgas.GlobalArray` fields split alike and 0-d
    scalars, with the kernel of :func:`~pgas.references.explicit.until.run_until`'s state dicts,
    ``kernel(e, reduce)`` (``kernel(e, p, reduce)`` with ``params``) returning
    a dict of the same keys; one step per exchange (``k = 1``). The new state
    dict is bitwise equal to the state of :func:`~pgas.references.explicit.until.run_until`
    with the same
    kernel after the same number of steps (one step program serves both).

    Args:
        kernel: local kernel (see :mod:`pgas.references.explicit`); ``kernel(e, reduce)``
            for a state dict (:func:`~pgas.references.explicit.until.run_until`).
        u: the field (its buffer is donated; use the result), or a state dict (its
            buffers donated too; one buffer held twice is copied first).
        steps: number of steps (>= 0).
        halo: halo width per axis (an int for all), or per side: a ``(below, above)``
            pair per axis (``((1, 0),)`` for an upwind kernel ``e[1:] - c * (e[1:] -
            e[:-1])``); only the sides read are exchanged.
        region: window the kernel writes (NumPy slices in global coordinates);
            default the whole array.
        steps_per_exchange: ``k``: one exchange of a halo ``k * halo`` wide, then
            ``k`` kernel steps on the extended block; ``"auto"`` chooses
            (:func:`~pgas.references.explicit.update.choose`). Every ``k`` gives the same
            bits.
        params: as :func:`pgas.run`'s: the kernel is called ``kernel(e, params)``.
            A pytree of scalars and JAX arrays (replicated on every device) and
            read-only :class:`pgas.GlobalArray` fields split like ``u``: a field
            is extended once per run by ``k * halo`` (one exchange, before the
            loop) and reaches the kernel as its block with the same halo as
            ``e``. All are arguments of the compiled program: a new value does
            not compile. A number the kernel reads from a module global or a
            closure is baked into the program instead: a changed one compiles
            anew (:func:`pgas.loop.outside.numbers_read`).

    Returns:
        The new field, or the new state dict (its fields ``GlobalArray``, its scalars 0-d
        arrays).

    Raises:
        PgasError: a bad ``steps`` or ``params``; for a state dict, a bad leaf, a kernel
            that returns other keys or shapes, or ``steps_per_exchange`` other than 1.

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> run(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u, 2).to_numpy()
    array([0., 1., 0.])
    >>> def halve(e, reduce):                 # a field and a reduced scalar
    ...     u = 0.5 * e["u"][1:-1]
    ...     return {"u": u, "total": reduce(u, reproducible=True)}
    >>> out = run(halve, {"u": pgas.from_numpy(np.full(4, 8.0), mesh), "total": 32.0}, 3)
    >>> out["u"].to_numpy(), float(out["total"])
    (array([1., 1., 1., 1.]), 4.0)
    """
    if not isinstance(steps, jax.core.Tracer):  # a traced count (inside jax.jit) runs as given
        steps = check_steps(steps)
    if isinstance(u, dict):
        return _run_state(kernel, u, steps, halo, region, steps_per_exchange, params)
    tree, leaves, fields = split_params(params, u.layout)
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    compiled = program(kernel, u.layout, halo_key(u.layout, halo), region_key(region), k, tree,
                       fields, reads=numbers_read(kernel))  # fmt: skip
    data = distinct(u.data, leaves)  # donated: never a buffer the call also reads
    return GlobalArray(_counted(compiled, data, steps, *leaves), u.layout)


def _counted(compiled: Callable, data, steps, *leaves):
    """``compiled(data, steps, *leaves)`` with an int32 trip count: a Python int ``steps`` past
    ``2**31 - 1`` runs in pieces (:func:`pgas.loop.counts.pieces`, the same bits); a traced
    one as it is."""
    if isinstance(steps, jax.core.Tracer):
        return compiled(data, steps, *leaves)
    for piece in counts.pieces(steps):
        data = compiled(data, jnp.int32(piece), *leaves)
    return data


def _run_state(kernel, state: dict, steps, halo, region, steps_per_exchange, params) -> dict:
    """:func:`run` on a state dict of fields and scalars (one step per exchange)."""
    check_state_steps(steps_per_exchange)
    keys, layouts, values, first = split_state(state)
    tree, leaves, fields = split_params(params, first)
    compiled = state_program(kernel, keys, layouts, halo_key(first, halo), region_key(region), tree,
                             fields, reads=numbers_read(kernel))  # fmt: skip
    values = distinct(tuple(values), leaves)  # donated: each buffer once
    return state_of(keys, layouts, _counted(compiled, values, steps, *leaves))
