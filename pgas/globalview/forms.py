"""An array's data in its forms: physical, blocks, and blocks extended by halo cells.

A :class:`pgas.GlobalArray`'s data comes in one of two forms, and the
lowering (:mod:`pgas.globalview.lower`) and the compiled loops
(:mod:`pgas.loop.frames`) move between them with the functions here:

- *physical*: the global array itself, sharded over the mesh
  (``GlobalArray.ext`` is ``None``);
- *blocks*: ``(D0, b0, D1, b1, ...)``, device ``i`` along axis 0 holding
  block ``[i, :]`` (:meth:`pgas.Layout.to_blocks`), each block extended by
  ``(below, above)`` halo cells per axis (``GlobalArray.ext``, a
  :data:`pgas.grid.decomposition.Ext`; zeros for physical data).

Contract: nothing here computes or exchanges a value; :func:`blocks_of`,
:func:`physical_of`, :func:`narrowed` and :func:`crop` only reshape and slice,
so the cells they keep are the same bits. :func:`anchor_of` gives the zero
that framed data inside a loop carries (``GlobalArray.anchor``).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from pgas.grid.decomposition import ext_sides

__all__ = ["Sides", "blocks_of", "sides_kept", "physical_of", "crop", "narrowed", "anchor_of"]

Sides = tuple[tuple[int, int], ...]
"""Cells per axis ``(below, above)``: below is toward lower indices."""


def blocks_of(array) -> tuple[jax.Array, Sides]:
    """An array's data in the blocks form, and its extension ``(below, above)`` per axis
    (zeros for physical data).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> data, sides = blocks_of(u)
    >>> data.shape, sides
    ((1, 4), ((0, 0),))
    """
    data = array.layout.to_blocks(array.data) if array.ext is None else array.data
    return data, sides_kept(array)


def sides_kept(array) -> Sides:
    """The halo cells ``(below, above)`` per axis an array keeps (zeros for physical data).

    >>> import numpy as np, pgas
    >>> sides_kept(pgas.from_numpy(np.zeros((2, 3)), pgas.make_mesh(devices=1)))
    ((0, 0), (0, 0))
    """
    return ext_sides(array.ext or ((0, 0),) * array.layout.ndim)


def physical_of(array) -> jax.Array:
    """An array's physical data, whatever form it is in (the block's own cells).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> physical_of(u) is u.data
    True
    """
    if array.ext is None:
        return array.data
    lay, blocks = array.layout, array.data
    for axis, ((below, above), ax) in enumerate(zip(ext_sides(array.ext), lay.axes)):
        if below or above:
            blocks = jax.lax.slice_in_dim(blocks, below, below + ax.block, axis=2 * axis + 1)
    return lay.from_blocks(blocks)


def crop(data: jax.Array, cut_lo: Sequence[int], cut_hi: Sequence[int]) -> jax.Array:
    """``data`` (blocks form) less ``cut_lo[i]`` cells at the start of block axis ``i``, and
    ``cut_hi[i]`` at its end; a 0-d ``data`` (an expression of no window) as it is.

    >>> crop(jnp.arange(6).reshape(1, 6), [1], [2]).tolist()
    [[1, 2, 3]]
    """
    if jnp.ndim(data) == 0:  # an expression of no window (pgas.apply returning a constant)
        return data
    for axis, (a, b) in enumerate(zip(cut_lo, cut_hi)):
        if a or b:
            n = data.shape[2 * axis + 1]
            data = jax.lax.slice_in_dim(data, a, n - b, axis=2 * axis + 1)
    return data


def narrowed(data: jax.Array, have: Sides, want: Sides) -> jax.Array:
    """``data`` (blocks form, extended by ``have`` cells ``(below, above)`` per axis) cut to
    the extension ``want``.

    >>> narrowed(jnp.arange(6).reshape(1, 6), ((2, 2),), ((1, 0),)).tolist()
    [[1, 2, 3]]
    """
    return crop(data, [h[0] - w[0] for h, w in zip(have, want)],
                [h[1] - w[1] for h, w in zip(have, want)])  # fmt: skip


def anchor_of(counter: jax.Array) -> jax.Array:
    """A zero XLA cannot tell from a loop counter (see :class:`pgas.GlobalArray` ``anchor``).

    A loop index is below 2**31, so its sign bit is zero; XLA cannot prove it,
    and leaves masks built on it inside the loop, where they fuse into the
    stencil instead of being hoisted as arrays read from memory every step.

    >>> int(anchor_of(jnp.int32(7)))
    0
    """
    return jax.lax.shift_right_arithmetic(jnp.asarray(counter).astype(jnp.int32), jnp.int32(31))
