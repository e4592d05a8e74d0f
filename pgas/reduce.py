"""Global reductions over the real cells of a global array.

``sum``, ``min``, ``max`` and ``mean`` ignore the padding cells of uneven
layouts and compile to one all-reduce of a scalar per call (the local
reduction runs on each device first). Use them inside a step or a snapshot
observer for diagnostics such as total heat or population.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from pgas.array import GlobalArray
from pgas.errors import LayoutError

__all__ = ["sum", "min", "max", "mean"]


def _masked(array: GlobalArray, fill) -> jax.Array:
    if not isinstance(array, GlobalArray):
        raise LayoutError(f"expected a pgas.GlobalArray, got {type(array).__name__}")
    lay = array.layout
    if lay.even:
        return array.data
    blocks = lay.to_blocks(array.data)
    mask = None
    for axis in range(lay.ndim):
        v = lay.valid(axis)
        if v is not None:
            mask = v if mask is None else mask & v
    return jnp.where(mask, blocks, jnp.asarray(fill, array.dtype))


def sum(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Sum of all cells (integers accumulate in at least 32 bits).

    >>> import numpy as np, pgas
    >>> pgas.sum(pgas.from_numpy(np.ones(5, np.uint8), pgas.make_mesh(devices=1)))
    Array(5, dtype=uint32)
    """
    return jnp.sum(_masked(array, 0))


def min(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Smallest cell value.

    >>> import numpy as np, pgas
    >>> float(pgas.min(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    0.0
    """
    dt = np.dtype(array.dtype)
    top = np.inf if dt.kind == "f" else (True if dt.kind == "b" else np.iinfo(dt).max)
    return jnp.min(_masked(array, top))


def max(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Largest cell value.

    >>> import numpy as np, pgas
    >>> float(pgas.max(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    2.0
    """
    dt = np.dtype(array.dtype)
    bottom = -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)
    return jnp.max(_masked(array, bottom))


def mean(array: GlobalArray) -> jax.Array:
    """Mean over all cells (float).

    >>> import numpy as np, pgas
    >>> float(pgas.mean(pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))))
    1.5
    """
    total = sum(array)
    if not jnp.issubdtype(total.dtype, jnp.floating):
        total = total.astype(jnp.float32)
    return total / math.prod(array.layout.shape)
