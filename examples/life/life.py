"""Conway's Game of Life (B3/S23) on a periodic torus over a 2-D mesh of devices or MPI ranks.

    python examples/life/life.py --size 512x512 --pattern random --density 0.3 --steps 500
    python examples/life/life.py --devices 4 --pattern gosper --at 2,2 --plot out/life.gif
    mpiexec -n 4 python examples/life/life.py --backend mpi --size 1024x1024
    python examples/life/life.py --devices 4 --compare      # auto vs explicit vs mpi

Physics: a cell is born with exactly 3 live neighbours and survives with 2 or
3 (B3/S23); the board is a torus (edges wrap). Numerics: integer arithmetic
on a uint8 board, the 8 neighbours summed with ``pgas.shift`` (global view),
which pgas lowers to 4 collective-permutes per step on a 2-D mesh (corners
included); every backend gives the same board bit for bit. Patterns: built-in
names, any ``.rle`` file (LifeWiki/Golly), or ``random --density p``. See
examples/life/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pgas
from pgas.app import compare, options, platform, results, runner
from pgas.app.problem import Problem
from pgas.io.output import Output, local
from pgas.runtime.failure import abort_on_error

sys.path.insert(0, str(Path(__file__).resolve().parent))  # patterns.py, beside this file
import patterns  # noqa: E402

# ---- Physics ------------------------------------------------------------------------------
# B3/S23: n = number of live cells among the 8 neighbours; a dead cell with
# n == 3 is born, a live cell with n in {2, 3} survives, every other cell is
# dead in the next generation. The board wraps around in both directions.
BOUNDARY = pgas.Periodic()
HALO = 1  # the 8 neighbours, corners included
NEIGHBOURS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]

# ---- Numerics -----------------------------------------------------------------------------
# Integers only (0/1 cells, neighbour counts <= 8), so exact on every backend.


def life(g):
    """One generation in global view: shifted copies of the board, wrapped by the torus."""
    n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1) for dy, dx in NEIGHBOURS)
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype(g.dtype)
    return g


def kernel(e):
    """One generation of one block with one halo cell per side (explicit and MPI paths)."""
    n = (e[:-2, :-2] + e[:-2, 1:-1] + e[:-2, 2:] + e[1:-1, :-2] + e[1:-1, 2:]
         + e[2:, :-2] + e[2:, 1:-1] + e[2:, 2:])  # fmt: skip
    c = e[1:-1, 1:-1]
    return ((n == 3) | ((c == 1) & (n == 2))).astype(e.dtype)


# ---- Initial conditions -------------------------------------------------------------------
def parse_size(text: str) -> tuple[int, int]:
    """``HxW`` (or ``N`` for a square board) -> (rows, columns), both positive."""
    import argparse

    parts = text.lower().replace("_", "").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or min(dims) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a board size; give HxW with positive integers, e.g. 256x512"
        )
    return dims  # type: ignore[return-value]


def parse_at(text: str) -> tuple[int, int]:
    """``Y,X`` -> (y, x) of the pattern's top-left cell."""
    import argparse

    try:
        y, x = (int(v) for v in text.split(","))
    except ValueError:
        msg = f"{text!r} is not a position; give Y,X, e.g. 10,20"
        raise argparse.ArgumentTypeError(msg) from None
    return y, x


def board(size: str = "64x64", pattern: str = "random", at: str | None = None,
          density: float = 0.3, seed: int = 0) -> np.ndarray:  # fmt: skip
    """The initial board (uint8, [y, x]): a pattern placed at ``at`` (default centred)."""
    shape = parse_size(size)
    if pattern == "random":
        return patterns.random_board(shape, density, seed=seed)
    cells = patterns.load_pattern(pattern)
    return patterns.place(shape, cells, at=None if at is None else parse_at(at))


def _random_at(y: np.ndarray, x: np.ndarray, shape: tuple[int, int], density: float,
               seed: int) -> np.ndarray:  # fmt: skip
    """Cells ``(y, x)`` of ``patterns.random_board(shape, density, seed)``, drawing only the
    rows they span: PCG64 is advanced to the first row (one 64-bit draw per cell)."""
    y, x = np.broadcast_arrays(y, x)
    if y.size == 0:
        return np.zeros(y.shape, np.uint8)
    patterns.random_board((1, 1), density)  # checks density (the same message)
    w = shape[1]
    lo, hi = int(y.min()) * w, (int(y.max()) + 1) * w
    bits = np.random.default_rng(seed).bit_generator
    bits.advance(lo)
    u = np.random.Generator(bits).random(hi - lo)
    return (u[y * w + x - lo] < float(density)).astype(np.uint8)


