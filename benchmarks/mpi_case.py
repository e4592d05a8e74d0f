"""MPI worker, run under ``mpiexec -n P``: pgas.mpi backend and a hand-written NumPy + mpi4py code.

Prints one JSON document from rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    DTYPES,
    example_stencils,
    init_heat,
    init_life,
    peak_rss_bytes,
    stats,
)


def handwritten_heat(n_global: int, dtype, steps: int, comm) -> tuple[float, int, int, np.ndarray]:
    """1-D heat, Keep ends, block decomposition, Sendrecv of one cell each way per step."""
    p, r = comm.size, comm.rank
    base, extra = divmod(n_global, p)
    n = base + (r < extra)
    off = r * base + min(r, extra)
    u = np.empty(n + 2, dtype)
    u[1:-1] = init_heat(np.arange(off, off + n))
    left = r - 1 if r > 0 else MPI.PROC_NULL
    right = r + 1 if r < p - 1 else MPI.PROC_NULL
    half, quarter = dtype.type(0.5), dtype.type(0.25)
    lo = 2 if r == 0 else 1  # Keep: the global end cells stay
    hi = n if r == p - 1 else n + 1
    msgs = 0
    comm.Barrier()
    t = MPI.Wtime()
    for _ in range(steps):
        comm.Sendrecv(u[n : n + 1], right, 0, u[0:1], left, 0)
        comm.Sendrecv(u[1:2], left, 1, u[n + 1 : n + 2], right, 1)
        u[lo:hi] = half * u[lo:hi] + quarter * (u[lo - 1 : hi - 1] + u[lo + 1 : hi + 1])
    comm.Barrier()
    sec = comm.allreduce(MPI.Wtime() - t, op=MPI.MAX)
    msgs = (left != MPI.PROC_NULL) + (right != MPI.PROC_NULL)
    return sec, msgs, msgs * dtype.itemsize, u[1:-1]


def handwritten_life(side: int, steps: int, comm) -> tuple[float, int, int, np.ndarray]:
    """Life, periodic, row-block decomposition, Sendrecv of one row each way per step."""
    p, r = comm.size, comm.rank
    base, extra = divmod(side, p)
    n = base + (r < extra)
    off = r * base + min(r, extra)
    g = np.zeros((n + 2, side + 2), np.uint8)
    i, j = np.meshgrid(np.arange(off, off + n), np.arange(side), indexing="ij")
    g[1:-1, 1:-1] = init_life(i, j)
    up, down = (r - 1) % p, (r + 1) % p
    comm.Barrier()
    t = MPI.Wtime()
    for _ in range(steps):
        if p > 1:
            comm.Sendrecv(g[n], down, 0, g[0], up, 0)
            comm.Sendrecv(g[1], up, 1, g[n + 1], down, 1)
        else:
            g[0], g[n + 1] = g[n], g[1]
        g[:, 0], g[:, -1] = g[:, -2], g[:, 1]
        nb = (
            g[:-2, :-2]
            + g[:-2, 1:-1]
            + g[:-2, 2:]
            + g[1:-1, :-2]
            + g[1:-1, 2:]
            + g[2:, :-2]
            + g[2:, 1:-1]
            + g[2:, 2:]
        )
        c = g[1:-1, 1:-1]
        g[1:-1, 1:-1] = (nb == 3) | ((c == 1) & (nb == 2))
    comm.Barrier()
    sec = comm.allreduce(MPI.Wtime() - t, op=MPI.MAX)
    msgs = 2 if p > 1 else 0
    return sec, msgs, msgs * (side + 2), g[1:-1, 1:-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stencil", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--backends", default="mpi,handwritten")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    # --stencil A,B --sizes SIZES_A/SIZES_B: the stencils one after the other in this
    # launch (--tiny), one JSON document per stencil, one line each
    for stencil, sizes in zip(a.stencil.split(","), a.sizes.split("/"), strict=True):
        dtype = np.dtype(DTYPES[stencil])
        heat = stencil.startswith("heat")
        out = {"processes": comm.size, "stencil": stencil, "results": []}
        for size in [int(s) for s in sizes.split(",")]:
            cells = size if heat else size * size
            finals = {}
            for backend in a.backends.split(","):
                rec = {
                    "backend": backend,
                    "size": size,
                    "cells": cells,
                    "steps": a.steps,
                    "processes": comm.size,
                }
                try:
                    times = []
                    for rep in range(a.repeats + 1):  # the first run is a warm-up
                        if backend == "mpi":
                            import pgas
                            import pgas.references.mpi

                            _, kernel = example_stencils("heat1d" if heat else "life")
                            if heat:
                                res = pgas.mpi.run(kernel, init_heat, (size,), dtype, a.steps, 1,
                                                   pgas.Keep(), region=(slice(1, -1),))  # fmt: skip
                            else:
                                res = pgas.mpi.run(kernel, init_life, (size, size), dtype, a.steps,
                                                   1, pgas.Periodic())  # fmt: skip
                            sec, msgs, byts = res.seconds, res.messages_per_step, res.bytes_per_step
                            final = res.field
                            rec["steps_per_exchange"] = res.steps_per_exchange
                        else:
                            if heat:
                                sec, m, b, _ = handwritten_heat(size, dtype, a.steps, comm)
                            else:
                                sec, m, b, _ = handwritten_life(size, a.steps, comm)
                            msgs, byts = comm.allreduce(m), comm.allreduce(b)
                            final = None
                        if rep:
                            times.append(sec)
                    rec.update(stats(times, cells * a.steps))
                    rec["comm"] = {
                        "messages_per_step": msgs,
                        "bytes_per_step": byts,
                        "per_process_messages": msgs / comm.size,
                        "per_process_bytes": byts / comm.size,
                    }
                    if final is not None:
                        finals[backend] = final
                except Exception as err:
                    rec["error"] = f"{type(err).__name__}: {err}"[:500]
                out["results"].append(rec)
        rss = comm.gather(peak_rss_bytes())
        if comm.rank == 0:
            out["peak_rss_bytes_per_process"] = rss
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    from pgas.runtime.failure import abort_on_error

    with abort_on_error():
        main()
