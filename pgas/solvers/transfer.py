"""Grid transfers of geometric multigrid: the level hierarchy, restriction and prolongation.

Every level lives on the same devices as the finest, each coarse field laid out
in the block distribution of its own size (strided slices,
:mod:`pgas.globalview.strided`): a restriction is a local weighted sum (one
halo exchange) and a strided read, a prolongation strided writes, each moving
only the cells that change block. :func:`hierarchy` halves while every device
keeps at least two cells; below that the levels are replicated, every device
holding the whole coarse field (:func:`halves_alone`, :mod:`pgas.solvers.cycle`).

Both transfers work axis by axis (a tensor product), each axis by its grid
(:func:`pgas.solvers.fields.grid_kinds`); restriction is prolongation's
transpose divided by 2 per axis, so a V-cycle with as many sweeps before as
after is a symmetric operator (a preconditioner for CG):

- keep and periodic grids: prolongation ``f[2i] = c[i]`` and
  ``f[2i+1] = (c[i] + c[i+1]) / 2``; restriction
  ``(f[2i-1] + 2 f[2i] + f[2i+1]) / 4``;
- neumann grids: prolongation ``f[2i] = (3 c[i] + c[i-1]) / 4`` and
  ``f[2i+1] = (3 c[i] + c[i+1]) / 4``; restriction
  ``(f[2i-1] + 3 f[2i] + 3 f[2i+1] + f[2i+2]) / 8``.

Cells beyond an edge are read through the field's boundary (periodic wraps,
Neumann mirrors). Along a Keep axis its edge cells are carried as they are (the
residuals are zero there; a coefficient's boundary values are picked); the weighted
sums along the other axes include them.
"""

from __future__ import annotations

from pgas.globalview.array import GlobalArray
from pgas.globalview.strided import take
from pgas.globalview.view import shift
from pgas.grid.layout import Layout
from pgas.grid.strides import coarse_layout, parse
from pgas.solvers import fields

__all__ = ["hierarchy", "halves_alone", "restrict", "prolong"]

_HALF = slice(None, None, 2)
_ALL = slice(None)


def _halves(kind: str, n: int, parts: int) -> int | None:
    """The coarse size of an axis of ``n`` cells on ``parts`` devices, ``None``: stop."""
    if kind == "keep":
        coarse = (n - 1) // 2 + 1 if n % 2 == 1 and n >= 5 else None
    else:
        coarse = n // 2 if n % 2 == 0 and n >= 4 else None
    return coarse if coarse is not None and coarse >= 2 * parts else None


def halves_alone(layout: Layout) -> bool:
    """Whether the grid of ``layout`` would halve again on one device (it stopped on a split
    axis that would keep fewer than two cells per device): its coarser levels then run on
    every device, replicated (:mod:`pgas.solvers.cycle`).

    >>> import pgas
    >>> halves_alone(pgas.zeros((9, 9), pgas.make_mesh(("y", "x"), devices=8),
    ...                         boundary=pgas.Keep()).layout)
    True
    """
    kinds = fields.grid_kinds(layout)
    split = any(a.parts > 1 for a in layout.axes)
    return split and all(_halves(k, a.size, 1) is not None for k, a in zip(kinds, layout.axes))


def hierarchy(layout: Layout, most: int | None = None) -> tuple[Layout, ...]:
    """The levels' layouts, finest first: every axis halves per level while it can.

    >>> import pgas
    >>> lay = pgas.zeros((17, 16), pgas.make_mesh(("y", "x"), devices=2),
    ...                  boundary=(pgas.Keep(), pgas.Periodic())).layout
    >>> [level.shape for level in hierarchy(lay)]
    [(17, 16), (9, 8), (5, 4)]
    """
    kinds = fields.grid_kinds(layout)
    levels = [layout]
    while most is None or len(levels) < most:
        lay = levels[-1]
        if any(_halves(k, a.size, a.parts) is None for k, a in zip(kinds, lay.axes)):
            break
        levels.append(coarse_layout(lay, parse((_HALF,) * lay.ndim, lay.shape)))
    return tuple(levels)


def _along(axis: int, ndim: int, key: slice, other: slice = _ALL) -> tuple[slice, ...]:
    return tuple(key if a == axis else other for a in range(ndim))


def restrict(f: GlobalArray) -> GlobalArray:
    """The next coarser level's field: the weighted sums of the table, on the unknowns
    (edge cells of ``Keep`` faces are carried as they are: boundary values)."""
    kinds = fields.grid_kinds(f.layout)
    for axis, kind in enumerate(kinds):
        t = f.copy()
        if kind == "keep":
            sl = _along(axis, f.ndim, slice(1, -1))
            c = f[sl]
            t[sl] = (shift(c, 1, axis) + 2 * c + shift(c, -1, axis)) * 0.25
        elif kind == "periodic":
            t[...] = (shift(f, 1, axis) + 2 * f + shift(f, -1, axis)) * 0.25
        else:
            t[...] = (shift(f, 1, axis) + 3 * f + 3 * shift(f, -1, axis)
                      + shift(f, -2, axis)) * 0.125  # fmt: skip
        f = take(t, _along(axis, f.ndim, _HALF))
    return f


def prolong(c: GlobalArray, fine: Layout) -> GlobalArray:
    """The coarse field ``c`` interpolated to the layout ``fine`` (the table), zero on the
    edge cells of ``Keep`` faces."""
    kinds = fields.grid_kinds(fine)
    ndim = fine.ndim
    for axis, kind in enumerate(kinds):
        picks = tuple(_ALL if a <= axis else _HALF for a in range(ndim))
        target = fine if axis == ndim - 1 else coarse_layout(fine, parse(picks, fine.shape))
        out = fields.zeros(target, c.dtype)
        even, odd = _along(axis, ndim, _HALF), _along(axis, ndim, slice(1, None, 2))
        if kind == "keep":
            out[even] = c
            out[odd] = 0.5 * (c[_along(axis, ndim, slice(None, -1))]
                              + c[_along(axis, ndim, slice(1, None))])  # fmt: skip
        elif kind == "periodic":
            out[even] = c
            out[odd] = 0.5 * (c + shift(c, -1, axis))
        else:
            out[even] = 0.75 * c + 0.25 * shift(c, 1, axis)
            out[odd] = 0.75 * c + 0.25 * shift(c, -1, axis)
        c = out
    return c


def restrict_coefficient(a: GlobalArray | None) -> GlobalArray | None:
    """The coefficient one level coarser (the same weighted sums; ``None`` stays)."""
    return None if a is None else restrict(a)
