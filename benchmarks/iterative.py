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
- The same CG written by hand in plain JAX (``shard_map``, ``ppermute`` halos,
  ``psum``, a ``fori_loop``; the field padded to a multiple of the mesh), per
  iteration: what XLA makes of the textbook algorithm without pgas; and the same
  with a zero pad in place of the halo exchange (what the exchange costs).

The forms compared are called in turn (``common.paired_seconds``), so that
load on a shared machine falls on all of them alike.
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
from common import machine, paired_seconds  # noqa: E402


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


def shard_map_cg(b: np.ndarray, iterations: int, devices: int, exchange: bool = True):
    """CG by hand in plain JAX: ``run()`` does ``iterations`` iterations (no checks).

    The field is padded with zeros to a multiple of a square-ish mesh; the mask
    of the interior keeps the walls and the padding at zero, so the iterates are
    those of :func:`numpy_cg`. Each iteration: one halo exchange of p (four
    ``ppermute``), two ``psum`` of a scalar. ``exchange=False`` pads p with zeros
    instead of exchanging its halo: wrong iterates, the same work less the
    collective-permutes (what the exchange costs).
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as Spec

    rows = int(np.sqrt(devices))
    while devices % rows:
        rows -= 1
    mesh = jax.make_mesh((rows, devices // rows), ("y", "x"))
    n = b.shape[0]
    shape = (-(-n // rows) * rows, -(-n // (devices // rows)) * (devices // rows))
    interior = np.zeros(shape, bool)
    interior[1 : n - 1, 1 : n - 1] = True
    padded = np.zeros(shape)
    padded[:n, :n] = b

    def halo(a):  # one cell per side, zero beyond the mesh (the walls are zero)
        if not exchange:
            return jnp.pad(a, 1)
        for axis, name, size in ((0, "y", rows), (1, "x", devices // rows)):
            down = [(i, i + 1) for i in range(size - 1)]
            up = [(i + 1, i) for i in range(size - 1)]
            last = jax.lax.slice_in_dim(a, a.shape[axis] - 1, a.shape[axis], axis=axis)
            first = jax.lax.slice_in_dim(a, 0, 1, axis=axis)
            a = jnp.concatenate([jax.lax.ppermute(last, name, down), a,
                                 jax.lax.ppermute(first, name, up)], axis=axis)  # fmt: skip
        return a

    def local(x, r, p, rr, inside):
        def body(_, c):
            x, r, p, rr = c
            e = halo(p)
            ap = 4 * p - (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2] + e[1:-1, 2:])
            ap = jnp.where(inside, ap, 0.0)
            alpha = rr / jax.lax.psum(jnp.sum(p * ap), ("y", "x"))
            x, r = x + alpha * p, r - alpha * ap
            new = jax.lax.psum(jnp.sum(r * r), ("y", "x"))
            return x, r, jnp.where(inside, r + (new / rr) * p, 0.0), new

        return jax.lax.fori_loop(0, iterations, body, (x, r, p, rr))

    block = Spec("y", "x")
    loop = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(block,) * 3 + (Spec(), block),
                                 out_specs=(block,) * 3 + (Spec(),)),
                   donate_argnums=(0, 1, 2))  # fmt: skip
    sharding = NamedSharding(mesh, block)
    inside = jax.device_put(interior, sharding)

    def run():
        fields = [jax.device_put(a, sharding) for a in (np.zeros(shape), padded, padded)]
        out = loop(*fields, jnp.asarray(float((b * b).sum())), inside)
        out[0].block_until_ready()
        return out

    return run


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
    bb = float((b * b).sum())
    solved = pgas.run_until(P.cg, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5)
    cg_iters = solved.steps_taken
    plain = functools.partial(P.cg, reproducible=False)
    plain_iters = pgas.run_until(plain, P.cg_state(b, field), P.cg_converged(1e-8, bb),
                                 10**5).steps_taken  # fmt: skip

    def cg():
        out = pgas.run_until(
            P.cg, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5, donate=True
        )
        out.state["x"].data.block_until_ready()

    def cg_plain():
        out = pgas.run_until(
            plain, P.cg_state(b, field), P.cg_converged(1e-8, bb), 10**5, donate=True
        )
        out.state["x"].data.block_until_ready()

    by_hand = shard_map_cg(b, plain_iters, args.devices)
    hand_residual = float(np.sqrt(by_hand()[3] / bb))  # its iterates are CG's: below 1e-8
    no_exchange = shard_map_cg(b, plain_iters, args.devices, exchange=False)
    t = paired_seconds({"until": until, "run": fixed, "cg": cg, "cg_plain": cg_plain,
                        "by_hand": by_hand, "no_exchange": no_exchange}, args.repeats)  # fmt: skip
    t_until, t_run, t_cg, t_plain = t["until"], t["run"], t["cg"], t["cg_plain"]
    sweeps2 = 2 * t_run / args.sweeps
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
               "ratio_over_two_jacobi_sweeps": (t_cg / cg_iters) / sweeps2,
               "plain_iterations": plain_iters, "plain_s_per_iteration": t_plain / plain_iters,
               "plain_ratio_over_two_jacobi_sweeps": (t_plain / plain_iters) / sweeps2,
               "ratio_reproducible_over_plain": (t_cg / cg_iters) / (t_plain / plain_iters),
               "by_hand_s_per_iteration": t["by_hand"] / plain_iters,
               "by_hand_relative_residual": hand_residual,
               "by_hand_ratio_over_two_jacobi_sweeps": (t["by_hand"] / plain_iters) / sweeps2,
               "plain_over_by_hand": t_plain / t["by_hand"],
               "by_hand_without_exchange_s_per_iteration": t["no_exchange"] / plain_iters,
               "by_hand_without_exchange_ratio_over_two_jacobi_sweeps":
                   (t["no_exchange"] / plain_iters) / sweeps2},
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
