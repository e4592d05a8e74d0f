"""The explicit path's update: ``k`` kernel steps on one exchange of a halo ``k * halo`` wide.

Contract: :func:`local_update` is what every explicit program runs inside
``shard_map``: one exchange of a frame ``k`` times each side's reach, then
``k`` sub-steps, each calling the kernel on the whole frame and keeping what
it returns (a frame narrower by ``(below, above)``) where the update mask
allows (:func:`merge`: ``region`` minus the outer cells of ``Keep`` faces, no
padding; ghosts beyond a non-periodic edge re-filled); the block's own cells
come out bitwise equal to ``k`` single steps. :func:`choose` and :func:`plan`
say which ``k`` a field and halo get (:func:`pgas.loop.plan.choose_steps_per_exchange`,
the automatic path's choice); :func:`step` runs one group eagerly and
:func:`comm_report` reports what the compiler sent for it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.errors import HaloError
from pgas.globalview.array import GlobalArray
from pgas.globalview.halo import refill_mirror
from pgas.globalview.lower import anchor_of, check_dtype
from pgas.globalview.view import normalize_index
from pgas.grid.layout import Layout
from pgas.grid.mesh import platform_of
from pgas.loop.frames import hold
from pgas.loop.plan import Choice, Plan, choose_steps_per_exchange
from pgas.loop.report import CommReport, compiled_report, exchanges_of
from pgas.references.explicit.exchange import (
    Halo,
    Kernel,
    Sides,
    asymmetric,
    block_numbers,
    extended,
    sides_of,
    widths_of,
)

__all__ = ["local_update", "merge", "choose", "plan", "step", "comm_report"]


def local_update(kernel: Kernel, layout: Layout, sides: Sides, region, k: int) -> Callable:
    """``k`` kernel steps on one exchange of a halo ``k * sides`` wide (see the module doc).

    The frame keeps ``k`` times each side's reach, ``k * (below, above)`` per axis, all of
    it exchanged; each sub-step gives the kernel the whole frame and keeps what it returns,
    a frame narrower by ``(below, above)``. ``update(block, counter=None)`` runs inside
    ``shard_map``; ``counter``: the group's number in the loop (a ``Keep`` anchor).

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> update = local_update(lambda e: 0.5 * (e[:-2] + e[2:]), u.layout, ((1, 1),), None, 2)
    >>> f = shard_map(update, mesh=u.mesh, in_specs=u.layout.sharding.spec,
    ...               out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()  # two steps on one exchange
    [0.0, 1.0, 0.0, 0.0]
    """
    window = normalize_index(region if region is not None else (), layout.shape)
    if not all(window.kept):
        raise HaloError("region must be slices (integers would drop an axis); use i:i+1")
    widths = tuple(max(p) for p in sides)
    one_sided = asymmetric(sides)

    def update(block, counter=None):
        numbers = block_numbers(layout)
        anchor = None if counter is None else anchor_of(counter)
        ext = tuple((k * lo, k * hi) for lo, hi in sides)
        blocks = extended(block, layout, ext, numbers)
        if hold(layout.mesh, tuple(lo + hi for lo, hi in ext)):  # built once, read by the
            blocks = jax.lax.optimization_barrier(blocks)  # kernel alone (as in pgas.run)
        for _ in range(k):
            dom = tuple((e - lo, f - hi) for (e, f), (lo, hi) in zip(ext, sides))
            new = kernel(blocks.reshape(blocks.shape[1::2]))
            want = tuple(n + lo + hi for n, (lo, hi) in zip(block.shape, dom))
            if new.shape != want:
                shown = widths if one_sided is None else sides
                raise HaloError(
                    f"kernel returned shape {new.shape} for a block of shape {want} with halo "
                    f"{shown}; it must return new values for every cell of the block (e[1:-1] "
                    f"for halo 1, e[1:] for halo ((1, 0),))"
                )
            check_dtype(np.dtype(new.dtype), np.dtype(block.dtype), False)
            blocks = merge(blocks, new, layout, window, widths, ext, dom, numbers, anchor)
            ext = dom
        return blocks.reshape(block.shape)

    return update


def merge(blocks, new, layout: Layout, window, widths, ext: Sides, dom: Sides, numbers,
           anchor) -> jax.Array:  # fmt: skip
    """The kernel's values inside the update mask, the old ones elsewhere; ghosts re-filled.

    ``blocks`` keep ``ext`` cells ``(below, above)`` per axis, ``new`` and the result
    ``dom``; ``window``: the update region (:func:`pgas.globalview.view.normalize_index`),
    ``widths``: the cells a ``Keep`` face keeps, ``numbers``:
    :func:`~pgas.references.explicit.exchange.block_numbers`.

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> from pgas.globalview.view import normalize_index
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> def once(b):
    ...     numbers = block_numbers(u.layout)
    ...     blocks = extended(b, u.layout, ((1, 1),), numbers)
    ...     new = 0.5 * (blocks[:, :-2] + blocks[:, 2:])
    ...     out = merge(blocks, new, u.layout, normalize_index((), u.shape), (1,),
    ...                 ((1, 1),), ((0, 0),), numbers, None)
    ...     return out.reshape(b.shape)
    >>> f = shard_map(once, mesh=u.mesh, in_specs=u.layout.sharding.spec,
    ...               out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()  # the Keep cells keep their values
    [0.0, 0.0, 2.0, 0.0]
    """
    for axis, ((e, _), (lo, hi)) in enumerate(zip(ext, dom)):
        if ext[axis] != dom[axis]:
            blocks = jax.lax.slice_in_dim(blocks, e - lo, e + layout.axes[axis].block + hi,
                                          axis=2 * axis + 1)  # fmt: skip
    new = new.astype(blocks.dtype).reshape(blocks.shape)
    numbers = [b.reshape(()) for b in numbers]
    mask = layout.window_mask(window.start, window.extent, widths, block=numbers, ext=dom,
                              anchor=anchor)  # fmt: skip
    out = new if mask is None else jnp.where(mask, new, blocks)
    for axis, d in enumerate(dom):
        if any(d):
            out = refill_mirror(out, axis, d, layout.axes[axis], layout.boundary[axis],
                                numbers[axis], anchor)  # fmt: skip
    return out


def _sharded(fn: Callable, layout: Layout) -> Callable:
    spec = PartitionSpec(*layout.spec)
    return shard_map(fn, mesh=layout.mesh, in_specs=spec, out_specs=spec)


def choose(u: GlobalArray, halo: Halo = 1, steps_per_exchange: int | str = "auto") -> Choice:
    """The steps per exchange the explicit path uses for ``u`` and ``halo``.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(10), pgas.make_mesh(devices=1))
    >>> choose(u, 1, 16).steps_per_exchange
    10
    """
    lay = u.layout
    min_block = [a.min_length for a in lay.axes]
    return choose_steps_per_exchange(steps_per_exchange, min_block, widths_of(lay, halo),
                                     platform_of(lay.mesh))  # fmt: skip


def plan(u: GlobalArray, halo: Halo = 1, steps_per_exchange: int | str = "auto") -> Plan:
    """The plan of an explicit run of ``u``: ``k`` (:func:`choose`), a halo ``k * halo`` wide.

    Single-buffered: each group reads an extended copy of the block. A halo per
    side is recorded in :attr:`Plan.sides`; ``k`` times it is exchanged.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(10), pgas.make_mesh(devices=1))
    >>> p = plan(u, 1, 4)
    >>> p.steps_per_exchange, p.halo, p.double
    (4, (4,), False)
    >>> plan(u, ((1, 0),), 4).exchanged
    ((4, 0),)
    """
    sides = sides_of(u.layout, halo)
    widths = tuple(max(p) for p in sides)
    choice = choose(u, halo, steps_per_exchange)
    k = choice.steps_per_exchange
    return Plan(widths, choice, tuple(k * w for w in widths), platform_of(u.layout.mesh),
                sides=asymmetric(sides))  # fmt: skip


def step(kernel: Kernel, u: GlobalArray, halo: Halo = 1, region=None,
         steps_per_exchange: int = 1) -> GlobalArray:  # fmt: skip
    """``steps_per_exchange`` explicit steps on one halo exchange (for reports and tests).

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> step(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u).to_numpy()
    array([0., 2., 0.])
    """
    k = choose(u, halo, steps_per_exchange).steps_per_exchange
    update = local_update(kernel, u.layout, sides_of(u.layout, halo), region, k)
    return GlobalArray(_sharded(update, u.layout)(u.data), u.layout)


def comm_report(
    kernel: Kernel,
    u: GlobalArray,
    halo: Halo = 1,
    region=None,
    steps_per_exchange: int | str = "auto",
    loop: bool = False,
) -> CommReport:
    """What the compiler sent for the explicit path, per physical step (see pgas.comm_report).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(8, np.float32), pgas.make_mesh(devices=1))
    >>> comm_report(lambda e: e[1:-1], u, 1, steps_per_exchange=2).steps_per_exchange
    2
    """
    how = plan(u, halo, steps_per_exchange)
    c = how.choice
    k, lay = c.steps_per_exchange, u.layout
    fn = lambda v: step(kernel, v, halo, region, k)  # noqa: E731
    args: tuple = (u,)
    if loop:
        fn = lambda v, n: jax.lax.fori_loop(0, n, lambda i, x: step(kernel, x, halo, region, k), v)  # noqa: E731  fmt: skip
        args = (u, jnp.int32(2))
    exchanges = exchanges_of(lay, how.exchanged, u.dtype.itemsize)
    return compiled_report(fn, args, name=getattr(kernel, "__name__", "kernel"),
                           mesh=dict(lay.mesh.shape), exchanges=exchanges,
                           steps_per_exchange=k, note=c.note, loop=loop)  # fmt: skip
