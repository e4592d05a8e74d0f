"""The explicit path's halo: ``ppermute`` exchange of a block's halo cells inside ``shard_map``.

Contract: :func:`exchange_halo` (and :func:`extended`, its blocks form) gives
this device's block with its halo, filled axis by axis (corners included) by
one ``lax.ppermute`` per side with the neighbouring devices; ghost cells at
the domain edges follow the array's boundary conditions. The transport is
:func:`pgas.globalview.halo.extend`, the automatic path's code, with
``ppermute`` in place of the global-view shift: both compile to the same
collective-permutes. A halo is an int (every side), one width per axis (both
sides) or a ``(below, above)`` pair per axis; only the sides read are
exchanged. :func:`sides_of`, :func:`widths_of`, :func:`asymmetric` and
:func:`halo_key` say what a halo means for a layout (checked against its
smallest block) and how the compiled programs key it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from pgas.globalview.halo import extend
from pgas.grid.decomposition import Ext, ext_pair, halo_sides
from pgas.grid.layout import Layout

__all__ = [
    "Kernel",
    "Halo",
    "Sides",
    "sides_of",
    "widths_of",
    "asymmetric",
    "halo_key",
    "block_numbers",
    "extended",
    "exchange_halo",
]

Kernel = Callable[[jax.Array], jax.Array]
Halo = int | Sequence[int] | Sequence[tuple[int, int]]
Sides = tuple[tuple[int, int], ...]


def sides_of(layout: Layout, halo: Halo) -> Sides:
    """``halo`` as ``(below, above)`` per axis (:func:`pgas.grid.decomposition.halo_sides`),
    each width checked against ``layout``'s smallest block.

    >>> import numpy as np, pgas
    >>> lay = pgas.from_numpy(np.zeros(8), pgas.make_mesh(devices=1)).layout
    >>> sides_of(lay, 1), sides_of(lay, ((1, 0),))
    (((1, 1),), ((1, 0),))
    """
    sides = halo_sides(halo, layout.ndim)
    for axis, pair in enumerate(sides):
        if max(pair):
            layout.check_halo(axis, max(pair))
    return sides


def widths_of(layout: Layout, halo: Halo) -> tuple[int, ...]:
    """The larger side of ``halo`` per axis (what a ``Keep`` face keeps, the plan's widths).

    >>> import numpy as np, pgas
    >>> widths_of(pgas.from_numpy(np.zeros(8), pgas.make_mesh(devices=1)).layout, ((2, 1),))
    (2,)
    """
    return tuple(max(p) for p in sides_of(layout, halo))


def asymmetric(sides: Sides) -> Sides | None:
    """``sides``, or ``None`` where both sides of every axis are equal (as a plan records it).

    >>> asymmetric(((1, 1),)), asymmetric(((1, 0),))
    (None, ((1, 0),))
    """
    return None if all(lo == hi for lo, hi in sides) else sides


def block_numbers(layout: Layout) -> list[jax.Array]:
    """This device's block number per array axis (inside shard_map).

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.zeros(4), pgas.make_mesh(devices=1))
    >>> f = shard_map(lambda b: b + block_numbers(u.layout)[0], mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [0.0, 0.0, 0.0, 0.0]
    """
    return [
        jnp.zeros((), jnp.int32) if name is None else jax.lax.axis_index(name)
        for name in layout.spec
    ]


def _ppermute(name: str | None, parts: int, periodic: bool):
    def move(slab, direction):
        if name is None or parts == 1:
            return slab
        perm = [(i, (i + direction) % parts) for i in range(parts)
                if periodic or 0 <= i + direction < parts]  # fmt: skip
        return jax.lax.ppermute(slab, name, perm)

    return move


def extended(block: jax.Array, layout: Layout, ext: Ext, numbers) -> jax.Array:
    """The local block in blocks form ``(1, b0 + below0 + above0, 1, ...)`` with the halo
    ``ext`` (:data:`pgas.grid.decomposition.Ext`: an int per axis for both sides, else
    ``(below, above)``); only the cells kept are exchanged. ``numbers``: :func:`block_numbers`.

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> grow = lambda b: extended(b, u.layout, ((1, 0),), block_numbers(u.layout))
    >>> f = shard_map(lambda b: grow(b).reshape(-1), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0]
    """
    blocks = block.reshape(tuple(x for n in block.shape for x in (1, n)))
    for axis, e in enumerate(ext):
        if any(ext_pair(e)):
            ax, faces = layout.axes[axis], layout.boundary[axis]
            move = _ppermute(layout.spec[axis], ax.parts, faces[0].periodic)
            blocks = extend(blocks, axis, e, ax, faces, numbers[axis], transport=move)
    return blocks


def exchange_halo(block: jax.Array, layout: Layout, halo: Halo) -> jax.Array:
    """The local block with ``halo`` cells added on every side, filled from the neighbours.

    Call inside ``shard_map`` over ``layout.mesh`` with the array's spec.
    Axis by axis (corners included), each side is one ``lax.ppermute`` of a
    halo slab (nothing crosses a non-periodic domain edge); ghost cells at
    the domain edges follow the array's boundary conditions; a short
    block's right halo sits right after its last real cell.

    Args:
        block: this device's physical block (``layout.local_shape``).
        layout: the global array's layout.
        halo: width per axis (an int for all), or a ``(below, above)`` pair per axis.

    Returns:
        The extended block, ``local_shape + 2 * halo`` per axis
        (``local_shape + below + above`` for pairs: only those sides are exchanged).

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> f = shard_map(lambda b: exchange_halo(b, u.layout, 1), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0, 0.0]
    >>> f = shard_map(lambda b: exchange_halo(b, u.layout, ((1, 0),)), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0]
    """
    ext = extended(block, layout, sides_of(layout, halo), block_numbers(layout))
    return ext.reshape(ext.shape[1::2])


def halo_key(layout: Layout, halo: Halo) -> tuple:
    """The halo as the compiled programs key it (:func:`pgas.references.explicit.loop.program`):
    widths per axis, or per side where they differ.

    >>> import numpy as np, pgas
    >>> lay = pgas.from_numpy(np.zeros(8), pgas.make_mesh(devices=1)).layout
    >>> halo_key(lay, 1), halo_key(lay, ((1, 0),))
    ((1,), ((1, 0),))
    """
    sides = sides_of(layout, halo)
    return tuple(max(p) for p in sides) if asymmetric(sides) is None else sides