def initial_fn(size: str = "64x64", pattern: str = "random", at: str | None = None,
               density: float = 0.3, seed: int = 0):  # fmt: skip
    """``(shape, init)``: the initial board as a function of global cell indices ``(y, x)``.

    Equal to :func:`board` cell for cell, but a process evaluates only its own
    blocks: random boards advance the generator to the block's rows; a pattern is
    looked up in its own (small) array.
    """
    shape = parse_size(size)
    if pattern == "random":
        density, seed = float(density), int(seed)
        patterns.random_board((1, 1), density)  # a bad density fails here, before JAX starts
        return shape, lambda y, x: _random_at(y, x, shape, density, seed)
    cells = (patterns.load_pattern(pattern) != 0).astype(np.uint8)
    (rows, cols), (ph, pw) = shape, cells.shape
    y0, x0 = ((rows - ph) // 2, (cols - pw) // 2) if at is None else parse_at(at)
    if y0 < 0 or x0 < 0 or y0 + ph > rows or x0 + pw > cols:
        patterns.place(shape, cells, at=None if at is None else (y0, x0))  # raises, with the fix

    def init(y, x):
        y, x = np.broadcast_arrays(y - y0, x - x0)
        inside = (y >= 0) & (y < ph) & (x >= 0) & (x < pw)
        return np.where(inside, cells[np.clip(y, 0, ph - 1), np.clip(x, 0, pw - 1)], 0)

    return shape, init


def problem(size: str = "64x64", pattern: str = "random", at: str | None = None,
            density: float = 0.3, seed: int = 0, dtype: str = "uint8") -> Problem:  # fmt: skip
    """The Life problem for every backend (``pgas compare examples/life/life.py:problem``).

    The board is built block by block from :func:`initial_fn` (process-local).
    """
    shape, init = initial_fn(size, pattern, at, density, seed)
    return Problem("life", shape, dtype, lambda y, x: init(y, x).astype(dtype), life, kernel,
                   BOUNDARY, halo=HALO, region=None, mesh_axes=("y", "x"),
                   bytes_per_cell=2 * np.dtype(dtype).itemsize)  # fmt: skip


def meta(args, kwargs: dict) -> dict:
    """What identifies this problem in a checkpoint (everything but --steps and the output)."""
    return {"example": "life", "shape": list(args.size), "dtype": args.dtype,
            "pattern": args.pattern, "at": kwargs["at"], "density": args.density,
            "seed": args.seed, "rule": "B3/S23", "boundary": "periodic",
            **({"packed": True} if args.packed else {})}  # fmt: skip


# ---- Output -------------------------------------------------------------------------------
def diagnostics(blocks: list[np.ndarray], reduce=local) -> dict[str, int]:
    """Population (live cells) of one snapshot, from this process's blocks of the board."""
    return {"population": int(reduce("sum", sum(int(np.count_nonzero(b)) for b in blocks)))}


def summary(r: dict) -> str:
    return results.summary_line(r) + f"\n  population {r['population']}"


def plot(store: str, path: str, r: dict):
    """Final board (.png) or an animation of the snapshots (.gif), read from the store."""
    from pgas.io.plot import life_gif, life_png

    return (life_gif if str(path).lower().endswith(".gif") else life_png)(store, path)


# ---- Time loop ----------------------------------------------------------------------------
# main() hands the problem to pgas.app.runner, which runs it on the chosen backend
# (pgas.app.backends), one plan per run (k steps per halo exchange, the halo, buffering):
#     auto:      pgas.run(p.step, g, steps)                     the global view above
#     explicit:  pgas.explicit.run(p.kernel, g, steps, HALO)    ppermute under shard_map
#     mpi:       pgas.mpi.run(p.kernel, p.init, ...)            NumPy blocks, mpi4py Sendrecv
# and builds or restores g, compiles first, times the loop, streams snapshots and
# checkpoints between compiled chunks. --packed brings its own step and kernel
# (examples/life/packed.py).
def packed_problem(**kwargs) -> Problem:
    """Life on bit-packed uint64 words (examples/life/packed.py), decoded to a uint8 board."""
    import packed  # beside this file

    return packed.problem(**kwargs)


def main(argv: list[str] | None = None) -> dict | None:
    ap = options.make_parser(
        __doc__, steps=200, dtypes=("uint8", "int8", "int16", "int32"),
        plots="final board (.png) or animation (.gif); repeatable",
    )  # fmt: skip
    g = ap.add_argument_group("life")
    g.add_argument(
        "--size",
        type=parse_size,
        default=(64, 64),
        metavar="HxW",
        help="board rows x columns, e.g. 512x1024 (default 64x64)",
    )
    g.add_argument(
        "--pattern",
        default="random",
        help=f"random, a built-in ({', '.join(patterns.builtin_names())}) or an "
        f".rle file (default random)",
    )
    g.add_argument(
        "--at", type=parse_at, metavar="Y,X", help="top-left cell of the pattern (default: centred)"
    )
    g.add_argument("--density", type=float, default=0.3, help="live fraction of random boards")
    g.add_argument(
        "--packed",
        action="store_true",
        help="64 cells per uint64 word (examples/life/packed.py); output as uint8",
    )
    args = ap.parse_args(argv)
    kwargs = dict(size=f"{args.size[0]}x{args.size[1]}", pattern=args.pattern,
                  at=None if args.at is None else f"{args.at[0]},{args.at[1]}",
                  density=args.density, seed=args.seed)  # fmt: skip
    make, source = ((packed_problem, kwargs) if args.packed
                    else (problem, dict(kwargs, dtype=args.dtype)))  # fmt: skip
    prob = options.or_exit(ap, lambda: make(**source))
    opts = options.from_args(ap, args, script=__file__, plot_suffixes=(".png", ".gif"),
                             snapshots=100)  # fmt: skip
    session = options.or_exit(
        ap, lambda: platform.start(opts, __file__, dtype=prob.dtype, shape=prob.shape)
    )
    if opts.compare:
        options.or_exit(
            ap, lambda: compare.print_comparison(__file__, opts, source, factory=make.__name__)
        )
    output = Output(
        "board", ("y", "x"), diagnostics=diagnostics,
        attrs={"size": kwargs["size"], "pattern": args.pattern, "at": kwargs["at"] or "centre",
               "density": args.density, "seed": args.seed, "rule": "B3/S23", "topology": "torus",
               "packed": int(args.packed)},
    )  # fmt: skip
    run = options.or_exit(ap, lambda: runner.run(prob, opts, session, meta(args, kwargs), output))
    return results.report(run, opts, name="life", output=output, plot=plot, summary=summary)


if __name__ == "__main__":
    with abort_on_error():  # under mpiexec/srun: one failed process ends every process
        main()
