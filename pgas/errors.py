"""Named exceptions of pgas.

Every error names the parameter, the value it got and the fix, e.g.
``MeshError: axis 'data' is not in the mesh: mesh has axes ('x',); name one of them``.
All derive from :class:`PgasError` (a ``ValueError``), so ``except ValueError``
still catches them.
"""

from __future__ import annotations

__all__ = [
    "PgasError",
    "MeshError",
    "LayoutError",
    "HaloError",
    "FrameError",
    "IndexingError",
    "ShapeMismatchError",
    "DTypeMismatchError",
    "DeviceCountError",
]


class PgasError(ValueError):
    """Base class of every error pgas raises for a bad input."""


class MeshError(PgasError):
    """A mesh axis name or mesh shape that does not fit the devices or the array."""


class LayoutError(PgasError):
    """An array shape, sharding spec or boundary description that cannot be laid out."""


class HaloError(PgasError):
    """A halo wider than a local block, or a stencil that needs a wider halo than declared."""


class FrameError(HaloError):
    """A step that deep-halo frames cannot hold (:func:`pgas.plan.plan` then lowers ``k``)."""


class IndexingError(PgasError):
    """An index that cannot be lowered to a halo exchange (step, dynamic bound, fancy index)."""


class ShapeMismatchError(PgasError):
    """Two views combined or assigned with different shapes."""


class DTypeMismatchError(PgasError):
    """A value assigned to an array whose dtype cannot hold it without loss."""


class DeviceCountError(PgasError):
    """More devices requested than exist, or JAX already started with another count."""
