"""The stencils pgas ships in its tests, examples and benchmarks, in global view."""

from helpers import NEIGHBOURS_2D

import pgas


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def life(g):
    n = (g[:-2, :-2] + g[:-2, 1:-1] + g[:-2, 2:] + g[1:-1, :-2] + g[1:-1, 2:]
         + g[2:, :-2] + g[2:, 1:-1] + g[2:, 2:])  # fmt: skip
    c = g[1:-1, 1:-1]
    g[1:-1, 1:-1] = ((n == 3) | ((c == 1) & (n == 2))).astype("uint8")
    return g


def life_torus(g):
    n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1) for dy, dx in NEIGHBOURS_2D)
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype("uint8")
    return g


def heat3d(u):
    s = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1]
         + u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:])  # fmt: skip
    u[1:-1, 1:-1, 1:-1] = 0.25 * u[1:-1, 1:-1, 1:-1] + 0.125 * s
    return u


# ---- one-sided stencils (halos per side) ----
C = 0.5  # a power of two: XLA's fused multiply-adds round as NumPy does


def upwind(u):  # reads one cell below
    u[1:] = u[1:] - C * (u[1:] - u[:-1])
    return u


def downwind(u):  # reads one cell above
    u[:-1] = u[:-1] - C * (u[:-1] - u[1:])
    return u


def two_below(u):  # reads two cells below
    u[2:] = u[2:] - 0.5 * (u[1:-1] - u[:-2]) - 0.25 * (u[2:] - u[1:-1])
    return u


def ring(u):  # periodic upwind: every cell reads the one below, across the wrap
    u[...] = u - C * (u - pgas.shift(u, 1))
    return u


def upwind2d(u):
    u[1:, 1:] = u[1:, 1:] - 0.25 * (u[1:, 1:] - u[:-1, 1:]) - 0.25 * (u[1:, 1:] - u[1:, :-1])
    return u


def advect_diffuse(u):  # upwind along axis 0, centred along axis 1
    c = u[1:, 1:-1]
    u[1:, 1:-1] = c - 0.25 * (c - u[:-1, 1:-1]) + 0.125 * (u[1:, :-2] - 2 * c + u[1:, 2:])
    return u


def cg(s):
    """One CG iteration for -lap(x) = b (5-point, walls fixed at zero) in the global view."""
    x, r, p, rr = s["x"], s["r"], s["p"], s["rr"]
    ap = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
    alpha = rr / pgas.sum(p[1:-1, 1:-1] * ap)
    x[1:-1, 1:-1] = x[1:-1, 1:-1] + alpha * p[1:-1, 1:-1]
    r[1:-1, 1:-1] = r[1:-1, 1:-1] - alpha * ap
    new = pgas.sum(r * r)
    p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
    return {"x": x, "r": r, "p": p, "rr": new}
