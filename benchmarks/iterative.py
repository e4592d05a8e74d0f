"""Iterative solvers: run_until against pgas.run, CG against a NumPy CG (issue targets).

    python benchmarks/iterative.py --devices 4 --n 1025 --out benchmarks/results/iterative.json

Measures, in one process and one run (ratios are what count; the machine is
shared and noisy), on an n x n float64 Poisson problem (examples/poisson):

- Jacobi: seconds per sweep of ``pgas.run_until`` at the default
  ``check_every`` (a tolerance of 0, so it runs ``--sweeps`` sweeps) against
  ``pgas.run`` for the same sweeps; target: at most 1.10x.
- CG to a relative residual of 1e-8 (the example's, with reproducible sums):
  iterations against a NumPy CG written here (target: within 2), seconds per
  iteration against two Jacobi sweeps of ``pgas.run`` (target: at most 1.5x)
  and against the same CG with plain sums (the reproducible sum's cost).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, median_seconds  # noqa: E402


def numpy_cg(b: np.ndarray, tol: float, most: int) -> int:
    """CG iterations of the 5-point Laplacian (walls fixed at 0) to ||r|| < tol ||b||."""
    x, r = np.zeros_like(b), b.copy()
    p, rr = r.copy(), float((r * r).sum())
    bb, n = rr, 0
    while rr >= tol**2 * bb and n < most:
        ap = 4 * p[1:-1, 1:-1] - (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
        alpha = rr / float((p[1:-1, 1:-1] * ap).sum())
        x[1:-1, 1:-1] += alpha * p[1:-1, 1:-1]
        r[1:-1, 1:-1] -= alpha * ap
        new = float((r * r).sum())
        p[1:-1, 1:-1] = r[1:-1, 1:-1] + (new / rr) * p[1:-1, 1:-1]
        rr, n = new, n + 1
    return n


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1025)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--sweeps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import jax

    import pgas

    pgas.use_cpu_devices(args.devices)
    jax.config.update("jax_enable_x64", True)
    root = Path(__file__).resolve().parents[1] / "examples" / "poisson" / "poisson.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("poisson", root)
    P = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(P)

    mesh = pgas.make_mesh(("y", "x"), devices=args.devices)
    b, field = P.fields(args.n, mesh)
    bf = field(b)
    never = lambda u, b: P.residual_squared(u, b) < 0.0  # noqa: E731  (runs max_steps)

    def until():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pgas.NonConvergenceWarning)
            out = pgas.run_until(
                P.jacobi, field(np.zeros_like(b)), never, args.sweeps, params=bf, donate=True
            )  # a fresh state, as the timed run measured
        out.state.data.block_until_ready()
        return out

    def fixed():
        pgas.run(
            P.jacobi, field(np.zeros_like(b)), args.sweeps, params=bf, donate=True
        ).data.block_until_ready()  # a fresh state, as run_until's

    info = until()
    t_until = median_seconds(until, args.repeats, warm_up=True)
    t_run = median_seconds(fixed, args.repeats, warm_up=True)

    bb = float((b * b).sum())
    solved = pgas.run_until(P.cg, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5)
    cg_iters = solved.steps_taken

    def cg():
        out = pgas.run_until(
            P.cg, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5, donate=True
        )
        out.state["x"].data.block_until_ready()

    t_cg = median_seconds(cg, args.repeats, warm_up=True)
    plain = functools.partial(P.cg, reproducible=False)
    plain_iters = pgas.run_until(plain, P.cg_state(b, field), P.cg_converged(1e-8, bb),
                                 10**5).steps_taken  # fmt: skip

    def cg_plain():
        out = pgas.run_until(
            plain, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5, donate=True
        )
        out.state["x"].data.block_until_ready()

    t_plain = median_seconds(cg_plain, args.repeats, warm_up=True)
    np_iters = numpy_cg(b, 1e-8, 10**5)
    result = {
        "benchmark": "iterative", "n": args.n, "devices": args.devices, "dtype": "float64",
        "jacobi": {"sweeps": args.sweeps, "check_every": info.check_every,
                   "steps_per_exchange": info.plan.steps_per_exchange,
                   "run_until_s_per_sweep": t_until / args.sweeps,
                   "run_s_per_sweep": t_run / args.sweeps,
                   "ratio_until_over_run": t_until / t_run},
        "cg": {"iterations": cg_iters, "numpy_iterations": np_iters,
               "s_per_iteration": t_cg / cg_iters,
               "ratio_over_two_jacobi_sweeps": (t_cg / cg_iters) / (2 * t_run / args.sweeps),
               "plain_iterations": plain_iters, "plain_s_per_iteration": t_plain / plain_iters,
               "ratio_reproducible_over_plain": (t_cg / cg_iters) / (t_plain / plain_iters)},
        "machine": machine(),
    }  # fmt: skip
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
