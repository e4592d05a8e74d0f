"""The lid-driven cavity (examples/cavity): time to steady state, devices, NumPy, Poisson share.

    python benchmarks/cavity.py --n 129 --re 100 --devices 1 2 4 \
        --out benchmarks/results/cavity.json

Measures, in one process on ``max(--devices)`` virtual CPU devices (ratios are what
count; the machine is shared and noisy):

- the example's run to a steady state (``--tol``, 1e-3) on one device, end to end
  (compilation included): steps, V-cycles, seconds;
- seconds per step on each device count, timed over ``--window`` steps from the state the
  run reached at step ``--from-step`` (the flow still developing, so the solves take the
  run's typical V-cycles), the compiled loop warmed up first and each start state made
  ahead; the time to steady state
  each count would take is that times the run's steps (an estimate, said so);
- the share of a step spent in the Poisson solve: the same window with a step that skips
  the solve (psi kept), ``1 - t(no solve) / t(step)``;
- a NumPy version of the same scheme written here (the same steps, and the same multigrid:
  weighted Jacobi (2, 2), full weighting, bilinear prolongation, warm start, the same
  relative tolerance), timed over the same window from the same state.

The forms compared are called in turn (``common.paired_seconds``). With ``--platform gpu``
pgas runs on the GPUs (``--devices`` up to their number) and NumPy on the same machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, paired_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ---- NumPy: the same scheme and the same multigrid ------------------------------------------
def apply_a(e: np.ndarray, h: float) -> np.ndarray:
    """-lap(e) on the interior (5 points)."""
    return (4 * e[1:-1, 1:-1] - (e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, :-2]
                                 + e[1:-1, 2:])) / (h * h)  # fmt: skip


def vcycle(r: np.ndarray, h: float) -> np.ndarray:
    """One V-cycle from zero on A e = r (zero walls): weighted Jacobi (4/5) 2 + 2 sweeps,
    full weighting, bilinear prolongation; the coarsest level (3 x 3) solved exactly."""
    d, w = 4.0 / (h * h), 0.8
    e = np.zeros_like(r)
    if r.shape[0] <= 3:
        e[1:-1, 1:-1] = r[1:-1, 1:-1] / d
        return e
    e[1:-1, 1:-1] = w * r[1:-1, 1:-1] / d
    e[1:-1, 1:-1] += w * (r[1:-1, 1:-1] - apply_a(e, h)) / d
    res = np.zeros_like(r)
    res[1:-1, 1:-1] = r[1:-1, 1:-1] - apply_a(e, h)
    t = res.copy()
    t[1:-1, :] = (res[:-2, :] + 2 * res[1:-1, :] + res[2:, :]) * 0.25
    t2 = t.copy()
    t2[:, 1:-1] = (t[:, :-2] + 2 * t[:, 1:-1] + t[:, 2:]) * 0.25
    coarse = t2[::2, ::2].copy()
    coarse[0, :] = coarse[-1, :] = coarse[:, 0] = coarse[:, -1] = 0
    ec = vcycle(coarse, 2 * h)
    fine = np.zeros_like(r)
    fine[::2, ::2] = ec
    fine[1::2, ::2] = 0.5 * (ec[:-1, :] + ec[1:, :])
    fine[:, 1::2] = 0.5 * (fine[:, :-2:2] + fine[:, 2::2])
    e[1:-1, 1:-1] += fine[1:-1, 1:-1]
    for _ in range(2):
        e[1:-1, 1:-1] += w * (r[1:-1, 1:-1] - apply_a(e, h)) / d
    return e


def multigrid(b: np.ndarray, x0: np.ndarray, h: float, tol: float, most: int):
    """V-cycles from x0 until ||b - A x|| <= tol ||b|| over the interior: (x, cycles)."""
    x = x0.copy()
    bb = float((b[1:-1, 1:-1] ** 2).sum())
    r = np.zeros_like(b)
    r[1:-1, 1:-1] = b[1:-1, 1:-1] - apply_a(x, h)
    cycles = 0
    while float((r[1:-1, 1:-1] ** 2).sum()) > tol * tol * bb and cycles < most:
        x += vcycle(r, h)
        r[1:-1, 1:-1] = b[1:-1, 1:-1] - apply_a(x, h)
        cycles += 1
    return x, cycles


def numpy_steps(psi: np.ndarray, w: np.ndarray, c, steps: int) -> tuple:
    """``steps`` steps of the example's scheme in NumPy: (psi, omega, V-cycles)."""
    psi, w = psi.copy(), w.copy()
    h, nu, dt, lid = c.h, c.nu, c.dt, c.lid
    wall, diff, conv = -2.0 / (h * h), nu / (h * h), 0.5 / h
    cycles = 0
    for _ in range(steps):
        w[0, 1:-1] = wall * psi[1, 1:-1]
        w[-1, 1:-1] = wall * psi[-2, 1:-1]
        w[1:-1, 0] = wall * psi[1:-1, 1]
        w[1:-1, -1] = wall * psi[1:-1, -2] - 2.0 * lid / h
        c0 = w[1:-1, 1:-1].copy()
        u = (psi[1:-1, 2:] - psi[1:-1, :-2]) * conv
        v = (psi[:-2, 1:-1] - psi[2:, 1:-1]) * conv
        lap = w[2:, 1:-1] + w[:-2, 1:-1] + w[1:-1, 2:] + w[1:-1, :-2] - 4 * c0
        adv = u * (w[2:, 1:-1] - w[:-2, 1:-1]) + v * (w[1:-1, 2:] - w[1:-1, :-2])
        w[1:-1, 1:-1] = c0 + dt * (diff * lap - conv * adv)
        psi, k = multigrid(w, psi, h, c.solver_tol, c.max_cycles)
        cycles += k
    return psi, w, cycles


