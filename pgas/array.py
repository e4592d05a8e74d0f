"""GlobalArray: a logical global array, sharded over a mesh, with boundary and halo.

A :class:`GlobalArray` is a JAX pytree: its one leaf is the physical
``jax.Array`` (padded where the mesh does not divide a size; see
:mod:`pgas.layout`), its static part the :class:`~pgas.layout.Layout`. It
crosses ``jit``, ``lax.fori_loop`` and ``scan`` like any array.

Indexing gives lazy views (:mod:`pgas.view`); assignment to a slice,
``u[1:-1] = ...``, is lowered to halo exchange plus masked local arithmetic.
Arrays are built so that each process creates only its own blocks (from NumPy
data or a function of global coordinates); :meth:`GlobalArray.to_numpy`
gathers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from pgas.errors import LayoutError
from pgas.layout import Layout, make_layout

__all__ = ["GlobalArray", "from_numpy", "from_function", "zeros", "full"]


@jax.tree_util.register_pytree_node_class
class GlobalArray:
    """A global array: physical data on the devices plus its :class:`Layout`.

    Use :func:`from_numpy`, :func:`from_function`, :func:`zeros` or
    :func:`full` to make one. Indexing gives a :class:`pgas.View`; slice
    assignment updates the array in place (NumPy style); ``u.at[k].set(v)``
    returns a new array.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(5.0), pgas.make_mesh(devices=1))
    >>> u[1:-1] = 0.5 * (u[:-2] + u[2:])
    >>> u.to_numpy()
    array([0., 1., 2., 3., 4.])
    """

    __slots__ = ("data", "layout")

    def __init__(self, data: jax.Array, layout: Layout):
        self.data = data
        self.layout = layout

    # pytree
    def tree_flatten(self):
        return (self.data,), self.layout

    @classmethod
    def tree_unflatten(cls, layout, children):
        return cls(children[0], layout)

    # description
    @property
    def shape(self) -> tuple[int, ...]:
        """Logical global shape (leading batch axes of stacked snapshots included)."""
        return tuple(self.data.shape[: self.batch_ndim]) + self.layout.shape

    @property
    def batch_ndim(self) -> int:
        return self.data.ndim - self.layout.ndim

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def mesh(self) -> Mesh:
        return self.layout.mesh

    def __repr__(self) -> str:
        lay = self.layout
        return (
            f"GlobalArray(shape={self.shape}, dtype={self.dtype}, "
            f"mesh={dict(lay.mesh.shape)}, spec={lay.spec}, boundary={lay.boundary}, "
            f"halo={lay.halo})"
        )

    __hash__ = object.__hash__

    # indexing and arithmetic are attached by pgas.view (one concept per module)

    def to_numpy(self) -> np.ndarray:
        """Gather the logical global array to a NumPy array (on every process).

        >>> import pgas
        >>> pgas.zeros((3,), pgas.make_mesh(devices=1)).to_numpy()
        array([0., 0., 0.], dtype=float32)
        """
        data = self.data
        if data.is_fully_addressable:
            host = np.asarray(data)
        else:
            from jax.experimental import multihost_utils

            host = np.asarray(multihost_utils.process_allgather(data, tiled=True))
        index = [slice(None)] * self.batch_ndim + [
            a.physical_index() if not a.even else slice(None) for a in self.layout.axes
        ]
        for i, ix in enumerate(index):
            if not isinstance(ix, slice):
                host = np.take(host, ix, axis=i)
        return host


def _physical_coords(layout: Layout, index: tuple[slice, ...]) -> tuple[list, list]:
    """Global indices and validity of the physical positions selected by ``index``."""
    coords, valid = [], []
    for ax, sl in zip(layout.axes, index):
        p = np.arange(ax.padded)[sl]
        b, j = p // ax.block, p % ax.block
        length = ax.base + (b < ax.extra)
        coords.append(np.minimum(b * ax.base + np.minimum(b, ax.extra) + j, ax.size - 1))
        valid.append(j < length)
    return coords, valid


def _build(layout: Layout, dtype: np.dtype, block: Callable) -> GlobalArray:
    """Make the physical array shard by shard; ``block(coords)`` gives a shard's values."""

    def callback(index):
        index = tuple(index) + (slice(None),) * (layout.ndim - len(index))
        coords, valid = _physical_coords(layout, index)
        values = np.asarray(block(coords), dtype=dtype)
        mask = np.ones(values.shape, bool)
        for axis, v in enumerate(valid):
            mask &= v.reshape([-1 if i == axis else 1 for i in range(len(valid))])
        return np.where(mask, values, np.zeros((), dtype))

    data = jax.make_array_from_callback(layout.physical_shape, layout.sharding, callback)
    return GlobalArray(data, layout)


