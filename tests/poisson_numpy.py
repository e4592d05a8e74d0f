"""NumPy references for pgas.solvers: the Poisson operator, its dense matrix, a direct solve
and the multigrid transfers, written from their definitions (pgas/solvers/poisson_operator.py and
transfer.py's tables), one axis at a time."""

from __future__ import annotations

import numpy as np

PAD = {"periodic": "wrap", "neumann": "symmetric"}


def unknowns(kinds) -> tuple[slice, ...]:
    return tuple(slice(1, -1) if k == "keep" else slice(None) for k in kinds)


def _padded(u: np.ndarray, kinds) -> np.ndarray:
    """``u`` with one ghost cell per side on periodic and Neumann axes (Keep: its own cells)."""
    for axis, k in enumerate(kinds):
        if k != "keep":
            w = [(0, 0)] * u.ndim
            w[axis] = (1, 1)
            u = np.pad(u, w, mode=PAD[k])
    return u


def apply(u: np.ndarray, kinds, h, a: np.ndarray | None = None) -> np.ndarray:
    """``A u`` on the unknowns (zero on Keep faces): ``-div(a grad u)``, faces ``(a_i +
    a_{i+1}) / 2``."""
    hs = (h,) * u.ndim if np.isscalar(h) else tuple(h)
    up = _padded(u, kinds)
    ap = _padded(np.ones_like(u) if a is None else a, kinds)
    out = np.zeros_like(u)
    inner = tuple(slice(1, -1) for _ in kinds)  # the unknowns of the padded arrays
    total = 0
    for axis, hh in enumerate(hs):

        def at(x, d):
            sl = list(inner)
            sl[axis] = slice(1 + d, x.shape[axis] - 1 + d)
            return x[tuple(sl)]

        c, lo, hi = at(up, 0), at(up, -1), at(up, 1)
        if a is None:
            total = total + (2 * c - lo - hi) * (1.0 / (hh * hh))
        else:
            ac, alo, ahi = at(ap, 0), at(ap, -1), at(ap, 1)
            total = total + ((ac + ahi) * (c - hi) + (ac + alo) * (c - lo)) * (0.5 / (hh * hh))
    out[unknowns(kinds)] = total
    return out


def matrix(shape, kinds, h, a=None) -> np.ndarray:
    """The dense matrix of :func:`apply` over the unknowns."""
    idx = unknowns(kinds)
    cells = np.zeros(shape)[idx].size
    cols = []
    for j in range(cells):
        e = np.zeros(shape)
        sub = np.zeros(cells)
        sub[j] = 1
        e[idx] = sub.reshape(np.zeros(shape)[idx].shape)
        cols.append(apply(e, kinds, h, a)[idx].ravel())
    return np.array(cols).T


def solve(b: np.ndarray, kinds, h, a=None, x0: np.ndarray | None = None) -> np.ndarray:
    """The exact solution of ``A x = b`` on the unknowns, ``x0``'s values on Keep faces
    (singular: the least-squares solution of mean zero, plus ``x0``'s mean)."""
    x0 = np.zeros_like(b) if x0 is None else x0
    idx = unknowns(kinds)
    lift = x0.copy()
    lift[idx] = 0
    rhs = (b - apply(lift, kinds, h, a))[idx].ravel()
    m = matrix(b.shape, kinds, h, a)
    if "keep" in kinds:
        e = np.linalg.solve(m, rhs)
    else:
        e = np.linalg.lstsq(m, rhs - rhs.mean(), rcond=None)[0]
        e = e - e.mean() + x0.mean()
    out = lift.copy()
    out[idx] = e.reshape(b[idx].shape)
    return out


def edges(shape, kinds) -> np.ndarray:
    """The boundary cells of Keep faces (of every axis)."""
    out = np.ones(shape, bool)
    out[unknowns(kinds)] = False
    return out


def restrict(f: np.ndarray, kinds) -> np.ndarray:
    """One level coarser, axis by axis; along a Keep axis its edge cells are carried (picked
    unsmoothed), as pgas's ``t[1:-1] = ...`` leaves them."""
    for axis, k in enumerate(kinds):
        f = restrict_axis(f, axis, k)
    return f


def prolong(c: np.ndarray, kinds, shape) -> np.ndarray:
    for axis, k in enumerate(kinds):
        c = prolong_axis(c, axis, k, shape[axis])
    c[edges(c.shape, kinds)] = 0.0
    return c