# ---- pgas ----------------------------------------------------------------------------------
def no_solve_step(cav, c):
    """The example's step with the Poisson solve left out (psi kept): what the rest costs."""

    def step(s, lid):
        w, change = cav.advance_vorticity(c, s["psi"], s["omega"], lid)
        return {**s, "omega": w, "change": change}

    return step


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=129)
    ap.add_argument("--re", type=float, default=100.0)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--from-step", type=int, default=1000)
    ap.add_argument("--window", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-steady", dest="steady", action="store_false",
                    help="skip the run to a steady state (hours at 513**2 on a CPU): per-step "
                         "times only")  # fmt: skip
    ap.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                    help="where pgas runs: virtual CPU devices, or the GPUs")  # fmt: skip
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)

    import pgas

    if args.platform == "gpu":
        os.environ["JAX_PLATFORMS"] = "cuda"
    else:
        pgas.use_cpu_devices(max(args.devices))
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import load_example

    cav = load_example("cavity")
    c = cav.Cavity(args.n, args.re)
    lid = jnp.asarray(float(c.lid))

    # the example's run to a steady state, end to end, one device
    steady = None
    if args.steady:
        start = time.perf_counter()
        full = cav.simulate(c, pgas.make_mesh(("x", "y"), devices=1), args.tol)
        steady = {"steps": full["steps"], "cycles": full["cycles"],
                  "cycles_per_step": full["cycles"] / full["steps"],
                  "converged": full["converged"],
                  "seconds_end_to_end": time.perf_counter() - start}  # fmt: skip
        print(f"steady: {steady}", flush=True)

    # the state at --from-step, the start of every timed window
    mid = cav.simulate(c, pgas.make_mesh(("x", "y"), devices=1), 1e-300, args.from_step)
    psi0, w0 = mid["state"]["psi"].to_numpy(), mid["state"]["omega"].to_numpy()
    step, bare = cav.make_step(c), no_solve_step(cav, c)
    never = cav.steady(-1.0)
    rows = []
    for d in args.devices:
        mesh = pgas.make_mesh(("x", "y"), devices=d)

        def state():
            f = {k: pgas.from_numpy(a, mesh, spec=("x", "y"), boundary=pgas.Keep())
                 for k, a in (("psi", psi0), ("omega", w0))}  # fmt: skip
            return {**cav.initial_state(c, mesh), **f}

        # run_until donates its state: each call gets one made ahead, outside the timing
        starts = [state() for _ in range(2 * (args.repeats + 1) + 1)]
        jax.block_until_ready(starts)

        def run(fn):
            def go():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", pgas.NonConvergenceWarning)
                    out = pgas.run_until(fn, starts.pop(), never, args.window, check_every=1,
                                         params=lid)  # fmt: skip
                jax.block_until_ready(out.state)
                return out

            return go

        t = paired_seconds({"step": run(step), "no_solve": run(bare)}, args.repeats)
        cycles = int(run(step)().state["cycles"])
        row = {"devices": d, "mesh": dict(mesh.shape), "seconds_per_step": t["step"] / args.window,
               "seconds_per_step_no_solve": t["no_solve"] / args.window,
               "poisson_share": 1 - t["no_solve"] / t["step"],
               "cycles_per_step_window": cycles / args.window}  # fmt: skip
        if steady:
            row["time_to_steady_estimate_s"] = t["step"] / args.window * steady["steps"]
        print(row, flush=True)
        rows.append(row)

    # NumPy: the same window from the same state
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        _, _, np_cycles = numpy_steps(psi0, w0, c, args.window)
        times.append(time.perf_counter() - start)
    np_step = float(np.median(times)) / args.window
    numpy_row = {"seconds_per_step": np_step, "cycles_per_step_window": np_cycles / args.window}
    if steady:
        numpy_row["time_to_steady_estimate_s"] = np_step * steady["steps"]
    best = min(r["seconds_per_step"] for r in rows)
    result = {"benchmark": "cavity", "n": c.n, "re": c.re, "dt": c.dt, "tol": args.tol,
              "solver_tol": c.solver_tol, "from_step": args.from_step, "window": args.window,
              "steady_one_device": steady, "pgas": rows, "numpy": numpy_row,
              "numpy_over_best_pgas": np_step / best, "machine": machine()}  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
