"""Problems for the backend comparison tests (rebuilt by mpiexec workers by path)."""

import numpy as np

import pgas
from pgas.app.problem import Problem


def heat_step(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def heat_kernel(e):
    return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])


def life_step(g):
    n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1)
            for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))  # fmt: skip
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype("uint8")
    return g


def life_kernel(e):
    n = (e[:-2, :-2] + e[:-2, 1:-1] + e[:-2, 2:] + e[1:-1, :-2] + e[1:-1, 2:]
         + e[2:, :-2] + e[2:, 1:-1] + e[2:, 2:])  # fmt: skip
    c = e[1:-1, 1:-1]
    return ((n == 3) | ((c == 1) & (n == 2))).astype(c.dtype)


def heat(n=1001, dtype="float32"):
    return Problem("heat1d", (n,), dtype, lambda i: np.sin(0.37 * i) ** 2, heat_step,
                   heat_kernel, pgas.Keep(), 1, (slice(1, -1),), ("x",))  # fmt: skip


def life(h=37, w=53, seed=0):
    def init(i, j):
        return (np.sin(i * 12.9898 + j * 78.233 + seed) * 43758.5453 % 1 > 0.6).astype(np.uint8)

    return Problem("life", (h, w), "uint8", init, life_step, life_kernel, pgas.Periodic(), 1,
                   None, ("y", "x"))  # fmt: skip
