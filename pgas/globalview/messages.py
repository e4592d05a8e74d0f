"""Messages: the halo slabs of several fields sent as one, as an MPI code packs them.

A state of several fields exchanges each field's halo along each axis. Fields of one
layout and dtype (Gray-Scott's ``u`` and ``v``, a flow's velocity components) send their
slabs of one side joined along the axis, in one collective-permute, and cut them apart on
arrival: one message per side and axis for all of them, the same bytes. Their boundary
conditions stay their own: the ghost cells at a domain edge are filled per field after the
slabs arrive (:func:`pgas.globalview.halo.receive`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from pgas.globalview.halo import Transport, global_transport

__all__ = ["together"]


def together(ids: list, layouts: list, axis: int,
             moves: Callable[[int, bool], Transport] | None,
             run: Callable[[object, Transport | None], jax.Array]) -> dict:  # fmt: skip
    """``{i: run(i, transport)}`` for the fields ``ids`` (of ``layouts``), each exchanging
    its halo along ``axis`` through ``transport``, the slabs of fields of one layout and
    dtype sent in one message per direction.

    ``run(i, transport)`` extends or refills field ``i`` along ``axis``
    (:func:`pgas.globalview.halo.extend`, :func:`~pgas.globalview.halo.refill`). It is
    called twice per field: first to see the slabs it sends (that result is dropped, and
    XLA removes it), then with the slabs received, or, for a field that travels alone,
    with the transport itself.
    ``moves(axis, periodic)``: the transport; ``None``: the global view's.

    >>> import numpy as np, pgas
    >>> from pgas.globalview.halo import extend
    >>> u, v = (pgas.from_numpy(np.arange(4.0) + 10 * i, pgas.make_mesh(devices=1))
    ...         for i in range(2))
    >>> def run(i, move):
    ...     g = (u, v)[i]
    ...     blocks = g.layout.to_blocks(g.data)
    ...     return extend(blocks, 0, 1, g.layout.axes[0], g.layout.boundary[0],
    ...                   g.layout.block_iota(0), move)
    >>> out = together([0, 1], [u.layout, v.layout], 0, None, run)
    >>> out[0].tolist(), out[1].tolist()
    ([[3.0, 0.0, 1.0, 2.0, 3.0, 0.0]], [[13.0, 10.0, 11.0, 12.0, 13.0, 10.0]])
    """
    ca = 2 * axis + 1
    sent: dict = {}  # (layout, periodic, dtype, other dims) -> [(field, direction, slab)]
    for i, lay in zip(ids, layouts):
        periodic = lay.boundary[axis][0].periodic

        def record(slab, direction, i=i, lay=lay, periodic=periodic):
            shape = tuple(n for d, n in enumerate(slab.shape) if d != ca)
            key = (lay.mesh, lay.spec, lay.axes, periodic, slab.dtype, shape)
            sent.setdefault(key, []).append((i, direction, slab))
            return slab

        run(i, record)
    out, received = {}, {}
    for (_, _, _, periodic, _, _), slabs in sent.items():
        move = global_transport(2 * axis, periodic) if moves is None else moves(axis, periodic)
        if len({i for i, _, _ in slabs}) == 1:  # alone: its own messages
            out[slabs[0][0]] = run(slabs[0][0], None if moves is None else move)
            continue
        for direction in (1, -1):
            these = [(i, x) for i, d, x in slabs if d == direction]
            if these:
                moved = move(jnp.concatenate([x for _, x in these], axis=ca), direction)
                at = 0
                for i, x in these:
                    received[i, direction] = jax.lax.slice_in_dim(
                        moved, at, at + x.shape[ca], axis=ca
                    )
                    at += x.shape[ca]
    for i in ids:
        if i not in out:
            out[i] = run(i, lambda slab, direction, i=i: received[i, direction])
    return out
