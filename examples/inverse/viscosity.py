"""Recover the viscosity of a 1-D viscous Burgers flow from a noisy snapshot.

    python examples/inverse/viscosity.py --devices 4 --n 1025 --steps 1200 --iters 30

Physics: burgers.py's flow, u_t + u u_x = nu u_xx on [0, 1], the velocity held at
zero at both ends, from burgers.py's initial velocity (``burgers.truth``), now known.
The viscosity ``nu`` is the unknown: the flow runs ``--steps`` steps and we observe it
once at the end, with Gaussian noise. Inverse problem: find ``nu`` such that the same
simulation with it matches the observation, by gradient descent on the misfit
``0.5 * sum((run(nu) - observed)**2)`` over ``theta = log(nu)`` (``nu`` stays positive),
from a first guess ``--start`` times the truth.

The viscosity reaches the step as its parameter, ``pgas.run(step, u0, steps,
params=nu * dt / dx**2)``, so ``jax.grad`` with respect to it runs pgas's checkpointed
way back with respect to params (``pgas.loop.reverse``): each adjoint step gives the
cotangent of the diffusion number it reads, summed over the steps (one scalar all-reduce
a step on several devices). ``--json`` prints the results as one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import pgas

sys.path.insert(0, str(Path(__file__).resolve().parent))  # burgers.py, beside this file
import burgers  # noqa: E402

# ---- Physics ------------------------------------------------------------------------------
# burgers.py's flow, ends and initial velocity; its viscosity is the truth to recover.
NU = burgers.NU

# ---- Numerics -----------------------------------------------------------------------------
# burgers.py's scheme (explicit Euler, central differences) with one time step for every
# viscosity the descent tries: dt = DIFFUSION dx**2 / (start * NU), diffusion number
# DIFFUSION = 0.2 at the first guess (stable up to 0.5), DIFFUSION / start at the truth. The
# default 1200 steps at start = 3 reach burgers.py's time (400 of its steps, t = 0.038). The
# grid keeps the cell Reynolds number at most 2 at the truth (burgers.SMALLEST points).


def stepper(c: float):
    """The step on a grid of ``c = dt / dx``: ``step(u, d)``, the viscosity in ``d``.

    Args:
        c: ``dt / dx``, fixed by the grid.

    Returns:
        ``step(u, d)`` for :func:`pgas.run`, ``d = nu dt / dx**2`` its parameter.
    """

    def step(u, d):
        return burgers.advect_diffuse(u, c, d)

    return step


def grid(n: int, start: float) -> tuple[float, float]:
    """``(dt / dx, dt / dx**2)`` on ``n`` points, dt fixed by the first guess ``start * NU``."""
    dx = 1.0 / (n - 1)
    dt = burgers.DIFFUSION * dx**2 / (start * NU)
    return dt / dx, dt / dx**2


def final(theta, u0, steps: int, c: float, r: float):
    """The velocity after ``steps`` steps from ``u0`` at ``nu = exp(theta)``, ``r = dt / dx**2``."""
    return pgas.run(stepper(c), u0, steps, params=jnp.exp(theta) * r)


def misfit(theta, u0, obs, steps: int, c: float, r: float):
    """``0.5 * sum((final - obs)**2)`` at ``nu = exp(theta)``."""
    return 0.5 * pgas.sum((final(theta, u0, steps, c, r) - obs) ** 2)


forward = jax.jit(final, static_argnums=(2, 3, 4))  # one compile serves every nu


# ---- Observations -------------------------------------------------------------------------
def observe(n: int, steps: int, noise: float, devices: int, start: float, seed: int = 0):
    """The known initial velocity and the noisy final one at the true viscosity.

    Returns:
        ``(u0, obs, c, r)``: both fields on a mesh of ``devices``, the grid's ``dt / dx``
        and ``dt / dx**2``. The ends of ``obs`` are known (zero).
    """
    mesh = pgas.make_mesh(("x",), devices=devices)
    c, r = grid(n, start)
    u0 = pgas.from_numpy(burgers.truth(n), mesh, boundary=burgers.BOUNDARY)
    observed = forward(float(np.log(NU)), u0, steps, c, r).to_numpy()
    observed = observed + noise * np.random.default_rng(seed).standard_normal(n)
    observed[[0, -1]] = 0.0
    return u0, pgas.from_numpy(observed, mesh, boundary=burgers.BOUNDARY), c, r


# ---- Inversion ----------------------------------------------------------------------------
# Gradient descent on theta = log(nu) with the fixed step rate / H0, where H0 = |d final /
# d theta|**2 at the first guess (a central difference of two forward runs) is the misfit's
# Gauss-Newton curvature there: for a misfit quadratic in theta, rate 1 is the exact step.
# The flow's sensitivity to theta grows with nu (with the defaults H0 is 3.5 times the
# curvature at the truth), so from above the truth H <= H0 all the way down: rate 1
# undershoots, the misfit falls every iteration, and rates below 2 are stable. From below
# the truth the curvature grows on the way and a step sized at the guess overshoots: --start
# must exceed 1.
def invert(n: int, steps: int, iters: int, noise: float, devices: int, start: float = 3.0,
           rate: float = 1.0, seed: int = 0) -> dict:  # fmt: skip
    """Simulate the observation, then descend.

    Returns:
        ``nu`` and its relative ``error`` before each iteration and after the last, the
        ``loss`` (misfit) and its ``gradient`` with respect to ``theta`` at each iteration's
        ``nu``, the ``curvature`` H0, the ``observed`` velocity, and the seconds of one forward
        run (the median of 11) and of one iteration (the mean).
    """
    u0, obs, c, r = observe(n, steps, noise, devices, start, seed)

    @jax.jit
    def update(theta, u0, obs, size):
        loss, g = jax.value_and_grad(misfit)(theta, u0, obs, steps, c, r)
        return theta - size * g, loss, g

    theta, h = float(np.log(start * NU)), 1e-4  # h: the curvature's difference step in theta
    sensitivity = (forward(theta + h, u0, steps, c, r).to_numpy()
                   - forward(theta - h, u0, steps, c, r).to_numpy()) / (2 * h)  # fmt: skip
    curvature = float(np.sum(sensitivity**2))
    size = rate / curvature
    jax.block_until_ready(update(theta, u0, obs, size))  # compile before timing
    times = []
    for _ in range(11):  # the median of 11 calls: one forward is about a millisecond
        t0 = time.perf_counter()
        jax.block_until_ready(forward(theta, u0, steps, c, r))
        times.append(time.perf_counter() - t0)
    nus, losses, gradients, t0 = [start * NU], [], [], time.perf_counter()
    for _ in range(iters):
        new, loss, g = update(theta, u0, obs, size)
        theta = float(new)  # a number on the host, as the first: one compile
        losses.append(float(loss))
        gradients.append(float(g))
        nus.append(float(np.exp(theta)))
    t_iters = time.perf_counter() - t0
    return {"nu": nus, "error": [abs(nu - NU) / NU for nu in nus], "loss": losses,
            "gradient": gradients, "curvature": curvature, "observed": obs.to_numpy(),
            "seconds_forward": float(np.median(times)),
            "seconds_per_iteration": t_iters / iters}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    """The command line: validate, run :func:`invert`, print the results."""
    p = burgers.command_line(__doc__.splitlines()[0], steps=1200, iters=30)
    p.add_argument("--start", type=float, default=3.0, help="first guess, times the truth")
    p.add_argument("--rate", type=float, default=1.0, help="step, times 1 / H0 (below 2)")
    args = burgers.arguments(p, argv)
    if not args.start > 1:
        p.error(
            f"--start {args.start}: the descent's step is sized by the curvature at the first "
            "guess, which overshoots from below the truth; give a factor above 1 (default 3)"
        )
    if not 0 < args.rate < 2:
        p.error(f"--rate {args.rate}: the descent converges for 0 < rate < 2; give e.g. 1")
    burgers.start_jax(args.devices)
    result = invert(args.n, args.steps, args.iters, args.noise, args.devices, args.start,
                    args.rate)  # fmt: skip
    summary = {"n": args.n, "steps": args.steps, "iters": args.iters, "noise": args.noise,
               "start": args.start, "rate": args.rate, "devices": args.devices, "nu_true": NU,
               "nu_start": result["nu"][0], "nu_recovered": result["nu"][-1],
               "error_start": result["error"][0], "error_recovered": result["error"][-1],
               "loss_first": result["loss"][0], "loss_last": result["loss"][-1],
               "seconds_forward": result["seconds_forward"],
               "seconds_per_iteration": result["seconds_per_iteration"],
               "loss": result["loss"], "nu": result["nu"], "error": result["error"]}  # fmt: skip
    print(json.dumps(summary) if args.json else table(summary))
    return result


def table(s: dict) -> str:
    """The misfit and the viscosity at each iteration of ``main``'s summary ``s``, then the
    outcome and the times."""
    rows = ["iteration  misfit      nu          relative error of nu"]
    each = zip(s["loss"], s["nu"], s["error"])  # nu: one more, the last
    rows += [
        f"{i:9d}  {loss:10.4g}  {nu:10.4g}  {err:.4f}" for i, (loss, nu, err) in enumerate(each)
    ]
    rows.append(
        f"nu {s['nu_start']:.4g} -> {s['nu_recovered']:.4g} (truth {NU}) in {s['iters']} "
        f"iterations ({s['seconds_per_iteration']:.3g} s each, the forward "
        f"{s['seconds_forward']:.3g} s); relative error of the viscosity "
        f"{s['error_start']:.3f} -> {s['error_recovered']:.4f}"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
