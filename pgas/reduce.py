"""Global reductions over the real cells of a global array.

``sum``, ``min``, ``max`` and ``mean`` ignore the padding cells of uneven
layouts and compile to one all-reduce of a scalar per call: each device reduces
its block, then one ``psum``/``pmin``/``pmax`` over all the array's mesh axes
at once (left to the partitioner, a 2-D mesh would get one all-reduce per
axis). Use them inside a step or a snapshot observer for diagnostics such as
total heat or population.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.array import GlobalArray
from pgas.errors import LayoutError
from pgas.lower import physical_of

__all__ = ["sum", "min", "max", "mean"]


_KINDS = {"sum": (jnp.sum, jax.lax.psum), "min": (jnp.min, jax.lax.pmin),
          "max": (jnp.max, jax.lax.pmax)}  # fmt: skip


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
        value = local(block)
        return collective(value, names) if names else value

    return jax.jit(shard_map(per_device, mesh=layout.mesh, in_specs=PartitionSpec(*layout.spec),
                             out_specs=PartitionSpec()))  # fmt: skip


def _reduce(array: GlobalArray, kind: str, fill) -> jax.Array:
    """Reduce each device's real cells, then one collective over the array's mesh axes."""
    if not isinstance(array, GlobalArray):
        raise LayoutError(f"expected a pgas.GlobalArray, got {type(array).__name__}")
    return _reducer(array.layout, kind, fill)(physical_of(array))


def sum(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Sum of all cells (integers accumulate in at least 32 bits).

    >>> import numpy as np, pgas
    >>> int(pgas.sum(pgas.from_numpy(np.ones(5, np.uint8), pgas.make_mesh(devices=1))))
    5
    """
    return _reduce(array, "sum", 0)


def min(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Smallest cell value.

    >>> import numpy as np, pgas
    >>> float(pgas.min(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    0.0
    """
    dt = np.dtype(array.dtype)
    top = np.inf if dt.kind == "f" else (True if dt.kind == "b" else np.iinfo(dt).max)
    return _reduce(array, "min", top)


def max(array: GlobalArray) -> jax.Array:  # noqa: A001
    """Largest cell value.

    >>> import numpy as np, pgas
    >>> float(pgas.max(pgas.from_numpy(np.arange(3.0), pgas.make_mesh(devices=1))))
    2.0
    """
    dt = np.dtype(array.dtype)
    bottom = -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)
    return _reduce(array, "max", bottom)


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
