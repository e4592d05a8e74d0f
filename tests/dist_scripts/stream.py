"""Heat (1-D, Keep edges) streamed to one snapshot store under any launcher.

    mpiexec -n P python stream.py OUT.zarr --n N --every K --snapshots S
        [--also OUT2.nc] [--dtype float32] [--backend auto|mpi] [--comm] [--ckpt DIR --ckpt-every C
        [--sleep-after M] [--restart]] [--stats FILE] [-- OUT.zarr ... (another run)]

Writes S snapshots (steps 0, K, ..., (S-1)*K) of the heat step of tests/stencils.py
through pgas.snapshots.SnapshotWriter, `pgas.run` computing K steps between writes
(backend auto, two steps per halo exchange), or NumPy + mpi4py halo exchange (backend
mpi, blocks written with region=grid.block()); --also writes a second store at the same
time. `--comm` passes MPI.COMM_WORLD to the writer (JAX path).
With --ckpt a checkpoint is saved every C steps after the write of that step;
--sleep-after M prints SLEEPING after the M-th write and sleeps (the test kills
the job); --restart continues from the checkpoint and appends to the store.
--stats FILE: every process writes its peak RSS (KiB) and the peak of memory
NumPy allocated while streaming (tracemalloc, bytes) to FILE.<rank>.json.
Runs separated by ``--`` run one after the other in the same processes (one launch); the
peak RSS of each is then the peak so far.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

import pgas
from pgas.io import checkpoint
from pgas.io.snapshots import SnapshotWriter, block_chunks
from pgas.runtime import distributed


def heat0(i):
    return np.sin(i / 10.0)


@jax.jit
def stored_sum(data):  # a cheap global diagnostic (pgas.sum recompiles per call here)
    return jnp.sum(data.astype(jnp.float32))


def step(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--also")
    p.add_argument("--n", type=int, default=1001)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--snapshots", type=int, default=6)
    p.add_argument("--backend", choices=("auto", "mpi"), default="auto")
    p.add_argument("--comm", action="store_true")
    p.add_argument("--ckpt")
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--sleep-after", type=int, default=0)
    p.add_argument("--restart", action="store_true")
    p.add_argument("--stats")
    return p.parse_args(argv)


class Writers:
    """The writers of OUT (and --also), called as one."""

    def __init__(self, args, chunks, size, start, comm):
        attrs = {"example": "stream-heat", "processes": size, "start_step": start}
        self.all = [
            SnapshotWriter.open(
                path, name="u", dims=("x",), shape=(args.n,), dtype=args.dtype, attrs=attrs,
                chunks=chunks, diagnostics=("total",),
                restart_step=start if args.restart else None, comm=comm,
            )
            for path in [args.out] + ([args.also] if args.also else [])
        ]  # fmt: skip

    def write(self, *args, **kwargs):
        for w in self.all:
            w.write(*args, **kwargs)

    def close(self):
        for w in self.all:
            w.close()


def run_auto(args) -> tuple[int, int]:
    info = distributed.initialize()
    mesh = pgas.make_mesh(("x",))
    u = pgas.from_function(heat0, (args.n,), mesh, dtype=args.dtype, boundary=pgas.Keep())
    start, meta = 0, {"problem": "stream-heat", "n": args.n, "dtype": args.dtype}
    if args.restart:
        u, start = checkpoint.load(args.ckpt, u, meta=meta)
        if info.process_id == 0:
            print(f"RESTART from step {start} on {info.process_count} process(es)", flush=True)
    comm = None
    if args.comm:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    writer = Writers(args, block_chunks(u.layout.axes), info.process_count, start, comm)
    tracemalloc.start()
    last = (args.snapshots - 1) * args.every
    for s in range(start, last + 1, args.every):
        if s > start:  # k = 2: groups of 2 steps between writes ("auto" is 16 here, more
            # than the steps between writes: every process would trace and compile its group
            # of 16 steps and never run it)
            u = pgas.run(step, u, args.every, steps_per_exchange=2)
        writer.write(s, u, {"total": float(stored_sum(u.data))})
        after_write(args, s, start, info.process_id, lambda: checkpoint.save(
            args.ckpt, u, step=s, meta=meta))  # fmt: skip
    writer.close()
    return info.process_id, info.process_count


def run_mpi(args) -> tuple[int, int]:
    from pgas.references import mpi

    grid = mpi.cart_grid((args.n,))
    (x,) = mpi.local_coordinates(grid)
    ext = np.zeros(x.size + 2, args.dtype)
    ext[1:-1] = heat0(x)
    region = grid.block()
    lo, hi = (1 if region[0].start == 0 else 0), (1 if region[0].stop == args.n else 0)
    half, quarter = ext.dtype.type(0.5), ext.dtype.type(0.25)
    writer = Writers(args, block_chunks(grid.axes), grid.size, 0, grid.comm)
    tracemalloc.start()
    for s in range(0, (args.snapshots - 1) * args.every + 1, args.every):
        for _ in range(args.every if s else 0):
            mpi.exchange_halo(ext, grid, 1, pgas.Keep())
            new = half * ext[1:-1] + quarter * (ext[:-2] + ext[2:])
            ext[1 + lo : ext.size - 1 - hi] = new[lo : new.size - hi]
        total = mpi.allreduce(float(ext[1:-1].sum(dtype=np.float32)), "sum", grid)
        writer.write(s, ext[1:-1], {"total": total}, region=region)
        after_write(args, s, 0, grid.rank, None)
    writer.close()
    return grid.rank, grid.size


def after_write(args, s, start, rank, save) -> None:
    if args.ckpt and save is not None and s % args.ckpt_every == 0:
        save()
    if args.sleep_after and (s - start) // args.every + 1 == args.sleep_after:
        if rank == 0:
            print(f"SLEEPING after the write of step {s}", flush=True)
        time.sleep(600)


def main(argv=None) -> int:
    from pgas.references.mpi import abort_on_error

    argv = sys.argv[1:] if argv is None else argv
    cuts = [-1] + [i for i, a in enumerate(argv) if a == "--"] + [len(argv)]
    for lo, hi in zip(cuts, cuts[1:]):  # each run in turn
        args = parse(argv[lo + 1 : hi])
        with abort_on_error():  # one failing process ends the launch instead of hanging it
            rank, size = (run_mpi if args.backend == "mpi" else run_auto)(args)
        if args.stats:
            peak = tracemalloc.get_traced_memory()[1]
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with open(f"{args.stats}.{rank}.json", "w") as f:
                json.dump({"rank": rank, "size": size, "rss_kib": rss, "traced_peak": peak}, f)
        tracemalloc.stop()  # the next run's NumPy peak is its own
    if rank == 0:
        print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
