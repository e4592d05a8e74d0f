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
    "ConversionError",
    "FieldTooLargeError",
    "whole_number",
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


class ConversionError(PgasError, TypeError):
    """A pgas array or expression used where Python wants one value (``bool``, ``int``,
    ``float``), as JAX's ``TracerBoolConversionError``: the answer would be silently wrong."""


class FieldTooLargeError(PgasError, MemoryError):
    """A field whose blocks cannot fit in its devices' memory, refused before it is
    allocated (:func:`pgas.runtime.capacity.check_fits`); ``except MemoryError`` catches it."""


def whole_number(name: str, value: object, least: int = 0) -> int:
    """``value`` as an int if it is integral (``operator.index``: Python and NumPy integers),
    else a :class:`PgasError` naming ``name``; bools are refused (``True`` is not a count).

    >>> import numpy as np
    >>> whole_number("steps", np.int64(5))
    5
    >>> whole_number("steps", True)
    Traceback (most recent call last):
    ...
    pgas.errors.PgasError: steps = True: give a whole number >= 0, not a bool
    """
    import operator

    kind = type(value).__name__
    if isinstance(value, bool) or kind == "bool_":
        raise PgasError(f"{name} = {value!r}: give a whole number >= {least}, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise PgasError(
            f"{name} = {value!r}: give a whole number >= {least} (an int or a NumPy integer, "
            f"not a {kind})"
        ) from None
    if number < least:
        raise PgasError(f"{name} = {value!r}: give a whole number >= {least}")
    return number
