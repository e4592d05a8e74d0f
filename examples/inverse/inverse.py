"""Recover the initial temperature of a 2-D plate from a noisy snapshot, through pgas.run.

    python examples/inverse/inverse.py --devices 4 --n 128 --steps 40 --iters 200 \
        --plot out/inverse.png

Physics: du/dt = alpha (d2u/dx2 + d2u/dy2) on a square plate whose edges are
insulated (zero flux). An unknown initial temperature ``u0`` diffuses for
``--steps`` steps; we observe the plate once at the end, with Gaussian noise.
Inverse problem: find ``u0`` such that running the same simulation from it
matches the observation, by gradient descent on the misfit
``0.5 * sum((run(u0) - observed)**2)``. The gradient is ``jax.grad`` through
``pgas.run`` on several devices: the adjoint runs the transposed stencil
backwards, exchanging only halos, with about 2 sqrt(steps) states stored.
Diffusion smooths, so the problem is ill-posed: the fine detail the noise
hides cannot come back; stopping the descent early is the regularisation.
``--json`` prints the results as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import numpy as np

import pgas

# ---- Physics ------------------------------------------------------------------------------
# Insulated edges: the ghost cells beyond each face mirror the cells inside (zero flux).
BOUNDARY = pgas.Neumann()

# ---- Numerics -----------------------------------------------------------------------------
# Explicit Euler, 5-point Laplacian, alpha*dt/dx**2 = c (stable up to 1/4). The step
# is linear in u, its operator A has norm <= 1, so gradient descent on the misfit
# with a unit learning rate is stable (A^T A has norm <= 1): no optimiser needed.


def heat(u, c):
    """One step in global view; ``c`` = alpha*dt/dx**2 arrives as a parameter."""
    s = pgas.shift(u, 1, 0) + pgas.shift(u, -1, 0) + pgas.shift(u, 1, 1) + pgas.shift(u, -1, 1)
    u[...] = (1 - 4 * c) * u + c * s
    return u


# ---- Initial conditions -------------------------------------------------------------------
def truth(n: int) -> np.ndarray:
    """The unknown initial temperature: two warm spots and a cool bar on a background."""
    y, x = np.mgrid[0:n, 0:n] / n
    spots = np.exp(-((x - 0.3) ** 2 + (y - 0.35) ** 2) / 0.01)
    spots += 0.7 * np.exp(-((x - 0.7) ** 2 + (y - 0.6) ** 2) / 0.004)
    bar = -0.5 * ((np.abs(y - 0.8) < 0.05) & (np.abs(x - 0.5) < 0.3))
    return (0.2 + spots + bar).astype(np.float32)


# ---- Time loop and inversion --------------------------------------------------------------
def invert(n: int, steps: int, iters: int, noise: float, devices: int, c: float = 0.2,
           seed: int = 0) -> dict:  # fmt: skip
    """Simulate the observation, then descend; returns the fields and the loss history."""
    mesh = pgas.make_mesh(("y", "x"), devices=devices)
    u_true = truth(n)
    observed = pgas.run(heat, pgas.from_numpy(u_true, mesh, boundary=BOUNDARY), steps, params=c)
    rng = np.random.default_rng(seed)
    observed = observed.to_numpy() + np.float32(noise) * rng.standard_normal((n, n), np.float32)
    obs = pgas.from_numpy(observed, mesh, boundary=BOUNDARY)

    def misfit(u0, obs):
        return 0.5 * pgas.sum((pgas.run(heat, u0, steps, params=c) - obs) ** 2)

    @jax.jit
    def update(u0, obs):
        loss, g = jax.value_and_grad(misfit)(u0, obs)
        return pgas.GlobalArray(u0.data - g.data, u0.layout), loss

    est = pgas.from_numpy(observed, mesh, boundary=BOUNDARY)  # start from the blurred picture
    history = []
    for _ in range(iters):
        est, loss = update(est, obs)
        history.append(float(loss))
    recovered = est.to_numpy()

    def error(u):
        return float(np.linalg.norm(u - u_true) / np.linalg.norm(u_true))

    return {"truth": u_true, "observed": observed, "recovered": recovered, "loss": history,
            "error_observed": error(observed), "error_recovered": error(recovered)}  # fmt: skip


def plot(result: dict, path: str) -> None:
    """Truth, observation, recovered field and the loss history, in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(16, 3.8))
    lo, hi = result["truth"].min(), result["truth"].max()
    for a, key in zip(ax[:3], ("truth", "observed", "recovered")):
        im = a.imshow(result[key], vmin=lo, vmax=hi, cmap="inferno")
        extra = f" (error {result['error_' + key]:.3f})" if key != "truth" else ""
        a.set_title(key + extra)
        a.axis("off")
    fig.colorbar(im, ax=ax[:3], shrink=0.8)
    ax[3].semilogy(result["loss"])
    ax[3].set(title="misfit", xlabel="iteration")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=128, help="cells per side")
    p.add_argument("--steps", type=int, default=40, help="time steps to the observation")
    p.add_argument("--iters", type=int, default=200, help="gradient-descent iterations")
    p.add_argument("--noise", type=float, default=0.01, help="noise standard deviation")
    p.add_argument("--devices", type=int, default=4, help="virtual CPU devices")
    p.add_argument("--plot", help="write a PNG of the fields and the loss history")
    p.add_argument("--json", action="store_true", help="print the results as one JSON line")
    args = p.parse_args(argv)
    try:
        pgas.use_cpu_devices(args.devices)
    except pgas.DeviceCountError:  # JAX runs already (a test): use that many of its devices
        pass
    result = invert(args.n, args.steps, args.iters, args.noise, args.devices)
    if args.plot:
        plot(result, args.plot)
    summary = {"n": args.n, "steps": args.steps, "iters": args.iters, "noise": args.noise,
               "devices": args.devices, "loss_first": result["loss"][0],
               "loss_last": result["loss"][-1], "error_observed": result["error_observed"],
               "error_recovered": result["error_recovered"]}  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        first, last = summary["loss_first"], summary["loss_last"]
        print(
            f"misfit {first:.4g} -> {last:.4g} in {args.iters} iterations; relative error "
            f"of the initial field: observed {summary['error_observed']:.3f}, recovered "
            f"{summary['error_recovered']:.3f}"
        )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
