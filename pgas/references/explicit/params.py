"""The explicit path's ``params``: scalars, JAX arrays and read-only fields, for every program.

Contract: ``params`` is a pytree of scalars and JAX arrays (replicated on every
device) and read-only :class:`pgas.GlobalArray` fields split like the state
(:func:`split_params` checks it and splits it into the compiled program's
arguments: a new value never compiles, a new structure does). Inside
``shard_map``, :func:`given` extends each field once per run by the deep halo
(one exchange, before the loop) and hands the kernel, at every call, the part of
it aligned with the block it reads: the same halo as ``e``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.grid.layout import Layout
from pgas.references.explicit.exchange import Sides, block_numbers, extended

__all__ = ["split_params", "param_specs", "given"]


def split_params(params, layout: Layout):
    """``params`` as (structure, leaves, layout of each field leaf or ``None``), checked: a
    field must be split like ``layout``.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> tree, leaves, fields = split_params({"c": 0.5, "k": u}, u.layout)
    >>> tree.num_leaves, [f is None for f in fields]
    (2, [True, False])
    >>> split_params(None, u.layout)
    (None, [], ())
    """
    if params is None:
        return None, [], ()
    found, tree = jax.tree_util.tree_flatten_with_path(
        params, is_leaf=lambda x: isinstance(x, GlobalArray)
    )
    leaves, fields = [], []
    for path, leaf in found:
        where = f"params{jax.tree_util.keystr(path)}"
        if isinstance(leaf, GlobalArray):
            if not leaf.layout.same_grid(layout):
                raise PgasError(
                    f"{where} has shape {leaf.shape} split {leaf.layout.spec} over "
                    f"{dict(leaf.layout.mesh.shape)}; a field in params must be split like the "
                    f"state ({layout.shape} split {layout.spec}): build it on the same mesh"
                )  # fmt: skip
            leaves.append(leaf.data)
            fields.append(leaf.layout)
        elif isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float)):
            leaves.append(jnp.asarray(leaf))
            fields.append(None)
        else:
            raise PgasError(
                f"{where} is a {type(leaf).__name__}; params hold scalars, JAX arrays and "
                f"pgas.GlobalArrays (read-only fields): pass other settings by closure"
            )  # fmt: skip
    return jax.tree.structure(jax.tree.unflatten(tree, [0] * len(leaves))), leaves, tuple(fields)


def param_specs(fields: tuple) -> tuple[PartitionSpec, ...]:
    """The ``shard_map`` spec of each params leaf: a field's split, else replicated.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(("x",), devices=1))
    >>> param_specs((None, u.layout))
    (P(), P('x',))
    """
    return tuple(PartitionSpec() if lay is None else PartitionSpec(*lay.spec) for lay in fields)


def given(leaves, tree, fields: tuple, layout: Layout, sides: Sides, k: int) -> Callable:
    """``call(fn, e, *more)``: ``fn(e, params, *more)`` (``fn(e, *more)`` without params).

    Shared by :func:`pgas.references.explicit.loop.program`,
    :func:`pgas.references.explicit.until.until_program` and the state programs
    (:mod:`pgas.references.explicit.state`: ``e`` a state dict, the shape of its fields'
    blocks). Inside ``shard_map``, once per
    run: each field leaf is extended by the deep halo, ``k`` times ``sides`` (the sides the
    kernel reads, as the state's frame), one exchange; every call hands the kernel the part
    of it around ``e``: ``below`` cells before the block's cells and ``above`` after them,
    whatever the sub-step.

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> tree, leaves, fields = split_params(2.0, u.layout)
    >>> def double(b, c):
    ...     call = given((c,), tree, fields, u.layout, ((1, 1),), 1)
    ...     return call(lambda e, p: p * e, b)
    >>> f = shard_map(double, mesh=u.mesh, in_specs=(u.layout.sharding.spec, *param_specs(fields)),
    ...               out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data, *leaves)).tolist()
    [0.0, 2.0, 4.0, 6.0]
    """
    if tree is None:
        return lambda fn, e, *more: fn(e, *more)
    deep = tuple((k * lo, k * hi) for lo, hi in sides)
    numbers = block_numbers(layout)
    ext = []
    for x, lay in zip(leaves, fields):
        if lay is not None:
            x = extended(x, lay, deep, numbers)
            x = x.reshape(x.shape[1::2])
        ext.append(x)

    def call(fn, e, *more):
        shape = next(v.shape for v in e.values() if v.ndim) if isinstance(e, dict) else e.shape
        fitted = [x if lay is None else _fit(x, shape, sides, deep)
                  for x, lay in zip(ext, fields)]  # fmt: skip
        return fn(e, jax.tree.unflatten(tree, fitted), *more)

    return call


def _fit(ext: jax.Array, shape: tuple[int, ...], sides: Sides, deep: Sides):
    """Of a field's block extended by ``deep`` cells ``(below, above)``, the part aligned with
    a state block of ``shape``: the block with ``m`` times ``sides`` around it (a state's
    frame keeps a whole number of reaches per side)."""
    cut = []
    for n, s, (lo, hi), (d, e) in zip(ext.shape, shape, sides, deep):
        m = (s - (n - d - e)) // (lo + hi) if lo + hi else 0
        cut.append(slice(d - m * lo, d - m * lo + s))
    return ext[tuple(cut)]
