"""Params on the MPI path: scalars and read-only fields for ``run`` and ``run_until``.

``params`` is a scalar or NumPy array (passed to the kernel as it is), a
read-only field given by its init function (a callable of the global indices,
as ``init``), or a dict, tuple or list of them. A field becomes a block of the
rank's cells with the state's deep rim (``k`` times the halo the kernel reads,
per side), its ghosts filled by one exchange before the loop and never again;
the field has the state's boundary conditions. Every kernel call receives each
field's cells around its extended block ``e``: the same halo as ``e`` on every
side, whatever the group's size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pgas.errors import PgasError
from pgas.references.mpi.exchange import MessageCounter, exchange
from pgas.references.mpi.grid import CartGrid, fill_local

__all__ = ["bind", "fitted_params"]


def fitted_params(params: Any, grid: CartGrid, halo: tuple[tuple[int, int], ...], k: int,
                  faces, dtype, caller: str) -> Callable | None:  # fmt: skip
    """``fitted(shape)``: ``params`` for an extended block of ``shape``; ``None`` without
    params. Every init (a callable) is made a block with the deep rim and exchanged once.

    Args:
        params: see the module docstring.
        grid: the state's layout.
        halo: the cells the kernel reads, ``(below, above)`` per axis.
        k: steps per exchange: the rim is ``k`` times ``halo``.
        faces: the state's boundary conditions, per axis and side.
        dtype: the fields' dtype (the state's).
        caller: the function named in the error for a leaf of another type.

    >>> from pgas.grid.boundary import Keep, normalize_boundary
    >>> from pgas.references.mpi.grid import cart_grid
    >>> fitted = fitted_params({"c": 0.5, "w": lambda i: 1.0 * i}, cart_grid((5,), (1,)),
    ...                        ((1, 1),), 2, normalize_boundary(Keep(), 1), "float64", "run")
    >>> fitted((7,))  # 5 cells and a halo of 1: Keep repeats the edge value
    {'c': 0.5, 'w': array([0., 0., 1., 2., 3., 4., 4.])}
    """
    if params is None:
        return None
    if isinstance(params, dict):
        keys, leaves = list(params), list(params.values())
    elif isinstance(params, (tuple, list)):
        keys, leaves = None, list(params)
    else:
        keys, leaves = (), [params]
    rim = tuple((k * lo, k * hi) for lo, hi in halo)
    built, fields = [], set()
    for i, leaf in enumerate(leaves):
        if callable(leaf):
            built.append(_field(leaf, grid, rim, faces, dtype))
            fields.add(i)
        elif isinstance(leaf, (int, float, np.ndarray, np.generic)):
            built.append(leaf)  # passed as it is
        else:
            raise PgasError(
                f"params[{i if keys is None or keys == () else repr(keys[i])}] is a "
                f"{type(leaf).__name__}; params of {caller} hold scalars and fields "
                f"given by their init (a function of the global indices, as init)"
            )  # fmt: skip
    local = grid.local_shape

    def fitted(shape):
        out = []
        for i, x in enumerate(built):
            if i in fields:  # ``below`` / ``above`` times the group's steps around the cells
                cut = []
                for s, n, (lo, hi), (r, _) in zip(shape, local, halo, rim):
                    start = r - (s - n) // (lo + hi) * lo if lo + hi else r
                    cut.append(slice(start, start + s))
                x = x[tuple(cut)]
            out.append(x)
        if keys == ():
            return out[0]
        return dict(zip(keys, out)) if keys is not None else type(params)(out)

    return fitted


def bind(fn: Callable, fitted: Callable | None) -> Callable:
    """``fn(e, *more)`` as ``fn(e, params, *more)`` with ``params`` fitted to ``e``; ``fn``
    itself without params.

    >>> import numpy as np
    >>> bind(lambda e, c: c * e[1:-1], lambda shape: 0.5)(np.ones(4))
    array([0.5, 0.5])
    """
    if fitted is None:
        return fn
    return lambda e, *more: fn(e, fitted(e.shape), *more)


def _field(init: Callable, grid: CartGrid, rim, faces, dtype) -> np.ndarray:
    """The rank's cells of ``init`` with a rim ``rim`` wide, filled by one exchange."""
    local = grid.local_shape
    ext = np.zeros([n + lo + hi for n, (lo, hi) in zip(local, rim)], np.dtype(dtype))
    fill_local(ext[tuple(slice(lo, lo + n) for n, (lo, _) in zip(local, rim))], init, grid)
    exchange(ext, grid, rim, faces, MessageCounter())  # once: read-only
    return ext
