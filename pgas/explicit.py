"""The explicit path: local kernels on blocks with halo cells, ppermute under shard_map.

This is the ImplicitGlobalGrid / MPI way of writing a stencil, inside one JAX
program: every device holds its block, :func:`exchange_halo` fills the halo
cells by ``lax.ppermute`` with the neighbouring devices (two-phase, corners
included; boundary conditions at the domain edges), and a *local kernel*
computes the new values of the block from the extended block::

    def heat(e):                        # e: block with 1 halo cell per side
        return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])

The kernel contract, shared with the MPI backend (:mod:`pgas.mpi`): it takes
the extended block (``block + 2 * halo`` cells per axis) and returns the new
values of all the block's cells, using only operators and methods that NumPy
and ``jax.numpy`` arrays share. The update-region semantics are the automatic
path's: a cell takes the kernel's value only inside ``region`` (global
coordinates, NumPy slices) and outside the outer cells of ``Keep`` faces;
padding cells never show.

The halo exchange is :func:`pgas.halo.extend`, the same code the automatic path
uses, with ``ppermute`` instead of ``jnp.roll`` as transport; both compile to
the same collective-permutes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import PartitionSpec

from pgas.array import GlobalArray
from pgas.errors import HaloError
from pgas.halo import extend
from pgas.layout import Layout
from pgas.view import _check_dtype, _normalize

__all__ = ["exchange_halo", "step", "run"]

Kernel = Callable[[jax.Array], jax.Array]


def _widths(layout: Layout, halo: int | Sequence[int]) -> tuple[int, ...]:
    widths = (halo,) * layout.ndim if isinstance(halo, (int, np.integer)) else tuple(halo)
    if len(widths) != layout.ndim or any(int(h) < 0 for h in widths):
        raise HaloError(f"halo = {halo!r}: give one width >= 0, or one per axis ({layout.ndim})")
    for axis, h in enumerate(widths):
        if h:
            layout.check_halo(axis, int(h))
    return tuple(int(h) for h in widths)


def _block_numbers(layout: Layout) -> list[jax.Array]:
    """This device's block number per array axis (inside shard_map)."""
    return [
        jnp.zeros((), jnp.int32) if name is None else jax.lax.axis_index(name)
        for name in layout.spec
    ]


def _ppermute(name: str | None, parts: int, axis: int):
    def move(slab, direction):
        if name is None or parts == 1:
            return slab
        perm = [(i, (i + direction) % parts) for i in range(parts)]
        return jax.lax.ppermute(slab, name, perm)

    return move


def exchange_halo(block: jax.Array, layout: Layout, halo: int | Sequence[int]) -> jax.Array:
    """The local block with ``halo`` cells added on every side, filled from the neighbours.

    Call inside ``shard_map`` over ``layout.mesh`` with the array's spec.
    Axis by axis (corners included), each side is one ``lax.ppermute`` of a
    halo slab; ghost cells at the domain edges follow the array's boundary
    conditions; a short block's right halo sits right after its last real cell.

    Args:
        block: this device's physical block (``layout.local_shape``).
        layout: the global array's layout.
        halo: width per axis (an int for all).

    Returns:
        The extended block, ``local_shape + 2 * halo`` per axis.

    >>> import numpy as np, pgas
    >>> from jax import shard_map
    >>> u = pgas.from_numpy(np.arange(4.0), pgas.make_mesh(devices=1))
    >>> f = shard_map(lambda b: exchange_halo(b, u.layout, 1), mesh=u.mesh,
    ...               in_specs=u.layout.sharding.spec, out_specs=u.layout.sharding.spec)
    >>> np.asarray(f(u.data)).tolist()
    [3.0, 0.0, 1.0, 2.0, 3.0, 0.0]
    """
    widths = _widths(layout, halo)
    blocks = block.reshape(tuple(x for n in block.shape for x in (1, n)))
    numbers = _block_numbers(layout)
    for axis, h in enumerate(widths):
        if h:
            ax = layout.axes[axis]
            blocks = extend(
                blocks, axis, h, ax, layout.boundary[axis], numbers[axis],
                transport=_ppermute(layout.spec[axis], ax.parts, axis),
            )  # fmt: skip
    return blocks.reshape(blocks.shape[1::2])


