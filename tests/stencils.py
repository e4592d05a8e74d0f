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
