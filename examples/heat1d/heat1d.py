"""1-D heat equation, explicit Euler, on N devices or P MPI ranks: the same global program.

    python examples/heat1d/heat1d.py --n 1_000_003 --steps 2000
    python examples/heat1d/heat1d.py --devices 4 --out out/heat1d.nc --plot out/heat1d.png
    mpiexec -n 4 python examples/heat1d/heat1d.py --backend mpi --n 1_000_003
    python examples/heat1d/heat1d.py --devices 4 --compare      # auto vs explicit vs mpi

Physics: du/dt = alpha d2u/dx2 on a rod whose two end cells are held at their
initial temperatures. Numerics: explicit Euler in time, central differences
in space, alpha*dt/dx**2 = 1/4, so u[i] <- 0.5 u[i] + 0.25 (u[i-1] + u[i+1]).
The global-view step below is the whole parallel program: pgas shards ``u``
over the devices and turns the shifted slices into halo exchanges (two
collective-permutes of one cell per step). ``--json`` prints the results as
one JSON line; see examples/heat1d/README.md.
"""

from __future__ import annotations

import numpy as np

import pgas
from pgas.app import compare, options, platform, results, runner
from pgas.app.problem import Problem
from pgas.io.output import Output, local
from pgas.runtime.failure import abort_on_error

# ---- Physics ------------------------------------------------------------------------------
# The heat equation du/dt = alpha * d2u/dx2 on cells i = 0 .. N-1. The two end
# cells are held at their initial temperatures (Dirichlet data given by the
# initial condition: boundary pgas.Keep() keeps the outermost cell of each face).
BOUNDARY = pgas.Keep()
HALO, REGION = 1, (slice(1, -1),)  # one neighbour per side; the end cells are not updated

# ---- Numerics -----------------------------------------------------------------------------
# Explicit Euler with alpha*dt/dx**2 = 1/4 (stable up to 1/2):
#     u[i] <- u[i] + 1/4 (u[i-1] - 2 u[i] + u[i+1]) = 0.5 u[i] + 0.25 (u[i-1] + u[i+1]).
# The coefficients are powers of two, so every backend (XLA with fused
# multiply-adds, NumPy, MPI) computes bitwise the same numbers.


def heat(u):
    """One step in global view (automatic path): pgas inserts the halo exchange."""
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def kernel(e):
    """One step of one block with one halo cell per side (explicit and MPI paths)."""
    return 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])


# ---- Initial conditions -------------------------------------------------------------------
INITS = ("random", "gaussian", "sine", "step")


def initial_at(i: np.ndarray, n: int, init: str = "random", mode: int = 1,
               seed: int = 0) -> np.ndarray:  # fmt: skip
    """The initial temperatures of the cells ``i`` (integer array) of a rod of ``n`` cells.

    Elementwise in ``i``, so a process computes only its own blocks and gets the
    same bits as :func:`initial` (``random`` advances NumPy's PCG64 stream of
    ``default_rng(seed)`` to the block's first cell instead of drawing all ``n``).
    """
    i = np.asarray(i)
    if init == "random":
        flat = i.ravel()
        if flat.size == 0:
            return np.zeros(i.shape)
        lo, hi = int(flat.min()), int(flat.max())
        bits = np.random.default_rng(seed).bit_generator
        bits.advance(lo)  # one 64-bit draw per double: skip the cells before this block
        return np.random.Generator(bits).random(hi - lo + 1)[i - lo]
    x = i.astype(np.float64)
    if init == "gaussian":
        return 0.1 + np.exp(-(((x - (n - 1) / 2) / max(n / 20, 1.0)) ** 2))
    if init == "sine":
        return np.sin(mode * np.pi * x / max(n - 1, 1))
    if init == "step":
        return np.where(x < n / 2, 1.0, 0.1)
    raise ValueError(f"--init {init!r} is unknown; choose one of {', '.join(INITS)}")


def initial(n: int, init: str = "random", mode: int = 1, seed: int = 0) -> np.ndarray:
    """The initial temperatures u_i, i = 0..n-1 (float64; cast to the field's dtype).

    random: uniform in [0, 1) (``numpy.random.default_rng(seed).random(n)``);
    gaussian: a bump of height 1 and width n/20 in the middle, on a background
    of 0.1; sine: sin(mode*pi*i/(n-1)) (zero at both ends, an eigenmode of the
    scheme); step: 1 on the left half, 0.1 on the right half.

    The backgrounds are not zero on purpose: by the maximum principle every
    value then stays >= 0.1, never *subnormal* (below ~1e-38 in float32). XLA
    on CPU flushes subnormals to zero and NumPy does not, so a front running
    into an exactly-zero region would make the backends differ in the last
    bits of numbers < 1e-38; with the background they agree bit for bit.
    """
    return initial_at(np.arange(n), n, init, mode, seed)


