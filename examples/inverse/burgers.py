"""Recover the initial velocity of a 1-D viscous Burgers flow from a noisy snapshot.

    python examples/inverse/burgers.py --devices 4 --n 1025 --steps 400 --iters 100

Physics: u_t + u u_x = nu u_xx on [0, 1], the velocity held at zero at both
ends. An unknown initial velocity ``u0`` steepens into fronts and diffuses for
``--steps`` steps; we observe it once at the end, with Gaussian noise. Inverse
problem: find ``u0`` such that the same simulation from it matches the
observation, by gradient descent on the misfit
``0.5 * sum((run(u0) - observed)**2)``.

The step is nonlinear (``u u_x``), so its adjoint depends on the state. The
gradient is ``jax.grad`` through ``pgas.run``, and pgas runs it back in
checkpointed segments (``pgas.loop.reverse``): the forward stores its state
every ``segment`` steps (about ``sqrt(steps)``) at its own speed, and reverse
mode recomputes one segment at a time and runs it back one adjoint step at a
time, exchanging halos only. ``pgas.comm_report(burgers, u, gradient=True,
steps=n)`` shows that schedule and its collectives. ``--json`` prints the
results as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np

import pgas

# ---- Physics ------------------------------------------------------------------------------
# The ends hold their value (u = 0): the edge cells are Keep cells no step writes.
BOUNDARY = pgas.Keep()
NU = 2e-3  # viscosity

# ---- Numerics -----------------------------------------------------------------------------
# Explicit Euler, central differences. dt = 0.2 dx**2 / nu (diffusion number 0.2). Central
# differences need the cell Reynolds number |u| dx / nu at most 2: with |u| <= 1.5 (the
# initial velocity's largest), dx <= 2 nu / 1.5, so at least SMALLEST points.
DIFFUSION = 0.2
PEAK = 1.5
SMALLEST = int(PEAK / (2 * NU)) + 2


def advect_diffuse(u, c, d):
    """One step in global view: ``c = dt / dx``, ``d = nu dt / dx**2`` (the diffusion number)."""
    u[1:-1] = (u[1:-1] - 0.5 * c * u[1:-1] * (u[2:] - u[:-2])
               + d * (u[2:] - 2 * u[1:-1] + u[:-2]))  # fmt: skip
    return u


def burgers(u, c):
    """One step in global view; ``c = dt / dx`` arrives as a parameter."""
    return advect_diffuse(u, c, DIFFUSION)


def courant(n: int) -> float:
    """``dt / dx`` on ``n`` points: dt = DIFFUSION dx**2 / NU."""
    dx = 1.0 / (n - 1)
    return DIFFUSION * dx / NU


# ---- Initial conditions -------------------------------------------------------------------
def truth(n: int) -> np.ndarray:
    """The unknown initial velocity: two waves of different lengths, zero at the ends."""
    x = np.linspace(0.0, 1.0, n)
    return np.sin(2 * np.pi * x) + 0.5 * np.sin(6 * np.pi * x) ** 3


# ---- Time loop and inversion --------------------------------------------------------------
def invert(n: int, steps: int, iters: int, noise: float, devices: int, rate: float = 1.0,
           seed: int = 0) -> dict:  # fmt: skip
    """Simulate the observation, then descend; the fields, the misfit history and times."""
    mesh = pgas.make_mesh(("x",), devices=devices)
    c = courant(n)
    u_true = truth(n)
    observed = pgas.run(burgers, pgas.from_numpy(u_true, mesh, boundary=BOUNDARY), steps,
                        params=c).to_numpy()  # fmt: skip
    observed = observed + noise * np.random.default_rng(seed).standard_normal(n)
    observed[[0, -1]] = 0.0  # the ends are known
    obs = pgas.from_numpy(observed, mesh, boundary=BOUNDARY)

    def misfit(u0, obs):
        return 0.5 * pgas.sum((pgas.run(burgers, u0, steps, params=c) - obs) ** 2)

    @jax.jit
    def update(u0, obs):
        loss, g = jax.value_and_grad(misfit)(u0, obs)
        return pgas.GlobalArray(u0.data - rate * g.data, u0.layout), loss

    forward = jax.jit(misfit)
    est = pgas.from_numpy(observed, mesh, boundary=BOUNDARY)  # start from the snapshot
    jax.block_until_ready(update(est, obs))  # compile both before timing
    jax.block_until_ready(forward(est, obs))
    times = []
    for _ in range(11):  # the median of 11 calls: one forward is well under a millisecond
        start = time.perf_counter()
        jax.block_until_ready(forward(est, obs))
        times.append(time.perf_counter() - start)
    t_forward = float(np.median(times))
    history, start = [], time.perf_counter()
    for _ in range(iters):
        est, loss = update(est, obs)
        history.append(float(loss))
    t_iters = time.perf_counter() - start
    recovered = est.to_numpy()

    def error(u):
        return float(np.linalg.norm(u - u_true) / np.linalg.norm(u_true))

    return {"truth": u_true, "observed": observed, "recovered": recovered, "loss": history,
            "error_observed": error(observed), "error_recovered": error(recovered),
            "seconds_forward": t_forward, "seconds_per_iteration": t_iters / iters}  # fmt: skip


def plot(result: dict, path: str) -> None:
    """Truth, observation and recovered velocity, and the misfit history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 3.8))
    x = np.linspace(0.0, 1.0, len(result["truth"]))
    for key, style in (("truth", "k-"), ("observed", "C0:"), ("recovered", "C1--")):
        extra = f" (error {result['error_' + key]:.3f})" if key != "truth" else ""
        ax[0].plot(x, result[key], style, label=key + extra)
    ax[0].set(xlabel="x", ylabel="u0")
    ax[0].legend()
    ax[1].semilogy(result["loss"])
    ax[1].set(title="misfit", xlabel="iteration")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def command_line(description: str, steps: int, iters: int) -> argparse.ArgumentParser:
    """The flags this example shares with viscosity.py, defaults ``steps`` and ``iters``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--n", type=int, default=1025, help="grid points")
    p.add_argument("--steps", type=int, default=steps, help="time steps to the observation")
    p.add_argument("--iters", type=int, default=iters, help="gradient-descent iterations")
    p.add_argument("--noise", type=float, default=0.01, help="noise standard deviation")
    p.add_argument("--devices", type=int, default=4, help="virtual CPU devices")
    p.add_argument("--json", action="store_true", help="print the results as one JSON line")
    return p


def arguments(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed by ``p``; bad sizes and noise exit naming the flag, value and fix."""
    args = p.parse_args(argv)
    for name in ("n", "steps", "iters", "devices"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: give a whole number >= 1")
    if args.n < SMALLEST:
        p.error(
            f"--n {args.n}: central differences are unstable on so coarse a grid (cell "
            f"Reynolds number above 2 at nu = {NU}); give --n {SMALLEST} or more"
        )
    if not args.noise >= 0:
        p.error(f"--noise {args.noise}: a standard deviation; give 0 or more")
    return args


def start_jax(devices: int) -> None:
    """JAX on ``devices`` virtual CPU devices, in float64."""
    try:
        pgas.use_cpu_devices(devices)
    except pgas.DeviceCountError:  # JAX runs already (a test): use that many of its devices
        pass
    jax.config.update("jax_enable_x64", True)


def main(argv: list[str] | None = None) -> dict:
    p = command_line(__doc__.splitlines()[0], steps=400, iters=100)
    p.add_argument("--rate", type=float, default=0.5, help="gradient-descent step size")
    p.add_argument("--plot", help="write a PNG of the fields and the misfit history")
    args = arguments(p, argv)
    start_jax(args.devices)
    result = invert(args.n, args.steps, args.iters, args.noise, args.devices, args.rate)
    if args.plot:
        plot(result, args.plot)
    summary = {"n": args.n, "steps": args.steps, "iters": args.iters, "noise": args.noise,
               "devices": args.devices, "loss_first": result["loss"][0],
               "loss_last": result["loss"][-1], "error_observed": result["error_observed"],
               "error_recovered": result["error_recovered"],
               "seconds_forward": result["seconds_forward"],
               "seconds_per_iteration": result["seconds_per_iteration"]}  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"misfit {summary['loss_first']:.4g} -> {summary['loss_last']:.4g} in {args.iters} "
            f"iterations ({summary['seconds_per_iteration']:.3g} s each, the forward "
            f"{summary['seconds_forward']:.3g} s); relative error of the initial velocity: "
            f"observed {summary['error_observed']:.3f}, recovered "
            f"{summary['error_recovered']:.3f}"
        )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
