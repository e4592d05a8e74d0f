"""pgas auto vs explicit heat1d float32 on 1 device: time 50 steps (usage: python baseline_hlo.py [N])."""

import sys
import time

import numpy as np

import pgas
import pgas.explicit

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2**24
STEPS = 50
mesh = pgas.make_mesh(("x",), devices=1)


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


kern = lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])


def mk():
    return pgas.from_function(
        lambda i: np.sin(i / 10.0), (N,), mesh, boundary=pgas.Keep(), dtype=np.float32
    )


def tm(fn, reps=5):
    u = mk()
    u = fn(u, 2)
    u.data.block_until_ready()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        u = fn(u, STEPS)
        u.data.block_until_ready()
        ts.append(time.perf_counter() - t)
    return N * STEPS / np.median(ts) / 1e9, u


g1, ua = tm(lambda u, s: pgas.run(heat, u, steps=s))
g2, ue = tm(lambda u, s: pgas.explicit.run(kern, u, s, halo=1, region=(slice(1, -1),)))
print(f"auto {g1:.3f} Gcell/s  explicit {g2:.3f} Gcell/s")
# compiled programs of both (op counts, copies, memory): see loop_hlo.py