def _local_update(kernel: Kernel, layout: Layout, widths, region) -> Callable:
    start, extent, kept = _normalize(region if region is not None else (), layout.shape)
    if not all(kept):
        raise HaloError("region must be slices (integers would drop an axis); use i:i+1")

    def update(block):
        new = kernel(exchange_halo(block, layout, widths))
        if new.shape != block.shape:
            raise HaloError(
                f"kernel returned shape {new.shape} for a block of shape {block.shape}; it "
                f"must return new values for every cell of the block (e[1:-1] for halo 1)"
            )
        _check_dtype(np.dtype(new.dtype), np.dtype(block.dtype), False)
        numbers = [b.reshape(()) for b in _block_numbers(layout)]
        mask = layout.window_mask(start, extent, widths, block=numbers)
        if mask is None:
            return new.astype(block.dtype)
        local = mask.reshape(mask.shape[1::2])  # blocks form -> this block's axes
        return jnp.where(local, new.astype(block.dtype), block)

    return update


def _sharded(fn: Callable, layout: Layout) -> Callable:
    spec = PartitionSpec(*layout.spec)
    return shard_map(fn, mesh=layout.mesh, in_specs=spec, out_specs=spec)


def step(kernel: Kernel, u: GlobalArray, halo: int | Sequence[int] = 1, region=None) -> GlobalArray:
    """One explicit step of ``kernel`` on ``u`` (for :func:`pgas.comm_report` and tests).

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> step(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u).to_numpy()
    array([0., 2., 0.])
    """
    update = _local_update(kernel, u.layout, _widths(u.layout, halo), region)
    return GlobalArray(_sharded(update, u.layout)(u.data), u.layout)


@functools.lru_cache(maxsize=32)
def _program(kernel: Kernel, layout: Layout, widths: tuple, region_key) -> Callable:
    region = None if region_key is None else tuple(slice(*r) for r in region_key)
    update = _local_update(kernel, layout, widths, region)
    loop = lambda block, n: jax.lax.fori_loop(0, n, lambda i, b: update(b), block)
    spec = PartitionSpec(*layout.spec)
    sharded = shard_map(loop, mesh=layout.mesh, in_specs=(spec, PartitionSpec()), out_specs=spec)
    return jax.jit(sharded, donate_argnums=0)


def run(
    kernel: Kernel,
    u: GlobalArray,
    steps: int,
    halo: int | Sequence[int] = 1,
    region=None,
    steps_per_exchange: int | str = "auto",
) -> GlobalArray:
    """Run ``steps`` explicit steps as one compiled ``shard_map`` + ``fori_loop`` program.

    Args:
        kernel: local kernel (see the module docstring).
        u: the field (its buffer is donated; use the result).
        steps: number of steps.
        halo: halo width per axis (an int for all).
        region: window the kernel writes (NumPy slices in global coordinates);
            default the whole array.

    >>> import numpy as np, pgas
    >>> mesh = pgas.make_mesh(devices=1)
    >>> u = pgas.from_numpy(np.array([0.0, 4.0, 0.0]), mesh, boundary=pgas.Keep())
    >>> run(lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:]), u, 2).to_numpy()
    array([0., 1., 0.])
    """
    key = None if region is None else tuple(
        (s.start, s.stop, s.step) for s in (region if isinstance(region, tuple) else (region,))
    )  # fmt: skip
    program = _program(kernel, u.layout, _widths(u.layout, halo), key)
    return GlobalArray(program(u.data, jnp.int32(steps)), u.layout)
