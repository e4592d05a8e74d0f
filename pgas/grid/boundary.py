"""Boundary conditions: what lies beyond the edge of a global array.

A boundary condition belongs to the array (per axis and per face), not to the
stencil. It says what a read *beyond the edge* sees, both in the automatic path
(``pgas.shift`` and slices that reach into the halo) and in the explicit paths
(the ghost cells that :func:`pgas.explicit.exchange_halo` and
:func:`pgas.mpi.exchange_halo` fill at the domain edge):

====================  ==========================================  ========================
condition             ghost cell ``-1 - j`` (low face) reads      cells the array keeps
====================  ==========================================  ========================
``Periodic()``        ``u[N - 1 - j]`` (wrap around)              none
``Dirichlet(value)``  ``value``                                   none
``Neumann()``         ``u[j]`` (mirror: zero gradient)            none
``Keep()``            ``u[j]`` (as Neumann; never written)        the outer ``halo`` cells
====================  ==========================================  ========================

``Keep`` is the seed heat equation's semantics: the outermost ``halo`` cells on
that face are boundary cells that no stencil changes (``u[0]`` and ``u[-1]``
never change for a width-1 stencil); an assignment to them alone (``u[0] =
u[1]``) writes them.

A periodic condition must be periodic on both faces of its axis.

Each condition carries its own rules, used alike by the JAX halo code
(:mod:`pgas.globalview.halo`, :mod:`pgas.grid.layout`) and the NumPy/MPI halo
code (:mod:`pgas.references.mpi`): :attr:`~Boundary.periodic` (the face wraps
to the other end), :attr:`~Boundary.keeps` (the outer cells are never
written), :attr:`~Boundary.refreshed` (the ghosts follow the cells next to the
face and change with them, so a deep halo refreshes them between
sub-steps) and
:meth:`~Boundary.ghost` (the ghost cells from the edge cells, written once for
``jax.numpy`` and NumPy). A new condition is one new class here.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from pgas.errors import LayoutError

__all__ = ["Boundary", "Periodic", "Dirichlet", "Neumann", "Keep", "normalize_boundary"]


class Boundary:
    """What a read beyond one face of an axis sees (base class of the conditions).

    Attributes:
        periodic: the face wraps around to the other end of the axis.
        keeps: the outermost ``halo`` cells next to the face are never written.
        refreshed: the ghosts follow cells next to the face that steps write
            (Neumann's mirror), so a deep halo refreshes them between sub-steps.
    """

    periodic: ClassVar[bool] = False
    keeps: ClassVar[bool] = False
    refreshed: ClassVar[bool] = False

    def ghost(self, edge: Any, axis: int, xp: Any) -> Any:
        """The ghost cells beyond the face, from the ``width`` cells next to it.

        Args:
            edge: the cells next to the face (a JAX or NumPy array), the face's
                side of ``axis`` first.
            axis: the array axis that crosses the face.
            xp: ``jax.numpy`` or ``numpy``: one rule for both paths.

        Returns:
            An array shaped like ``edge``: ghost cell ``-1 - j`` is entry ``j``.

        >>> import numpy as np
        >>> Neumann().ghost(np.array([1.0, 2.0]), 0, np), Dirichlet(7.0).ghost(np.ones(2), 0, np)
        (array([2., 1.]), array([7., 7.]))
        """
        return xp.flip(edge, axis=axis)  # mirror: ghost -1-j reads cell j


@dataclasses.dataclass(frozen=True)
class Periodic(Boundary):
    """Wrap around: the cell beyond the high face is the first cell.

    >>> Periodic(), Periodic().periodic
    (Periodic(), True)
    """

    periodic: ClassVar[bool] = True

    def ghost(self, edge: Any, axis: int, xp: Any) -> Any:
        raise LayoutError("a periodic face has no ghost cells of its own: its halo wraps around")


@dataclasses.dataclass(frozen=True)
class Dirichlet(Boundary):
    """A fixed value beyond the face.

    Args:
        value: the value every ghost cell reads (cast to the array's dtype): one real
            number (Python or NumPy). Another value on each face of an axis is a
            ``(low, high)`` pair of conditions, ``(Dirichlet(0.0), Dirichlet(1.0))``.

    Raises:
        LayoutError: ``value`` is not one real number (a string, None, an array, a bool).

    >>> Dirichlet(1.5).value
    1.5
    >>> Dirichlet("a")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pgas.errors.LayoutError: Dirichlet value = 'a' (of type str): give one real number ...
    """

    value: float = 0.0

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            shape = getattr(value, "shape", ())
            shown = f"{value!r:.60}" if shape == () else f"an array of shape {tuple(shape)}"
            raise LayoutError(
                f"Dirichlet value = {shown} (of type {type(value).__name__}): give one real "
                f"number for the whole face, e.g. Dirichlet(0.0) or Dirichlet(float(x)); "
                f"another value on each face is a (low, high) pair, boundary=[(Dirichlet(0.0), "
                f"Dirichlet(1.0))]; a value that varies along a face is not supported"
            )

    def ghost(self, edge: Any, axis: int, xp: Any) -> Any:
        return xp.full_like(edge, self.value)


@dataclasses.dataclass(frozen=True)
class Neumann(Boundary):
    """Zero gradient across the face: ghost cell ``-1 - j`` mirrors cell ``j``.

    >>> Neumann(), Neumann().refreshed
    (Neumann(), True)
    """

    refreshed: ClassVar[bool] = True


@dataclasses.dataclass(frozen=True)
class Keep(Boundary):
    """The outermost ``halo`` cells of the face never change (the seed semantics).

    Its ghosts mirror the edge as Neumann's do, but no written cell reads
    them, so they need no refresh. The cells are kept out of a window wider
    than them (a stencil); a window inside them is written as asked: ``u[0] =
    u[1]`` is a zero-gradient edge written by hand, which may not read the
    ghosts (:func:`pgas.globalview.lower.check_kept_edges`).

    >>> Keep(), Keep().keeps
    (Keep(), True)
    """

    keeps: ClassVar[bool] = True


Faces = tuple[tuple[Boundary, Boundary], ...]


def _is_bc(x: object) -> bool:
    return isinstance(x, Boundary)


def normalize_boundary(boundary: object, ndim: int) -> Faces:
    """Expand a boundary description to one ``(low, high)`` pair per axis.

    Accepted forms: one condition for every face; a sequence with one entry per
    axis, each a condition or a ``(low, high)`` pair.

    Args:
        boundary: the description.
        ndim: number of array dimensions.

    Returns:
        A tuple of ``ndim`` pairs ``(low, high)``.

    Raises:
        LayoutError: on a wrong count, an unknown object, or a periodic face
            paired with a non-periodic one.

    >>> normalize_boundary(Periodic(), 2)
    ((Periodic(), Periodic()), (Periodic(), Periodic()))
    >>> normalize_boundary([Keep(), (Dirichlet(1.0), Neumann())], 2)[1]
    (Dirichlet(value=1.0), Neumann())
    """
    if _is_bc(boundary):
        faces = tuple((boundary, boundary) for _ in range(ndim))
    elif isinstance(boundary, Sequence) and not isinstance(boundary, str):
        if len(boundary) != ndim:
            raise LayoutError(
                f"boundary has {len(boundary)} entries for a {ndim}-D array; "
                f"give one condition, or one entry (condition or (low, high) pair) per axis"
            )
        pairs = []
        for axis, entry in enumerate(boundary):
            if _is_bc(entry):
                pairs.append((entry, entry))
            elif isinstance(entry, Sequence) and len(entry) == 2 and all(_is_bc(e) for e in entry):
                pairs.append((entry[0], entry[1]))
            else:
                raise LayoutError(
                    f"boundary[{axis}] = {entry!r} is not a boundary condition; use "
                    f"pgas.Periodic(), Dirichlet(v), Neumann(), Keep() or a (low, high) pair"
                )
        faces = tuple(pairs)
    else:
        raise LayoutError(
            f"boundary = {boundary!r} is not a boundary condition; use pgas.Periodic(), "
            f"Dirichlet(v), Neumann(), Keep(), or one per axis"
        )
    for axis, (lo, hi) in enumerate(faces):
        if lo.periodic != hi.periodic:
            raise LayoutError(
                f"boundary on axis {axis} is ({lo!r}, {hi!r}): a periodic face needs a "
                f"periodic partner; make both faces Periodic() or neither"
            )
    return faces
