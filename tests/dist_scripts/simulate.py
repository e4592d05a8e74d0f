"""Heat (1-D, float32, 1001 cells, Keep) + Life (2-D, uint8, periodic) under any launcher.

Run as ``mpiexec -n P python simulate.py OUT.npz --steps N [--ckpt DIR --every K
[--sleep-after M] [--restart]]``. Process 0 writes the gathered final fields to
OUT.npz. With ``--ckpt`` a checkpoint is saved every K steps (in the callback of
``pgas.run``); ``--sleep-after M`` prints ``SLEEPING`` after the M-th checkpoint
and sleeps (the test kills the job then); ``--restart`` continues from the
checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pgas
from pgas.io import checkpoint
from pgas.runtime import distributed

HEAT_N = 1001
LIFE_SHAPE = (30, 22)
META = {"problem": "heat+life", "heat_n": HEAT_N, "life_shape": list(LIFE_SHAPE),
        "dtype": ["float32", "uint8"], "boundary": ["keep", "periodic"]}  # fmt: skip
NEIGHBOURS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def heat0(i):
    return np.sin(i / 10.0)


def life0(i, j):
    return ((i * 7 + j * 13 + (i * j) % 5) % 3 == 0).astype(np.uint8)


def initial_state():
    m1 = pgas.make_mesh(("x",))
    m2 = pgas.make_mesh(("y", "x"))
    heat = pgas.from_function(heat0, (HEAT_N,), m1, boundary=pgas.Keep())
    life = pgas.from_function(life0, LIFE_SHAPE, m2, dtype=np.uint8, boundary=pgas.Periodic())
    return {"heat": heat, "life": life}


def step(s):
    u = s["heat"]
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    g = s["life"]
    n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1) for dy, dx in NEIGHBOURS)
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype("uint8")
    return {"heat": u, "life": g}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ckpt")
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--sleep-after", type=int, default=0)
    p.add_argument("--restart", action="store_true")
    args = p.parse_args(argv)

    info = distributed.initialize(verbose=True)
    state, done = initial_state(), 0
    if args.restart:
        state, done = checkpoint.load(args.ckpt, state, meta=META)
        if info.process_id == 0:
            print(f"RESTART from step {done} on {info.process_count} process(es)", flush=True)
    saved = 0

    def callback(k, s):
        nonlocal saved
        checkpoint.save(args.ckpt, s, step=done + k, meta=META)
        saved += 1
        if info.process_id == 0:
            print(f"CHECKPOINT {done + k}", flush=True)
        if args.sleep_after and saved == args.sleep_after:
            if info.process_id == 0:
                print("SLEEPING", flush=True)
            time.sleep(600)

    kw = dict(chunk=args.every, callback=callback) if args.ckpt else {}
    state = pgas.run(step, state, steps=args.steps - done, **kw)
    heat, life = state["heat"].to_numpy(), state["life"].to_numpy()  # gathers on all
    if info.process_id == 0:
        np.savez(args.out, heat=heat, life=life, processes=info.process_count,
                 devices=info.global_device_count, method=info.method)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