def problem(n: int = 1001, dtype: str = "float32", init: str = "random", mode: int = 1,
            seed: int = 0) -> Problem:  # fmt: skip
    """The heat problem for every backend (``pgas compare examples/heat1d/heat1d.py:problem``).

    The initial condition is a function of the global cell index: every process
    builds only its own blocks (no process holds the whole rod).
    """
    if int(n) < 3:
        raise ValueError(f"--n {n}: the rod needs at least 3 cells (two fixed ends + one)")
    if init not in INITS:
        raise ValueError(f"--init {init!r} is unknown; choose one of {', '.join(INITS)}")
    n, mode, seed = int(n), int(mode), int(seed)

    def u0(i):
        return initial_at(i, n, init, mode, seed).astype(dtype)

    return Problem("heat1d", (n,), dtype, u0, heat, kernel, BOUNDARY,
                   halo=HALO, region=REGION, mesh_axes=("x",),
                   bytes_per_cell=2 * np.dtype(dtype).itemsize)  # fmt: skip


def meta(args) -> dict:
    """What identifies this problem in a checkpoint (everything but --steps and the output)."""
    return {"example": "heat1d", "shape": [args.n], "dtype": args.dtype, "init": args.init,
            "mode": args.mode, "seed": args.seed, "boundary": "keep ends",
            "scheme": "u[1:-1] = 0.5*u[1:-1] + 0.25*(u[:-2] + u[2:])"}  # fmt: skip


# ---- Output -------------------------------------------------------------------------------
def diagnostics(blocks: list[np.ndarray], reduce=local) -> dict[str, float]:
    """Global max, mean, l2 norm and total heat from this process's blocks of one snapshot.

    ``reduce(op, value)`` combines the processes' values (pgas.output: no field gather).
    """
    slabs = [s for b in blocks for s in _slabs(b)]  # views: float64 copies come one at a time
    total = reduce("sum", sum((float(s.astype(np.float64).sum()) for s in slabs), 0.0))
    cells = reduce("sum", sum(b.size for b in blocks))
    squares = reduce("sum", sum((float(np.square(s, dtype=np.float64).sum()) for s in slabs), 0.0))
    top = reduce("max", max((float(b.max()) for b in blocks if b.size), default=-np.inf))
    return {"max": top, "mean": total / cells, "l2": float(np.sqrt(squares)), "total": total}


def _slabs(block: np.ndarray, cells: int = 1 << 20) -> list[np.ndarray]:
    """A block as views of about ``cells`` cells (diagnostics hold one slab's temporaries)."""
    flat = block.reshape(-1)
    return [flat[i : i + cells] for i in range(0, flat.size, cells)]


def summary(r: dict) -> str:
    return (results.summary_line(r) + f"\n  max {r['max']:.6g}, mean {r['mean']:.6g}, "
            f"l2 {r['l2']:.6g}")  # fmt: skip


def plot(store: str, path: str, r: dict):
    """Space-time heat map and final profile over the initial one, read from the store."""
    from pgas.io.plot import heat_plot

    return heat_plot(store, path, title=f"heat1d, n = {r['shape'][0]}, {r['backend']}")


# ---- Time loop ----------------------------------------------------------------------------
# main() hands the problem to pgas.app.runner, which runs it on the chosen backend
# (pgas.app.backends), one plan per run (k steps per halo exchange, the halo, buffering):
#     auto:      pgas.run(heat, u, steps)                       the global view above
#     explicit:  pgas.explicit.run(kernel, u, steps, HALO, REGION)   ppermute under shard_map
#     mpi:       pgas.mpi.run(kernel, p.init, ...)               NumPy blocks, mpi4py Sendrecv
# and builds or restores u, compiles first, times the loop, streams snapshots and
# checkpoints between compiled chunks.


def main(argv: list[str] | None = None) -> dict | None:
    ap = options.make_parser(__doc__, steps=1000, dtypes=("float32", "float64"),
                             plots="space-time heat map + final profile (.png)")  # fmt: skip
    h = ap.add_argument_group("heat1d")
    h.add_argument(
        "--n",
        type=options.positive_int,
        default=1001,
        help="cells of the rod, e.g. 1_000_003 (default 1001)",
    )
    h.add_argument("--init", choices=INITS, default="random", help="initial condition")
    h.add_argument("--mode", type=options.positive_int, default=1, help="k of --init sine")
    args = ap.parse_args(argv)
    kwargs = dict(n=args.n, dtype=args.dtype, init=args.init, mode=args.mode, seed=args.seed)
    prob = options.or_exit(ap, lambda: problem(**kwargs))
    opts = options.from_args(ap, args, script=__file__, plot_suffixes=(".png", ".pdf", ".svg"),
                             snapshots=64)  # fmt: skip
    session = options.or_exit(
        ap, lambda: platform.start(opts, __file__, dtype=prob.dtype, shape=prob.shape)
    )
    if opts.compare:
        options.or_exit(ap, lambda: compare.print_comparison(__file__, opts, kwargs))
    output = Output(
        "u", ("x",), diagnostics=diagnostics,
        attrs={"n": args.n, "init": args.init, "mode": args.mode, "seed": args.seed,
               "scheme": "u[1:-1] = 0.5*u[1:-1] + 0.25*(u[:-2] + u[2:]), ends kept"},
    )  # fmt: skip
    run = options.or_exit(ap, lambda: runner.run(prob, opts, session, meta(args), output))
    return results.report(run, opts, name="heat1d", output=output, plot=plot, summary=summary)


if __name__ == "__main__":
    with abort_on_error():  # under mpiexec/srun: one failed process ends every process
        main()
