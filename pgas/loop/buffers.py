"""Double buffering: the CPU's loop carries every field extended, in two buffers.

The loop on the CPU (:func:`double_buffered`) carries every field already extended
(:func:`framed`), in two buffers, as an MPI code carries ``u`` and ``u_new`` with their
ghost cells. :func:`double_group` exchanges the halo in place
(:func:`pgas.globalview.halo.refill`: only the slabs are written), and writes each
sub-step's result into the other buffer by a dynamic-update-slice that XLA fuses with the
sub-step and does in place; the ghost cells beyond a Neumann face are then re-filled in
that buffer by slabs (:func:`pgas.globalview.mirrors.deferring_mirrors`). So a sub-step is
one pass over the block with nothing recomputed, and a device holds two extended blocks:
2.0x its block instead of 3.0x (the loop buffer, the extended copy and an intermediate of
the single-buffered group).

The halo of every field is exchanged in place, each field with its own messages (joined
with another field's, :func:`pgas.globalview.messages.together`, a slab read before the
other side's write made XLA copy the buffer). The single-buffered group and the frames
are :mod:`pgas.loop.frames`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.forms import anchor_of, blocks_of
from pgas.globalview.halo import refill
from pgas.globalview.mirrors import deferring_mirrors
from pgas.grid.decomposition import Ext, ext_of, ext_pair, ext_sides
from pgas.grid.mesh import platform_of
from pgas.loop.frames import frame_ext

__all__ = ["double_buffered", "framed", "refreshed", "double_group"]

State = Any
Sides = tuple[tuple[int, int], ...]


def _is_array(x) -> bool:
    return isinstance(x, GlobalArray)


def double_buffered(mesh) -> bool:
    """Whether :func:`pgas.run` carries the fields extended, in two buffers (on the CPU).

    On a GPU the single-buffered group stays: its extension fuses into the
    first sub-step's kernel (benchmarks/README.md, "GPU").

    >>> import pgas
    >>> double_buffered(pgas.make_mesh(devices=1))
    True
    """
    return platform_of(mesh) == "cpu"


def framed(state: State, halo: Ext) -> State:
    """Every field in its blocks form with room for ``halo[i]`` cells (zeros; an int: on
    both sides, else ``(below, above)``).

    What a double-buffered loop carries; :func:`double_group` fills the halo.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> f = framed(u, (2,))
    >>> f.ext, f.data.tolist()
    ((2,), [[0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0]])
    >>> framed(u, ((2, 0),)).data.tolist()
    [[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]]
    """

    def one(g: GlobalArray) -> GlobalArray:
        lay = g.layout
        data, ext = blocks_of(g)
        if any(lo or hi for lo, hi in ext):
            raise PgasError("internal: framed() takes fields without halo")
        own = ext_sides(halo[: lay.ndim])
        cfg = [(0, 0, 0)] * data.ndim
        for axis, (below, above) in enumerate(own):
            cfg[2 * axis + 1] = (below, above, 0)
        data = jax.lax.pad(data, jnp.zeros((), data.dtype), cfg)
        if lay.mesh.size > 1:
            data = jax.lax.with_sharding_constraint(data, lay.blocks_sharding)
        return GlobalArray(data, lay, ext_of(own))

    return jax.tree.map(lambda x: one(x) if _is_array(x) else x, state, is_leaf=_is_array)


def _seen(g: GlobalArray, ext: Ext, data, anchor) -> GlobalArray:
    """``data`` (a buffer of ``g``'s extension) seen with extension ``ext`` (a static slice)."""
    want = ext_sides(ext)
    for axis, (have, (below, above)) in enumerate(zip(ext_sides(g.ext), want)):
        if have != (below, above):
            end = have[0] + g.layout.axes[axis].block + above
            data = jax.lax.slice_in_dim(data, have[0] - below, end, axis=2 * axis + 1)
    return GlobalArray(data, g.layout, ext_of(want), anchor)


def _refresh(g: GlobalArray, transport=None, corners_later: bool = False) -> jax.Array:
    """``g``'s buffer with its whole halo exchanged in place, in its own messages (see the
    module docstring); ``corners_later``: the slabs of each axis carry only the block's
    cells of the later axes, whose own exchange comes after and sends the corners."""
    lay, data = g.layout, g.data
    for axis, e in enumerate(g.ext):
        if any(ext_pair(e)):
            trim = _later(lay, g.ext, axis) if corners_later else None
            data = refill(data, axis, e, lay.axes[axis], lay.boundary[axis], lay.block_iota(axis),
                          transport, trim)  # fmt: skip
    return data


def _later(layout, ext: Ext, axis: int) -> dict[int, tuple[int, int]] | None:
    """Of every extended axis after ``axis``, the block's cells (:data:`pgas.halo.Trim`).

    >>> import pgas
    >>> _later(pgas.zeros((8, 8), pgas.make_mesh(("y",), devices=1)).layout, (2, (1, 0)), 0)
    {1: (1, 9)}
    """
    trim = {j: (lo, lo + layout.axes[j].block)
            for j, (lo, hi) in enumerate(ext_sides(ext)) if j > axis and lo + hi}  # fmt: skip
    return trim or None


def refreshed(state: State) -> State:
    """Every framed field with its whole halo exchanged in place (the state a check reads).

    A double-buffered loop leaves stale halo cells behind its sub-steps; after
    this, reads of shifted views come from the buffer itself, with no extended
    copy (one slab exchange per side, as at the start of a group).
    """
    return jax.tree.map(lambda g: GlobalArray(_refresh(g), g.layout, g.ext) if _is_array(g)
                        else g, state, is_leaf=_is_array)  # fmt: skip


def _at(have: Ext, ext: Ext, ndim: int) -> list[int]:
    """Where data of extension ``ext`` starts in a buffer of extension ``have`` (blocks form)."""
    start = [0] * ndim
    for axis, (h, e) in enumerate(zip(ext_sides(have), ext_sides(ext))):
        start[2 * axis + 1] = h[0] - e[0]
    return start


def _place(buffer: jax.Array, data: jax.Array, at: list[int]) -> jax.Array:
    """``data`` written into ``buffer`` at index ``at`` (:func:`_at`): a dynamic-update-slice,
    which XLA fuses with the sub-step and does in place."""
    return jax.lax.dynamic_update_slice(buffer, data, at)


def double_group(body: Callable, widths: tuple[int, ...], k: int, transport=None,
                 sides: Sides | None = None) -> Callable:  # fmt: skip
    """``k`` steps on double-buffered fields: ``group((X, Y), counter) -> (X, Y)``.

    ``X`` holds the fields extended (:func:`framed`), ``Y`` a second buffer of
    each. One in-place exchange of their whole halo (at least ``k * widths``
    cells: a single step after groups of ``k`` exchanges the groups' halo,
    as exchanging part of it made XLA copy the block), then every
    sub-step writes each field it changes into that field's other buffer;
    fields the step returns unchanged stay where they are. After ``k``
    sub-steps a field is back in ``X``'s buffer when ``k`` is even (the loop
    runs groups in pairs otherwise). ``transport``: how slabs travel
    (:data:`pgas.halo.Transport`; default the global-view shift). Benchmarks pass
    one that keeps each block's own slab, to time the same work without exchange.
    ``sides``: the step's reach per side; the buffers keep and exchange ``k`` times it
    (the groups' ``k`` for a single step too, as the whole halo is exchanged).
    """
    reach = frame_ext(widths, sides, k)

    def group(pair, counter=None):
        anchor = None if counter is None else anchor_of(counter)
        xs, tree = jax.tree.flatten(pair[0], is_leaf=_is_array)
        spare = [y.data for y in tree.flatten_up_to(pair[1])]
        # the whole halo, written in place
        now = [_refresh(x, transport, sides is not None) for x in xs]
        ext = [reach[: x.layout.ndim] for x in xs]
        for _ in range(k):
            state = [_seen(x, e, d, anchor) for x, e, d in zip(xs, ext, now)]
            given = [g.data for g in state]  # a step may assign into the arrays it is given
            with deferring_mirrors() as mirrors:  # Neumann ghosts: re-filled in the buffer
                out = tree.flatten_up_to(body(tree.unflatten(state)))
            for i, new in enumerate(out):
                if new.data is given[i]:  # returned unchanged: stays in its buffer
                    continue
                data, ext[i] = blocks_of(new)
                at = _at(xs[i].ext, ext[i], data.ndim)
                now[i], spare[i] = mirrors.place(data, _place(spare[i], data, at), at), now[i]
        fields = [GlobalArray(d, x.layout, x.ext) for x, d in zip(xs, now)]
        others = [GlobalArray(d, x.layout, x.ext) for x, d in zip(xs, spare)]
        return tree.unflatten(fields), tree.unflatten(others)

    return group
