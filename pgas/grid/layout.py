"""Layout: how a logical global array lies on a device mesh.

A :class:`Layout` is the static description of a global array: its logical
shape (what the user sees), the mesh, which mesh axis each array axis is split
over (or ``None`` for replicated), the boundary condition of every face and the
declared halo width. It is hashable and travels through ``jit`` as the static
part of a :class:`pgas.GlobalArray`.

Physically every split axis is stored as ``parts`` equal blocks of
``BlockAxis.block`` cells (see :mod:`pgas.decomposition`); the array's
``jax.Array`` has the *physical* shape and the layout's sharding. In the
*blocks* form an n-D physical array is reshaped to ``(D0, b0, D1, b1, ...)``:
axis ``2i`` indexes the blocks of array axis ``i`` (and carries the mesh axis),
axis ``2i + 1`` the cells inside a block. Halo exchange and masks work on the
blocks form; the reshape is free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pgas.errors import HaloError, LayoutError, MeshError
from pgas.grid.boundary import Faces, Periodic, normalize_boundary
from pgas.grid.decomposition import BlockAxis, Ext, ext_sides

__all__ = ["Layout", "make_layout"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Static description of a global array on a mesh.

    Attributes:
        shape: logical global shape.
        mesh: the device mesh.
        spec: per array axis, the mesh axis name it is split over, or ``None``.
        boundary: ``(low, high)`` boundary condition per axis.
        halo: declared halo width per axis (``None``: inferred from the stencil).

    >>> import pgas
    >>> lay = make_layout((10,), pgas.make_mesh(("x",), devices=1))
    >>> lay.physical_shape, lay.spec
    ((10,), ('x',))
    """

    shape: tuple[int, ...]
    mesh: Mesh
    spec: tuple[str | None, ...]
    boundary: Faces
    halo: tuple[int | None, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def axes(self) -> tuple[BlockAxis, ...]:
        """Block distribution of every array axis."""
        return tuple(
            BlockAxis(n, 1 if s is None else self.mesh.shape[s])
            for n, s in zip(self.shape, self.spec)
        )

    @property
    def physical_shape(self) -> tuple[int, ...]:
        return tuple(a.padded for a in self.axes)

    @property
    def blocks_shape(self) -> tuple[int, ...]:
        return tuple(x for a in self.axes for x in (a.parts, a.block))

    @property
    def even(self) -> bool:
        """True when no axis carries padding."""
        return all(a.even for a in self.axes)

    @property
    def sharding(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec(*self.spec))

    @property
    def blocks_sharding(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec(*(x for s in self.spec for x in (s, None))))

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Physical shape of one device's block."""
        return tuple(a.block for a in self.axes)

    def periodic(self, axis: int) -> bool:
        return self.boundary[axis][0].periodic

    def same_grid(self, other: Layout) -> bool:
        """True when both arrays split the same shape the same way over the same mesh."""
        return (self.shape, self.mesh, self.spec) == (other.shape, other.mesh, other.spec)

    def check_halo(self, axis: int, width: int) -> None:
        """Raise :class:`HaloError` unless a halo of ``width`` fits every block of ``axis``."""
        declared = self.halo[axis]
        if declared is not None and width > declared:
            raise HaloError(
                f"the stencil reads {width} cell(s) across axis {axis}, but the array declares "
                f"halo={declared} there; declare halo={width} (or more) when creating the array"
            )
        ax = self.axes[axis]
        if width > ax.min_length:
            raise HaloError(
                f"halo width {width} on axis {axis} is wider than the smallest local block "
                f"({ax.min_length} of {ax.size} cells over {ax.parts} part(s)); use fewer "
                f"devices on mesh axis {self.spec[axis]!r}, a larger array, or a narrower stencil"
            )

    # ---- physical <-> blocks ---------------------------------------------------------
    def to_blocks(self, data: jax.Array) -> jax.Array:
        blocks = data.reshape(self.blocks_shape)
        if self.mesh.size > 1:
            blocks = jax.lax.with_sharding_constraint(blocks, self.blocks_sharding)
        return blocks

    def from_blocks(self, blocks: jax.Array) -> jax.Array:
        data = blocks.reshape(self.physical_shape)
        if self.mesh.size > 1:
            data = jax.lax.with_sharding_constraint(data, self.sharding)
        return data

    def extended_shape(self, ext: Ext) -> tuple[int, ...]:
        """Blocks-form shape with ``ext[i]`` extra cells around every block (per side)."""
        return tuple(x for a, (lo, hi) in zip(self.axes, ext_sides(ext))
                     for x in (a.parts, a.block + lo + hi))  # fmt: skip

    def block_iota(self, axis: int) -> jax.Array:
        """Block number along ``axis``, broadcastable against the blocks form."""
        shape = [1] * (2 * self.ndim)
        shape[2 * axis] = self.axes[axis].parts
        return jax.lax.broadcasted_iota(jnp.int32, shape, 2 * axis)

    def cell_iota(self, axis: int, ext: tuple[int, int] = (0, 0),
                  anchor: jax.Array | None = None) -> jax.Array:  # fmt: skip
        """Cell number inside a block along ``axis`` extended by ``ext = (below, above)``
        (``-below`` for the first halo cell).

        ``anchor`` (a traced zero, see :class:`pgas.GlobalArray`) is added to it.
        """
        below, above = ext
        shape = [1] * (2 * self.ndim)
        shape[2 * axis + 1] = self.axes[axis].block + below + above
        iota = jax.lax.broadcasted_iota(jnp.int32, shape, 2 * axis + 1)
        return iota - below if anchor is None else iota + (anchor - below)

    def global_index(
        self,
        axis: int,
        block: jax.Array | None = None,
        ext: tuple[int, int] = (0, 0),
        anchor: jax.Array | None = None,
    ) -> jax.Array:
        """Global (logical) index of every cell along ``axis``, in the blocks form.

        ``block`` gives the block number (default: every block, as an iota; the
        explicit path passes its own block number from ``lax.axis_index``);
        ``ext`` is the extension ``(below, above)`` the blocks carry (halo cells get
        the indices of the cells they copy, below 0 or from N beyond the domain edges).
        """
        ax = self.axes[axis]
        b = self.block_iota(axis) if block is None else block
        return b * ax.base + jnp.minimum(b, ax.extra) + self.cell_iota(axis, ext, anchor)

    def valid(self, axis: int, block: jax.Array | None = None) -> jax.Array | None:
        """Mask of real (non-padding) cells along ``axis``, or None when there is no padding."""
        ax = self.axes[axis]
        if ax.even:
            return None
        b = self.block_iota(axis) if block is None else block
        return self.cell_iota(axis) < ax.base + (b < ax.extra)

    def window_mask(
        self,
        start: Sequence[int],
        extent: Sequence[int],
        widths: Sequence[int],
        block: Sequence[jax.Array] | None = None,
        ext: Ext | None = None,
        anchor: jax.Array | None = None,
        edges: bool = False,
    ) -> jax.Array | None:
        """Cells a write to the window ``[start, start + extent)`` may change.

        Excludes padding and, on a ``Keep`` face, the outer
        ``max(declared halo, widths[axis])`` cells; with ``edges`` (the global
        view's assignments, :func:`pgas.globalview.lower.write`), not from a
        window that lies inside those cells: an edge written by hand, ``u[0] =
        u[1]``, is written. With ``ext`` (blocks
        extended by ``ext[i]`` cells per side, :data:`pgas.grid.decomposition.Ext`)
        halo cells are judged by the global cell they copy (modulo the size on a
        periodic axis) and cells beyond a non-periodic domain edge are never
        written. ``None`` means every cell.
        """
        mask = None
        sides = ext_sides(ext) if ext is not None else ((0, 0),) * self.ndim
        for axis, (lo, e, ax) in enumerate(zip(start, extent, self.axes)):
            hi = lo + e
            keep = max(self.halo[axis] or 0, widths[axis])
            low_bc, high_bc = self.boundary[axis]
            at_low, at_high = edges and hi <= keep, edges and lo >= ax.size - keep
            if low_bc.keeps and not at_low:
                lo = max(lo, keep)
            if high_bc.keeps and not at_high:
                hi = min(hi, ax.size - keep)
            b = None if block is None else block[axis]
            x = sides[axis]
            terms = [] if (ax.even or any(x)) else [self.valid(axis, b)]
            ghosts = any(x) and not low_bc.periodic  # never written
            if lo > 0 or hi < ax.size or ghosts:
                g = self.global_index(axis, b, x, anchor)
                if any(x) and low_bc.periodic:
                    g = g % ax.size
                terms += [g >= lo] if lo > 0 or ghosts else []
                terms += [g < hi] if hi < ax.size or ghosts else []
            for t in terms:
                mask = t if mask is None else mask & t
        return mask


def _default_spec(ndim: int, mesh: Mesh) -> tuple[str | None, ...]:
    names = tuple(mesh.axis_names)
    return tuple(names[i] if i < len(names) else None for i in range(ndim))


def make_layout(
    shape: Sequence[int],
    mesh: Mesh,
    spec: Sequence[str | None] | None = None,
    boundary: object = None,
    halo: int | Sequence[int | None] | None = None,
) -> Layout:
    """Check and build a :class:`Layout`.

    Args:
        shape: logical global shape (1-D to 3-D, every size >= 1).
        mesh: the device mesh.
        spec: mesh axis name (or None) per array axis; default: array axis i on
            mesh axis i.
        boundary: see :func:`pgas.boundary.normalize_boundary`; default periodic.
        halo: declared halo width (one int for all axes, or one per axis).

    Raises:
        LayoutError, MeshError: with the parameter, the value and the fix.

    >>> import pgas
    >>> make_layout((6, 4), pgas.make_mesh(("x",), devices=1)).spec
    ('x', None)
    """
    shape = tuple(int(n) for n in (shape if isinstance(shape, Sequence) else (shape,)))
    if not 1 <= len(shape) <= 3:
        raise LayoutError(f"shape = {shape}: pgas arrays have 1 to 3 dimensions")
    if any(n < 1 for n in shape):
        raise LayoutError(f"shape = {shape}: every size must be >= 1")
    if spec is None:
        spec = _default_spec(len(shape), mesh)
    elif isinstance(spec, PartitionSpec):
        spec = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    spec = tuple(spec)
    if len(spec) != len(shape):
        raise LayoutError(
            f"spec = {spec} has {len(spec)} entries for a {len(shape)}-D array; "
            f"give one mesh axis name (or None) per array axis"
        )
    used = [s for s in spec if s is not None]
    for s in used:
        if not isinstance(s, str):
            raise MeshError(
                f"spec entry {s!r}: split an array axis over one mesh axis, named by a string"
            )
        if s not in mesh.axis_names:
            raise MeshError(
                f"spec names mesh axis {s!r}, but the mesh has axes {tuple(mesh.axis_names)}; "
                f"use one of those names (or None to replicate the array axis)"
            )
    if len(set(used)) != len(used):
        raise MeshError(
            f"spec = {spec} uses a mesh axis twice; split each array axis over its own mesh axis"
        )
    if boundary is None:
        boundary = Periodic()
    faces = normalize_boundary(boundary, len(shape))
    if halo is None or isinstance(halo, (int, np.integer)):
        halo = (halo,) * len(shape)
    halo = tuple(None if h is None else int(h) for h in halo)
    if len(halo) != len(shape) or any(h is not None and h < 0 for h in halo):
        raise LayoutError(f"halo = {halo}: give one width >= 0 (or None) per axis, or a single int")
    layout = Layout(shape, mesh, spec, faces, halo)
    for axis, ax in enumerate(layout.axes):
        if ax.size < ax.parts:
            raise LayoutError(
                f"axis {axis} has {ax.size} cells but mesh axis {spec[axis]!r} has {ax.parts} "
                f"devices; every device needs at least one cell: use fewer devices or a larger "
                f"array"
            )
        if halo[axis]:
            layout.check_halo(axis, halo[axis])
    return layout
