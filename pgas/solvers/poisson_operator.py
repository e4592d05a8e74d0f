"""The Poisson operator ``-div(a grad u)`` in the global view: 5 points in 2-D, 7 in 3-D.

:class:`Poisson` is the operator ``A u = -sum_axes d/dx (a du/dx)`` on a
field's grid, in its boundary conditions, written with halo-aware slices and
shifts: applying it costs one halo exchange of one cell. With ``coefficient =
None`` (``a = 1``) it is the Laplacian's negative, ``(2 u_i - u_{i-1} -
u_{i+1}) / h**2`` summed over the axes; with a coefficient field ``a`` the face
between cells ``i`` and ``i + 1`` carries ``(a_i + a_{i+1}) / 2``.

Grids, per axis, from the field's boundary conditions (both faces alike):

==============  =====================  =====================================
faces           unknowns               grid
==============  =====================  =====================================
``Keep``        cells ``1 .. n - 2``   vertex-centred; the edge cells hold the
                                       Dirichlet values; ``n = 2**L + 1``
``Periodic``    all ``n``              vertex-centred, period ``n = 2**L m``
``Neumann``     all ``n``              cell-centred, mirrored about the face
                                       (zero flux); ``n = 2**L m``
==============  =====================  =====================================

The operator is symmetric over the unknowns, positive definite unless every
axis is periodic or Neumann: then constants are its null space
(:attr:`Poisson.singular`), and solves project it out.

A :class:`Poisson` is a pytree (the coefficient field its leaf), so it crosses
``jax.jit`` and a new coefficient reuses the compiled solve. It carries the
multigrid settings too (:mod:`pgas.solvers.multigrid`): the smoother's sweeps
and the number of levels.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.view import shift
from pgas.grid.layout import Layout
from pgas.solvers import cycle, fields

__all__ = ["Poisson"]


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True, eq=False)
class Poisson:
    """The operator ``A u = -div(a grad u)`` (module docstring), and how multigrid solves it.

    Call it on a field: ``Poisson(h=0.1)(u)`` is ``A u``, zero on the boundary
    cells of ``Keep`` faces.

    Attributes:
        h: the grid spacing, one for every axis or one per axis.
        coefficient: the field ``a`` (a GlobalArray of the solved field's layout), or
            ``None`` for ``a = 1``.
        sweeps: weighted-Jacobi sweeps before and after the coarse correction of a
            multigrid cycle.
        levels: the most multigrid levels (``None``: coarsen while every axis halves
            and keeps at least two cells per device).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.array([0.0, 1.0, 4.0, 9.0, 0.0]), pgas.make_mesh(devices=1),
    ...                     boundary=pgas.Keep())
    >>> Poisson(h=1.0)(u).to_numpy()
    array([ 0., -2., -2., 14.,  0.])
    """

    h: float | tuple[float, ...] = 1.0
    coefficient: GlobalArray | None = None
    sweeps: tuple[int, int] = (2, 2)
    levels: int | None = None

    def __post_init__(self):
        pre, post = self.sweeps
        if min(pre, post) < 0 or pre + post < 1:
            raise PgasError(f"sweeps = {self.sweeps!r}: give (pre, post) whole numbers >= 0, "
                            f"at least one sweep in all, e.g. (2, 2)")  # fmt: skip
        if self.levels is not None and self.levels < 1:
            raise PgasError(f"levels = {self.levels!r}: give a whole number >= 1, or None")
        hs = self.h if isinstance(self.h, Sequence) else (self.h,)
        if not all(isinstance(x, (int, float)) and x > 0 for x in hs):
            raise PgasError(f"h = {self.h!r}: give the grid spacing, a number > 0 (or one "
                            f"per axis)")  # fmt: skip

    def tree_flatten(self):
        return (self.coefficient,), (self.h, self.sweeps, self.levels)

    @classmethod
    def tree_unflatten(cls, aux, children):
        out = object.__new__(cls)
        for name, value in zip(("h", "sweeps", "levels"), aux):
            object.__setattr__(out, name, value)
        object.__setattr__(out, "coefficient", children[0])
        return out

    #: the operator is symmetric over the unknowns (CG need not test it)
    symmetric = True

    @property
    def vcycle_symmetric(self) -> bool:
        """Whether :meth:`vcycle` is symmetric: as many sweeps before as after."""
        return self.sweeps[0] == self.sweeps[1]

    def spacing(self, ndim: int) -> tuple[float, ...]:
        """``h`` per axis."""
        hs = tuple(self.h) if isinstance(self.h, Sequence) else (self.h,) * ndim
        if len(hs) != ndim:
            raise PgasError(f"h = {self.h!r} gives {len(hs)} spacings for a {ndim}-D field: "
                            f"give one number, or one per axis")  # fmt: skip
        return tuple(float(x) for x in hs)

    def singular(self, layout: Layout) -> bool:
        """Whether constants are in the null space (no axis with ``Keep`` faces)."""
        return "keep" not in fields.grid_kinds(layout)

    def check(self, u: GlobalArray) -> None:
        """Raise a clear error where ``u`` cannot be solved for by this operator."""
        if not isinstance(u, GlobalArray):
            raise PgasError(f"the field is a {type(u).__name__}: give a pgas.GlobalArray")
        fields.grid_kinds(u.layout)
        self.spacing(u.ndim)
        a = self.coefficient
        if a is not None and (not isinstance(a, GlobalArray) or a.layout != u.layout):
            raise PgasError(
                f"coefficient has {getattr(a, 'layout', type(a).__name__)}, the field "
                f"{u.layout}: give the coefficient as a GlobalArray of the field's layout "
                f"(the same shape, mesh, spec and boundary)"
            )

    def __call__(self, u: GlobalArray) -> GlobalArray:
        out = fields.zeros(u.layout, u.dtype)
        idx = fields.unknowns(u.layout)
        out[idx] = self.stencil(u)
        return out

    def stencil(self, u: GlobalArray):
        """``A u`` on the unknowns, as an expression (a View)."""
        idx = fields.unknowns(u.layout)
        c = u[idx]
        total = None
        for axis, h in enumerate(self.spacing(u.ndim)):
            below, above = shift(c, 1, axis), shift(c, -1, axis)
            if self.coefficient is None:
                term = (2 * c - below - above) * (1.0 / (h * h))
            else:
                a = self.coefficient[idx]
                a_below, a_above = shift(a, 1, axis), shift(a, -1, axis)
                term = ((a + a_above) * (c - above) + (a + a_below) * (c - below)) * (
                    0.5 / (h * h))  # fmt: skip
            total = term if total is None else total + term
        return total

    def diagonal(self, u: GlobalArray) -> Any:
        """The diagonal of ``A`` on the unknowns: a number, or an expression of ``a``."""
        hs = self.spacing(u.ndim)
        if self.coefficient is None:
            return sum(2.0 / (h * h) for h in hs)
        idx = fields.unknowns(u.layout)
        a = self.coefficient[idx]
        total = None
        for axis, h in enumerate(hs):
            term = (2 * a + shift(a, 1, axis) + shift(a, -1, axis)) * (0.5 / (h * h))
            total = term if total is None else total + term
        return total

    def vcycle(self, r: GlobalArray) -> GlobalArray:
        """One multigrid V-cycle from zero on ``A e = r``: an approximate ``A^-1 r``, linear
        and (with as many sweeps before as after) symmetric: a preconditioner for
        :func:`pgas.solvers.cg` (``M=op.vcycle``; :mod:`pgas.solvers.cycle`)."""
        return self.vcycle_on(r.layout)(r)

    def vcycle_on(self, layout) -> Callable[[GlobalArray], GlobalArray]:
        """:meth:`vcycle` for fields of ``layout``, its hierarchy built once (the coarse
        coefficients restricted here, not at every call: :func:`pgas.solvers.cg` prepares
        ``M=op.vcycle`` this way before its loop)."""
        return functools.partial(cycle.vcycle, cycle.operators(self, layout))

    def coarse(self, coefficient: GlobalArray | None) -> Poisson:
        """The operator one level coarser: twice the spacing, the restricted coefficient."""
        hs = self.h if isinstance(self.h, Sequence) else (self.h,)
        h = tuple(2 * x for x in hs) if isinstance(self.h, Sequence) else 2 * hs[0]
        return dataclasses.replace(self, h=h, coefficient=coefficient)
