"""One process of a multi-process run fails; the launcher must end the others within seconds.

    mpiexec -n P python fail.py --rank R --when start|run|hook|exit [--backend auto|mpi]

``start``: process R raises before JAX's distributed start-up (the others wait in it);
``run``: process R raises in a ``pgas.run`` callback after the first chunk while the others
go on into the next chunk's collectives (through ``pgas.runtime.failure.abort_on_error``);
``hook``: the same, but nothing wraps the script: the except hook that
``pgas.distributed.initialize`` installs ends the run; ``exit``: process R calls
``sys.exit(3)`` there instead of raising, and nothing wraps the script. ``--backend mpi``:
NumPy blocks and mpi4py, process R raises between halo exchanges. Prints ``READY`` on every
process first.
"""

from __future__ import annotations

import argparse
import os
import sys


def step(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def rank_from_launcher() -> int:
    from pgas.runtime.launcher import launch

    return launch().rank or 0


def run(args) -> None:
    rank = rank_from_launcher()
    print(f"READY {rank}", flush=True)
    if args.when == "start" and rank == args.rank:
        raise RuntimeError(f"process {rank} fails at start-up")
    if args.backend == "mpi":
        import numpy as np

        import pgas
        from pgas.references import mpi

        grid = mpi.cart_grid((1001,))
        ext = np.zeros(grid.local_shape[0] + 2, np.float32)
        for i in range(100_000):
            mpi.exchange_halo(ext, grid, 1, pgas.Keep())
            if i == 10 and grid.rank == args.rank:
                raise RuntimeError(f"process {grid.rank} fails between exchanges")
        return
    import pgas
    from pgas.runtime import distributed

    info = distributed.initialize()
    u = pgas.from_function(lambda i: i * 1.0, (1001,), pgas.make_mesh(("x",)), dtype="float32",
                           boundary=pgas.Keep())  # fmt: skip

    def callback(done, state):
        if done >= 5 and info.process_id == args.rank and args.when == "exit":
            sys.exit(3)
        if done >= 5 and info.process_id == args.rank:
            raise RuntimeError(f"process {info.process_id} fails in a callback at step {done}")
        float(pgas.max(state))  # a collective every chunk: the others wait here

    # k = 1: an exchange every step (auto's 16 is more than a chunk: every process would
    # trace and compile a group of 16 steps and never run it)
    pgas.run(step, u, 100_000, chunk=5, callback=callback, steps_per_exchange=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--when", choices=("start", "run", "hook", "exit"), default="run")
    p.add_argument("--backend", choices=("auto", "mpi"), default="auto")
    args = p.parse_args()
    if args.when in ("hook", "exit"):
        run(args)
        return
    from pgas.runtime.failure import abort_on_error

    with abort_on_error():
        run(args)


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