_SUPPORTED = "float32, float64, integer, uint8 or bool"


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.kind not in "fiub":
        raise LayoutError(f"dtype = {dt}: pgas arrays hold {_SUPPORTED} values")
    if dt == np.float64 and not jax.config.jax_enable_x64:
        raise LayoutError(
            "dtype = float64 needs 64-bit JAX; call jax.config.update('jax_enable_x64', True) "
            "at start-up (or set JAX_ENABLE_X64=1), or use float32"
        )
    return dt


def from_numpy(
    x: np.ndarray,
    mesh: Mesh,
    *,
    spec: Sequence[str | None] | None = None,
    boundary: object = None,
    halo: int | Sequence[int | None] | None = None,
) -> GlobalArray:
    """Distribute a NumPy array over ``mesh``; each device receives only its block.

    Args:
        x: the global values (any shape the mesh does not divide is fine).
        mesh: device mesh from :func:`pgas.make_mesh`.
        spec: mesh axis (or None) per array axis; default: axis i on mesh axis i.
        boundary: boundary condition(s); default :class:`pgas.Periodic`.
        halo: declared halo width; default: inferred from the stencil.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.ones(7, np.float32), pgas.make_mesh(devices=1), halo=1)
    >>> u.shape, u.layout.halo
    ((7,), (1,))
    """
    x = np.asarray(x)
    layout = make_layout(x.shape, mesh, spec, boundary, halo)
    return _build(layout, _dtype(x.dtype), lambda c: x[np.ix_(*c)])


def from_function(
    fn: Callable[..., np.ndarray],
    shape: Sequence[int],
    mesh: Mesh,
    *,
    dtype=np.float32,
    spec: Sequence[str | None] | None = None,
    boundary: object = None,
    halo: int | Sequence[int | None] | None = None,
) -> GlobalArray:
    """Build a global array from a function of global cell indices, block by block.

    ``fn(i)`` (1-D), ``fn(i, j)`` (2-D) or ``fn(i, j, k)`` (3-D) receives NumPy
    integer index arrays (broadcast against each other, ``indexing="ij"``) of
    one block only, so no process ever holds the whole field.

    >>> import numpy as np, pgas
    >>> pgas.from_function(lambda i: 2 * i, (4,), pgas.make_mesh(devices=1)).to_numpy()
    array([0., 2., 4., 6.], dtype=float32)
    """
    layout = make_layout(shape, mesh, spec, boundary, halo)
    dt = _dtype(dtype)

    def block(coords):
        grids = np.meshgrid(*coords, indexing="ij", sparse=True)
        return np.broadcast_to(fn(*grids), tuple(len(c) for c in coords))

    return _build(layout, dt, block)


def full(
    shape: Sequence[int],
    value: float,
    mesh: Mesh,
    *,
    dtype=np.float32,
    spec: Sequence[str | None] | None = None,
    boundary: object = None,
    halo: int | Sequence[int | None] | None = None,
) -> GlobalArray:
    """A global array filled with ``value``.

    >>> import pgas
    >>> pgas.full((2,), 3, pgas.make_mesh(devices=1), dtype="uint8").to_numpy()
    array([3, 3], dtype=uint8)
    """
    layout = make_layout(shape, mesh, spec, boundary, halo)
    dt = _dtype(dtype)
    data = jax.jit(
        lambda: jnp.full(layout.physical_shape, value, dt), out_shardings=layout.sharding
    )()
    return GlobalArray(data, layout)


def zeros(
    shape: Sequence[int],
    mesh: Mesh,
    *,
    dtype=np.float32,
    spec: Sequence[str | None] | None = None,
    boundary: object = None,
    halo: int | Sequence[int | None] | None = None,
) -> GlobalArray:
    """A global array of zeros.

    >>> import pgas
    >>> pgas.zeros((2, 3), pgas.make_mesh(devices=1)).shape
    (2, 3)
    """
    return full(shape, 0, mesh, dtype=dtype, spec=spec, boundary=boundary, halo=halo)
