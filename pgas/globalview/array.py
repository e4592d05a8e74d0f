"""GlobalArray: a logical global array, sharded over a mesh, with boundary and halo.

A :class:`GlobalArray` is a JAX pytree: its one leaf is the physical
``jax.Array`` (padded where the mesh does not divide a size; see
:mod:`pgas.layout`), its static part the :class:`~pgas.layout.Layout`. It
crosses ``jit``, ``lax.fori_loop`` and ``scan`` like any array.

Indexing gives lazy views (:mod:`pgas.view`); assignment to a slice,
``u[1:-1] = ...``, is lowered to halo exchange plus masked local arithmetic
(:mod:`pgas.lower`). A slice with a step, ``u[::2]``, reads a new array and
``u[1::2] = c`` writes the picked cells (:mod:`pgas.globalview.strided`).
Arrays are built so that each process creates only its own blocks (from NumPy
data or a function of global coordinates); :meth:`GlobalArray.to_numpy`
gathers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from pgas.errors import ConversionError, IndexingError, LayoutError, ShapeMismatchError
from pgas.globalview import strided
from pgas.globalview.lower import assign
from pgas.globalview.view import Leaf, Operators, Window, normalize_index
from pgas.grid.decomposition import Ext
from pgas.grid.layout import Layout, make_layout
from pgas.runtime.capacity import check_fits

__all__ = ["GlobalArray", "from_numpy", "from_function", "zeros", "full", "physical_coords"]


@jax.tree_util.register_pytree_node_class
class GlobalArray(Operators):
    """A global array: physical data on the devices plus its :class:`Layout`.

    Use :func:`from_numpy`, :func:`from_function`, :func:`zeros` or
    :func:`full` to make one. Indexing gives a :class:`pgas.View`; slice
    assignment updates the array in place (NumPy style); ``u.at[k].set(v)``
    returns a new array; arithmetic on the whole array builds a view.

    Attributes:
        data: the ``jax.Array``: the physical array (shape
            ``layout.physical_shape``), or, inside a compiled loop, the blocks
            form extended by ``ext[i]`` halo cells (see :mod:`pgas.lower`).
        layout: the static description (shape, mesh, spec, boundary, halo).
        ext: ``None`` for physical data, else the halo cells kept per axis: an int
            where both sides are equal, else ``(below, above)``
            (:data:`pgas.grid.decomposition.Ext`).
        anchor: inside a compiled loop, a zero that depends on the loop counter:
            masks built from global indices add it, so that XLA computes them
            inside the stencil's fusion instead of hoisting them out of the loop
            as arrays read from memory every step.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.arange(5.0), pgas.make_mesh(devices=1))
    >>> u[1:-1] = 0.5 * (u[:-2] + u[2:])
    >>> u.to_numpy()
    array([0., 1., 2., 3., 4.])
    """

    __slots__ = ("data", "layout", "ext", "anchor")

    def __init__(
        self,
        data: jax.Array,
        layout: Layout,
        ext: Ext | None = None,
        anchor: jax.Array | None = None,
    ):
        self.data = data
        self.layout = layout
        self.ext = ext
        self.anchor = anchor

    # pytree
    def tree_flatten(self):
        return (self.data, self.anchor), (self.layout, self.ext)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux[0], aux[1], children[1])

    # description
    @property
    def shape(self) -> tuple[int, ...]:
        """Logical global shape (leading batch axes of stacked snapshots included)."""
        return tuple(self.data.shape[: self.batch_ndim]) + self.layout.shape

    @property
    def batch_ndim(self) -> int:
        per = self.layout.ndim if self.ext is None else 2 * self.layout.ndim
        return self.data.ndim - per

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

    # views and assignment (pgas.view builds them, pgas.lower compiles them)
    def as_view(self) -> Leaf:
        """The view of every cell (the operators of :class:`pgas.view.Operators` use it)."""
        self._check_unbatched()
        n = self.layout.shape
        return Leaf(self, Window((0,) * len(n), n, (True,) * len(n)))

    def __getitem__(self, key) -> Leaf | GlobalArray:
        self._check_unbatched()
        if strided.is_strided(key):  # u[::2]: a new array (pgas.globalview.strided)
            return strided.take(self, key)
        return Leaf(self, normalize_index(key, self.layout.shape))

    def __setitem__(self, key, value) -> None:
        self._check_unbatched()
        if strided.is_strided(key):  # u[1::2] = c
            self.data = strided.put(self, key, value)
            return
        self.data, self.ext = assign(self, normalize_index(key, self.layout.shape), value)

    @property
    def at(self) -> _At:
        """Functional update: ``u.at[1:-1].set(v)`` returns a new array."""
        return _At(self)

    # ---- conversions, as NumPy's where they make sense ---------------------------------
    def __array__(self, dtype=None, copy=None):
        """``np.asarray(u)``: the gathered global array, as :meth:`to_numpy` (costly: every
        process receives the whole field)."""
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d pgas array")
        return self.shape[0]

    def _one(self, kind: type):
        import math

        if math.prod(self.shape) != 1:
            raise ConversionError(
                f"{kind.__name__}() of a pgas array of shape {self.shape}: only one cell "
                f"converts (as in NumPy); reduce it first, e.g. {kind.__name__}(pgas.max(u))"
            )
        return kind(self.to_numpy().reshape(()))

    def __int__(self) -> int:
        return self._one(int)

    def __float__(self) -> float:
        return self._one(float)

    def copy(self) -> GlobalArray:
        """A new array object sharing this one's (immutable) data."""
        return GlobalArray(self.data, self.layout, self.ext, self.anchor)

    def _check_unbatched(self) -> None:
        if self.batch_ndim:
            raise IndexingError(
                f"this array holds {self.data.shape[0]} stacked snapshots; index a single "
                f"field (use .to_numpy() to read snapshots)"
            )

    def to_numpy(self) -> np.ndarray:
        """Gather the logical global array to a NumPy array (on every process).

        Cost: on one process, a host copy of the field. On several processes this
        is collective (call it on every process) and every process receives the
        whole field: an all-gather that moves ``(P - 1) / P`` of the field into
        each of the ``P`` processes and holds the whole field (plus the gathered
        padded array) in each. Memory per process then no longer falls with the
        process count; a field too large for one node does not fit. For a
        checksum, diagnostics or output use :func:`pgas.io.checksum.checksum`,
        the blocks of :func:`pgas.io.blocks.host_blocks` or a snapshot stream,
        which never gather.

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


class _At:
    __slots__ = ("array",)

    def __init__(self, array: GlobalArray):
        self.array = array

    def __getitem__(self, key) -> _AtIndex:
        return _AtIndex(self.array, key)


class _AtIndex:
    __slots__ = ("array", "key")

    def __init__(self, array: GlobalArray, key):
        self.array, self.key = array, key

    def set(self, value) -> GlobalArray:
        """A new array equal to the old one with ``value`` written in the window."""
        out = self.array.copy()
        out[self.key] = value
        return out


def physical_coords(layout: Layout, index: tuple[slice, ...]) -> tuple[list, list]:
    """Global indices and validity of the physical positions selected by ``index``, per axis."""
    # the selected positions only: an arange of the whole axis would be a field of indices
    pairs = [ax.global_index(np.arange(*sl.indices(ax.padded)))
             for ax, sl in zip(layout.axes, index)]  # fmt: skip
    return [g for g, _ in pairs], [v for _, v in pairs]


_CHUNK = 1 << 16  # stored values built at a time: an init may expand each (64 cells a word)


def fits(layout: Layout, dtype: np.dtype, buffers: int = 1, what: str = "the field") -> None:
    """Refuse a field too large for its devices' memory before it is allocated.

    Raises:
        FieldTooLargeError: see :func:`pgas.runtime.capacity.check_fits`.

    >>> import pgas
    >>> fits(make_layout((2**50,), pgas.make_mesh(devices=1)), np.dtype("float32"))
    Traceback (most recent call last):
    ...
    pgas.errors.FieldTooLargeError: the field (1125899906842624,) (float32) needs 4194304.00 GiB ...
    """
    devices = sorted(layout.sharding.addressable_devices, key=lambda d: d.id)
    check_fits(layout.sharding.shard_shape(layout.physical_shape), dtype, devices,
               buffers=buffers, shape=layout.shape, what=what)  # fmt: skip


def _build(layout: Layout, dtype: np.dtype, block: Callable, chunk: int = _CHUNK) -> GlobalArray:
    """Make the physical array shard by shard; ``block(coords)`` gives a shard's values.

    A shard is filled a slab of rows at a time, so building it holds the shard
    and the temporaries of one slab (about ``_CHUNK`` values), not several
    temporaries of the shard's size.
    """
    fits(layout, dtype)

    def callback(index):
        index = tuple(index) + (slice(None),) * (layout.ndim - len(index))
        first = layout.axes[0]
        coords, valid = physical_coords(layout, (slice(0, 0), *index[1:]))
        start, stop, _ = index[0].indices(first.padded)
        out = np.zeros((stop - start, *(len(c) for c in coords[1:])), dtype)
        rows = max(1, chunk // max(1, math.prod(out.shape[1:])))
        for r0 in range(start, stop, rows):
            g, v = first.global_index(np.arange(r0, min(r0 + rows, stop)))
            ok = [v, *valid[1:]]
            values = np.asarray(block([g, *coords[1:]]), dtype=dtype)
            here = slice(r0 - start, r0 - start + len(g))
            if all(v.all() for v in ok):
                out[here] = values
                continue
            mask = np.ones(values.shape, bool)
            for axis, v in enumerate(ok):
                mask &= v.reshape([-1 if i == axis else 1 for i in range(len(ok))])
            out[here] = np.where(mask, values, np.zeros((), dtype))
        return out

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
    cells_per_value: int = 1,
) -> GlobalArray:
    """Build a global array from a function of global cell indices, block by block.

    ``fn(i)`` (1-D), ``fn(i, j)`` (2-D) or ``fn(i, j, k)`` (3-D) receives NumPy
    integer index arrays (broadcast against each other, ``indexing="ij"``) of
    one block only, so no process ever holds the whole field. ``fn`` is called on
    slabs of about 2**16 / ``cells_per_value`` values: give the cells it computes per
    value (e.g. 64 for bit-packed words) so that its temporaries stay a slab's.

    >>> import numpy as np, pgas
    >>> pgas.from_function(lambda i: 2 * i, (4,), pgas.make_mesh(devices=1)).to_numpy()
    array([0., 2., 4., 6.], dtype=float32)
    """
    layout = make_layout(shape, mesh, spec, boundary, halo)
    dt = _dtype(dtype)

    def block(coords):
        grids = np.meshgrid(*coords, indexing="ij", sparse=True)
        cells, values = tuple(len(c) for c in coords), fn(*grids)
        try:
            return np.broadcast_to(values, cells)
        except ValueError:
            idx = ", ".join("ijk"[: len(cells)])
            raise ShapeMismatchError(
                f"fn returned values of shape {np.shape(values)} for a block of cells of shape "
                f"{cells} (global shape {layout.shape}): fn must compute elementwise on the "
                f"index arrays it gets, e.g. lambda {idx}: np.sin(0.1 * i), giving their "
                f"broadcast shape or one value; for a NumPy array x of the global shape use "
                f"pgas.from_numpy(x, mesh) or lambda {idx}: x[{idx}]"
            ) from None

    return _build(layout, dt, block, max(1, _CHUNK // max(1, int(cells_per_value))))


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
    fits(layout, dt)
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
