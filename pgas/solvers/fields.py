"""The cells a solve works on: unknowns, zero fields and inner products over them.

A solver's fields keep the right-hand side's layout. On an axis whose faces are
``Keep`` the edge cells hold boundary values (Dirichlet data), not unknowns:
the iterates keep them, corrections and residuals are zero there, and inner
products leave them out. Every other cell is an unknown.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.reduce import sum as global_sum
from pgas.globalview.view import View
from pgas.grid.boundary import Keep, Neumann, Periodic
from pgas.grid.layout import Layout

__all__ = ["grid_kinds", "unknowns", "zeros", "as_array", "dot", "masked", "updated",
           "replicated", "gathered", "scattered"]  # fmt: skip


def unknowns(layout: Layout) -> tuple[slice, ...]:
    """The index of the unknowns: ``1:-1`` on axes with ``Keep`` faces, all cells elsewhere.

    >>> import pgas
    >>> lay = pgas.zeros((5, 4), pgas.make_mesh(devices=1), boundary=(pgas.Keep(),
    ...                  pgas.Periodic())).layout
    >>> unknowns(lay)
    (slice(1, -1, None), slice(None, None, None))
    """
    out = []
    for axis, (lo, hi) in enumerate(layout.boundary):
        keeps = isinstance(lo, Keep), isinstance(hi, Keep)
        if any(keeps) and layout.halo[axis] not in (None, 1):
            raise PgasError(
                f"axis {axis} keeps {layout.halo[axis]} edge cells (halo = "
                f"{layout.halo[axis]}): a solve takes one boundary cell per Keep face; make "
                f"the array with halo=None or 1"
            )
        out.append(slice(1 if keeps[0] else None, -1 if keeps[1] else None))
    return tuple(out)


def zeros(layout: Layout, dtype) -> GlobalArray:
    """A zero field of ``layout`` (traceable: no callback, no transfer)."""
    data = jnp.zeros(layout.physical_shape, dtype)
    if layout.mesh.size > 1:
        data = jax.lax.with_sharding_constraint(data, layout.sharding)
    return GlobalArray(data, layout)


def as_array(value, like: GlobalArray) -> GlobalArray:
    """An operator's result as a GlobalArray of ``like``'s layout (a View is materialised)."""
    if isinstance(value, View):
        value = value.to_array()
    if not isinstance(value, GlobalArray) or value.layout.shape != like.layout.shape:
        shape = getattr(value, "shape", None)
        raise PgasError(
            f"the operator returned {type(value).__name__} of shape {shape} for a field of "
            f"shape {like.shape}: an operator maps a pgas.GlobalArray to a GlobalArray (or a "
            f"View) of the same shape"
        )
    return value


def masked(value, like: GlobalArray) -> GlobalArray:
    """``value`` on the unknowns, zero on the boundary cells of ``Keep`` faces."""
    value = as_array(value, like)
    idx = unknowns(like.layout)
    out = zeros(like.layout, like.dtype)
    out[idx] = value[idx]
    return out


def updated(x: GlobalArray, scale, d: GlobalArray) -> GlobalArray:
    """``x + scale * d`` on the unknowns, ``x`` on the boundary cells (a new array)."""
    idx = unknowns(x.layout)
    out = x.copy()
    out[idx] = x[idx] + scale * d[idx]
    return out


def dot(a: GlobalArray, b: GlobalArray, reproducible: bool = False) -> jax.Array:
    """The inner product over the unknowns: one scalar all-reduce (two if reproducible)."""
    idx = unknowns(a.layout)
    return global_sum(a[idx] * b[idx], reproducible=reproducible)


def grid_kinds(layout: Layout) -> tuple[str, ...]:
    """Each axis's grid: ``"keep"``, ``"periodic"`` or ``"neumann"`` (table above).

    Raises:
        PgasError: faces of another condition, or two faces of different kinds.

    >>> import pgas
    >>> grid_kinds(pgas.zeros((5, 4), pgas.make_mesh(devices=1),
    ...                       boundary=(pgas.Keep(), pgas.Periodic())).layout)
    ('keep', 'periodic')
    """
    kinds = []
    for axis, (lo, hi) in enumerate(layout.boundary):
        for kind, cls in (("keep", Keep), ("periodic", Periodic), ("neumann", Neumann)):
            if isinstance(lo, cls) and isinstance(hi, cls):
                kinds.append(kind)
                break
        else:
            raise PgasError(
                f"axis {axis} has faces {lo!r} and {hi!r}: pgas.solvers takes, per axis, two "
                f"Keep faces (Dirichlet values held in the edge cells), Periodic, or two "
                f"Neumann faces; for a Dirichlet value, make the array with pgas.Keep() and "
                f"write the value into its edge cells"
            )
    return tuple(kinds)


# ---- coarse levels on every device -------------------------------------------------------
def replicated(layout: Layout) -> Layout:
    """``layout`` with no axis split: every device holds the whole (coarse) field.

    >>> import pgas
    >>> lay = pgas.zeros((5, 5), pgas.make_mesh(("y", "x"), devices=4)).layout
    >>> replicated(lay).spec, replicated(lay).physical_shape
    ((None, None), (5, 5))
    """
    return dataclasses.replace(layout, spec=(None,) * layout.ndim)


def gathered(x: GlobalArray) -> GlobalArray:
    """``x`` on every device (:func:`replicated`): an all-gather of the field, meant for a
    coarse level of a few cells per device."""
    data = x.data
    for axis, ax in enumerate(x.layout.axes):
        if not ax.even:  # the logical cells of a split axis with padded blocks
            data = jnp.take(data, jnp.asarray(ax.physical_index()), axis=axis)
    lay = replicated(x.layout)
    if lay.mesh.size > 1:
        data = jax.lax.with_sharding_constraint(data, NamedSharding(lay.mesh, PartitionSpec()))
    return GlobalArray(data, lay)


def scattered(x: GlobalArray, layout: Layout) -> GlobalArray:
    """A field every device holds (:func:`gathered`) back in ``layout``: each device keeps
    its block, nothing is sent."""
    data = x.data
    for axis, ax in enumerate(layout.axes):
        if not ax.even:
            index, real = ax.global_index(np.arange(ax.padded))
            shape = [1] * data.ndim
            shape[axis] = ax.padded
            data = jnp.where(jnp.asarray(real).reshape(shape),
                             jnp.take(data, jnp.asarray(index), axis=axis), 0)  # fmt: skip
    if layout.mesh.size > 1:
        data = jax.lax.with_sharding_constraint(data, layout.sharding)
    return GlobalArray(data, layout)