def diagonal(shape, kinds, h, a=None) -> np.ndarray:
    """A's diagonal on every cell (the formula pgas smooths with: 2 / h**2 per axis, or the
    coefficient's faces)."""
    hs = (h,) * len(shape) if np.isscalar(h) else tuple(h)
    if a is None:
        return np.full(shape, sum(2.0 / (x * x) for x in hs))
    ap = _padded(a, kinds)
    total = 0
    inner = tuple(slice(1, -1) for _ in kinds)
    for axis, hh in enumerate(hs):

        def at(x, d):
            sl = list(inner)
            sl[axis] = slice(1 + d, x.shape[axis] - 1 + d)
            return x[tuple(sl)]

        total = total + (2 * at(ap, 0) + at(ap, -1) + at(ap, 1)) * (0.5 / (hh * hh))
    out = np.ones(shape)
    out[unknowns(kinds)] = total
    return out


def vcycle(r, kinds, h, a, levels, sweeps=(2, 2)):
    """One V-cycle from zero (pgas/solvers/cycle.py's, with an exact coarsest solve)."""
    singular = "keep" not in kinds
    idx = unknowns(kinds)
    if levels == 1:
        return solve(r - r.mean() if singular else r, kinds, h, a)
    weight = 2 * r.ndim / (2 * r.ndim + 1)
    diag = diagonal(r.shape, kinds, h, a)
    e = np.zeros_like(r)
    for i in range(sweeps[0]):
        if i == 0:
            e[idx] = (weight * r / diag)[idx]
        else:
            e[idx] = (e + weight * (r - apply(e, kinds, h, a)) / diag)[idx]
    res = np.zeros_like(r)
    res[idx] = (r - apply(e, kinds, h, a))[idx]
    rc = restrict(res, kinds)
    if singular:
        rc = rc - rc.mean()
    hs = 2 * h if np.isscalar(h) else tuple(2 * x for x in h)
    ac = None if a is None else restrict(a, kinds)
    ec = vcycle(rc, kinds, hs, ac, levels - 1, sweeps)
    e[idx] = (e + prolong(ec, kinds, r.shape))[idx]
    for _ in range(sweeps[1]):
        e[idx] = (e + weight * (r - apply(e, kinds, h, a)) / diag)[idx]
    return e


def residual_history(b, kinds, h, a, levels, cycles, sweeps=(2, 2)) -> list[float]:
    """||b - A x|| / ||b|| after each of ``cycles`` V-cycles from zero."""
    idx = unknowns(kinds)
    x = np.zeros_like(b)
    r = np.zeros_like(b)
    r[idx] = b[idx]
    norm = np.linalg.norm(b[idx])
    out = []
    for _ in range(cycles):
        x[idx] = (x + vcycle(r, kinds, h, a, levels, sweeps))[idx]
        r[idx] = (b - apply(x, kinds, h, a))[idx]
        out.append(np.linalg.norm(r[idx]) / norm)
    return out


def restrict_axis(f: np.ndarray, axis: int, kind: str) -> np.ndarray:
    f = np.moveaxis(f, axis, 0)
    if kind == "keep":
        t = f.copy()
        t[1:-1] = (f[:-2] + 2 * f[1:-1] + f[2:]) * 0.25
    elif kind == "periodic":
        t = (np.roll(f, 1, 0) + 2 * f + np.roll(f, -1, 0)) * 0.25
    else:
        g = np.concatenate([f[:1], f, f[-1:], f[-2:-1]])  # mirror ghosts: -1 and n, n + 1
        t = (g[:-3] + 3 * g[1:-2] + 3 * g[2:-1] + g[3:]) * 0.125
    return np.moveaxis(t[::2], 0, axis)


def prolong_axis(c: np.ndarray, axis: int, kind: str, n: int) -> np.ndarray:
    c = np.moveaxis(c, axis, 0)
    out = np.zeros((n,) + c.shape[1:])
    if kind == "keep":
        out[::2] = c
        out[1::2] = 0.5 * (c[:-1] + c[1:])
        out[0] = out[-1] = 0
    elif kind == "periodic":
        out[::2] = c
        out[1::2] = 0.5 * (c + np.roll(c, -1, 0))
    else:
        lo = np.concatenate([c[:1], c[:-1]])
        hi = np.concatenate([c[1:], c[-1:]])
        out[::2] = 0.75 * c + 0.25 * lo
        out[1::2] = 0.75 * c + 0.25 * hi
    return np.moveaxis(out, 0, axis)
